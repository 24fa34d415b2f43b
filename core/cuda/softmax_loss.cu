// core/cuda/softmax_loss.cu — softmax / log-softmax over the last dim with their backward (also
// under a causal mask: Backend::causal_softmax, core/causal_rows.h), and
// cross-entropy over logits with its gradient. One block per row; row sums and maxima through
// the fixed trees of block_reduce.cuh (deterministic). Semantics of core/cpu/ref_kernels.h:
// a fully masked row (all -inf) gives softmax 0 / log-softmax -inf; a target < 0 is ignored.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cuda/bf16_out.cuh"  // bf16_bits
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
// One block per row of logits [N, V], read once: each thread keeps a running max m and its sum of
// e^(z - m) (rescaled when m grows), then the block's max M, each thread's sum rescaled to M, and
// the block's sum. (Two passes, max then sum, read GPT-2's 201 KB rows twice: 1.4 ms of a step
// on an H200.)
template <class T, class I>
__global__ void cross_entropy_kernel(const T* logits, const I* tgt, T* loss, T* lse, int64_t N, int64_t V) {
  CTX_DYNAMIC_SHARED(T, buf);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* z = logits + n * V;
    T m = -INFINITY, s = T(0);
    for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
      const T x = z[v];
      if (x > m) {
        s = s * std::exp(m - x) + T(1);
        m = x;
      } else {
        s += m == -INFINITY ? T(0) : std::exp(x - m);  // (x NaN: NaN, as the two-pass sum had)
      }
    }
    const T mx = block_reduce(m, buf, MaxOp());
    s = block_reduce(m == -INFINITY ? T(0) : s * std::exp(m - mx), buf, SumOp());
    if (threadIdx.x == 0) {
      const T l = std::log(s) + mx;
      lse[n] = l;
      loss[n] = tgt[n] < 0 ? T(0) : l - z[tgt[n]];
    }
  }
}

// dz = dloss (softmax(z) - onehot(t)) (0 for an ignored row). One block per row, V consecutive
// elements a thread by 16-byte accesses where V and the pointers allow (the flat kernel divided
// every index by V). dz16 (f32 only; may be null): dz rounded to bf16 as well, in the same pass
// (the LM head's GEMMs read it under --precision bf16 instead of converting dz).
template <class T, class I, int W>
__global__ void cross_entropy_backward_kernel(const T* logits, const I* tgt, const T* lse, const T* dloss,
                                              T* dz, uint16_t* dz16, int64_t N, int64_t V) {
  using P = Pack<T, W>;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const int64_t t = (int64_t)tgt[n];
    const T g = t < 0 ? T(0) : dloss[n], l = lse[n];
    const P* zr = reinterpret_cast<const P*>(logits + n * V);
    P* dr = reinterpret_cast<P*>(dz + n * V);
    for (int64_t c = threadIdx.x; c < V / W; c += blockDim.x) {
      const P z = zr[c];
      P d;
      for (int e = 0; e < W; ++e) d.x[e] = t < 0 ? T(0) : g * std::exp(z.x[e] - l);
      dr[c] = d;
      if (dz16)
        for (int e = 0; e < W; ++e) dz16[n * V + c * W + e] = bf16_bits(d.x[e]);
    }
    __syncthreads();  // the target's element after every thread's store to its pack
    if (threadIdx.x == 0 && t >= 0) {
      dz[n * V + t] -= g;
      if (dz16) dz16[n * V + t] = bf16_bits(dz[n * V + t]);
    }
  }
}

}  // namespace

template <class T>
void softmax(const T* x, T* y, int64_t N, int64_t C, bool log, CausalRows rows) {
  if (N == 0 || C == 0) return;
  const int th = row_threads(C);
  CTX_LAUNCH(softmax_kernel<T>, row_grid(N), th, th * sizeof(T), stream(), x, y, N, C, log, rows);
  CTX_CUDA_LAUNCH_CHECK("softmax_kernel");
}

template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C, bool log, CausalRows rows) {
  if (N == 0 || C == 0) return;
  const int th = row_threads(C);
  CTX_LAUNCH(softmax_backward_kernel<T>, row_grid(N), th, th * sizeof(T), stream(), y, dy, dx, N, C, log, rows);
  CTX_CUDA_LAUNCH_CHECK("softmax_backward_kernel");
}

template <class T, class I>
void cross_entropy(const T* logits, const I* tgt, T* loss, T* lse, int64_t N, int64_t V) {
  if (N == 0) return;
  const int th = row_threads(V);
  CTX_LAUNCH((cross_entropy_kernel<T, I>), row_grid(N), th, th * sizeof(T), stream(), logits, tgt, loss, lse, N, V);
  CTX_CUDA_LAUNCH_CHECK("cross_entropy_kernel");
}

template <class T, class I>
void cross_entropy_backward(const T* logits, const I* tgt, const T* lse, const T* dloss, T* dlogits,
                            uint16_t* dlogits16, int64_t N, int64_t V) {
  if (N * V == 0) return;
  constexpr int W = kPack<T>;
  if (!std::is_same_v<T, float>) dlogits16 = nullptr;
  if (packs<T>(V, {logits, dlogits}))
    CTX_LAUNCH((cross_entropy_backward_kernel<T, I, W>), row_grid(N), row_threads(V / W), 0, stream(), logits, tgt, lse,
               dloss, dlogits, dlogits16, N, V);
  else
    CTX_LAUNCH((cross_entropy_backward_kernel<T, I, 1>), row_grid(N), row_threads(V), 0, stream(), logits, tgt, lse, dloss,
               dlogits, dlogits16, N, V);
  CTX_CUDA_LAUNCH_CHECK("cross_entropy_backward_kernel");
}

#define CTX_INST_CE(T, I)                                                                       \
  template void cross_entropy<T, I>(const T*, const I*, T*, T*, int64_t, int64_t);              \
  template void cross_entropy_backward<T, I>(const T*, const I*, const T*, const T*, T*, uint16_t*, int64_t, int64_t);
#define CTX_INST_SOFTMAX(T)                                                          \
  template void softmax<T>(const T*, T*, int64_t, int64_t, bool, CausalRows);                    \
  template void softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, bool, CausalRows); \
  CTX_INST_CE(T, int32_t) CTX_INST_CE(T, int64_t)
CTX_INST_SOFTMAX(float)
CTX_INST_SOFTMAX(double)

}  // namespace ctx::cuda
