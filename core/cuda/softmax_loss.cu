// core/cuda/softmax_loss.cu — softmax / log-softmax over the last dim with their backward (also
// under a causal mask: Backend::causal_softmax, core/causal_rows.h), and
// cross-entropy over logits with its gradient. One block per row; row sums and maxima through
// the fixed trees of block_reduce.cuh (deterministic). Semantics of core/cpu/ref_kernels.h:
// a fully masked row (all -inf) gives softmax 0 / log-softmax -inf; a target < 0 is ignored.
#include <cmath>
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// x, y are (N, C). With a mask (rows.Tq > 0) each row is the softmax of its visible columns [lo, hi)
// and 0 (log: -inf) elsewhere, the masked inputs never read; without one [lo, hi) = [0, C).
template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t N, int64_t C, bool log, CausalRows rows) {
  CTX_DYNAMIC_SHARED(T, buf);  // blockDim.x
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const int64_t lo = rows.lo(n), h = rows.hi(n, C), hi = h > lo ? h : lo;
    const T out = log ? T(-INFINITY) : T(0);  // the masked columns' value
    T mx = -INFINITY;
    for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) mx = MaxOp()(mx, xr[c]);
    mx = block_reduce(mx, buf, MaxOp());
    if (mx == -INFINITY) {  // fully masked row
      for (int64_t c = threadIdx.x; c < C; c += blockDim.x) yr[c] = out;
      continue;
    }
    T s = T(0);
    if (log) {
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) s += std::exp(xr[c] - mx);
      s = block_reduce(s, buf, SumOp());
      const T ls = std::log(s) + mx;
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) yr[c] = xr[c] - ls;
    } else {  // exp once, stored, then scaled (each thread rescales what it wrote)
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) {
        yr[c] = std::exp(xr[c] - mx);
        s += yr[c];
      }
      s = block_reduce(s, buf, SumOp());
      const T inv = T(1) / s;
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) yr[c] *= inv;
    }
    for (int64_t c = threadIdx.x; c < lo; c += blockDim.x) yr[c] = out;
    for (int64_t c = hi + threadIdx.x; c < C; c += blockDim.x) yr[c] = out;
  }
}

// y, dy, dx are (N, C); with a mask, dx = 0 on the masked columns and dy is read only where visible
template <class T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, int64_t N, int64_t C, bool log,
                                        CausalRows rows) {
  CTX_DYNAMIC_SHARED(T, buf);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* yr = y + n * C;
    const T* gr = dy + n * C;
    T* dr = dx + n * C;
    const int64_t lo = rows.lo(n), h = rows.hi(n, C), hi = h > lo ? h : lo;
    T s = T(0);
    if (log) {  // dx = dy - softmax * sum(dy)
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) s += gr[c];
      s = block_reduce(s, buf, SumOp());
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) dr[c] = gr[c] - std::exp(yr[c]) * s;
    } else {  // dx = y * (dy - sum(dy * y))
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) s += gr[c] * yr[c];
      s = block_reduce(s, buf, SumOp());
      for (int64_t c = lo + threadIdx.x; c < hi; c += blockDim.x) dr[c] = yr[c] * (gr[c] - s);
    }
    for (int64_t c = threadIdx.x; c < lo; c += blockDim.x) dr[c] = T(0);
    for (int64_t c = hi + threadIdx.x; c < C; c += blockDim.x) dr[c] = T(0);
  }
}

// logits is (N, V); tgt, loss, lse are (N)
template <class T, class I>
__global__ void cross_entropy_kernel(const T* logits, const I* tgt, T* loss, T* lse, int64_t N, int64_t V) {
  CTX_DYNAMIC_SHARED(T, buf);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* z = logits + n * V;
    T mx = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) mx = MaxOp()(mx, z[v]);
    mx = block_reduce(mx, buf, MaxOp());
    T s = T(0);
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) s += std::exp(z[v] - mx);
    s = block_reduce(s, buf, SumOp());
    if (threadIdx.x == 0) {
      const T l = std::log(s) + mx;
      lse[n] = l;
      loss[n] = tgt[n] < 0 ? T(0) : l - z[tgt[n]];
    }
  }
}

// logits, dlogits are (N, V); tgt, lse, dloss are (N)
template <class T, class I>
__global__ void cross_entropy_backward_kernel(const T* logits, const I* tgt, const T* lse, const T* dloss,
                                              T* dz, int64_t N, int64_t V) {
  CTX_GRID_STRIDE(e, N * V) {
    const int64_t n = e / V, v = e % V;
    const int64_t t = (int64_t)tgt[n];
    if (t < 0) {
      dz[e] = T(0);
    } else {
      const T g = dloss[n];
      T d = g * std::exp(logits[e] - lse[n]);
      if (v == t) d -= g;
      dz[e] = d;
    }
  }
}

}  // namespace

template <class T>
void softmax(const T* x, T* y, int64_t N, int64_t C, bool log, CausalRows rows) {
  if (N == 0 || C == 0) return;
  const int th = row_threads(C);
  CTX_LAUNCH(softmax_kernel<T>, row_grid(N), th, th * sizeof(T), 0, x, y, N, C, log, rows);
  CTX_CUDA_LAUNCH_CHECK("softmax_kernel");
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C, bool log, CausalRows rows) {
  if (N == 0 || C == 0) return;
  const int th = row_threads(C);
  CTX_LAUNCH(softmax_backward_kernel<T>, row_grid(N), th, th * sizeof(T), 0, y, dy, dx, N, C, log, rows);
  CTX_CUDA_LAUNCH_CHECK("softmax_backward_kernel");
}

template <class T, class I>
void cross_entropy(const T* logits, const I* tgt, T* loss, T* lse, int64_t N, int64_t V) {
  if (N == 0) return;
  const int th = row_threads(V);
  CTX_LAUNCH((cross_entropy_kernel<T, I>), row_grid(N), th, th * sizeof(T), 0, logits, tgt, loss, lse, N, V);
  CTX_CUDA_LAUNCH_CHECK("cross_entropy_kernel");
}

template <class T, class I>
void cross_entropy_backward(const T* logits, const I* tgt, const T* lse, const T* dloss, T* dlogits,
                            int64_t N, int64_t V) {
  if (N * V == 0) return;
  CTX_LAUNCH((cross_entropy_backward_kernel<T, I>), grid_for(N * V), kThreads, 0, 0, logits, tgt, lse, dloss,
             dlogits, N, V);
  CTX_CUDA_LAUNCH_CHECK("cross_entropy_backward_kernel");
}

#define CTX_INST_CE(T, I)                                                                       \
  template void cross_entropy<T, I>(const T*, const I*, T*, T*, int64_t, int64_t);              \
  template void cross_entropy_backward<T, I>(const T*, const I*, const T*, const T*, T*, int64_t, int64_t);
#define CTX_INST_SOFTMAX(T)                                                          \
  template void softmax<T>(const T*, T*, int64_t, int64_t, bool, CausalRows);                    \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, bool, CausalRows); \
  CTX_INST_CE(T, int32_t) CTX_INST_CE(T, int64_t)
CTX_INST_SOFTMAX(float)
CTX_INST_SOFTMAX(double)

}  // namespace ctx::cuda
