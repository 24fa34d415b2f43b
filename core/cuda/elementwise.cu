// core/cuda/elementwise.cu — unary ops and their derivatives, broadcasting binary ops,
// where / masked fill, the causal (and sliding-window) fill, dropout (the mask computed from its
// seed, core/dropout_mask.h). The per-element formulas are core/elementwise_formulas.h, the
// same code as the CPU's reference loops.
#include <cmath>
#include <cstdint>

#include "core/cuda/bf16_out.cuh"  // bf16_bits
#include "core/cuda/check.h"
#include "core/elementwise_formulas.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// x, y are (n); y16 (may be null): y's bf16 rounding as well
template <class T>
__global__ void unary_kernel(UnaryOp op, const T* x, T* y, int64_t n, T a, T b, uint16_t* y16) {
  CTX_GRID_STRIDE(i, n) {
    const T r = formula::unary(op, x[i], a, b);
    y[i] = r;
    if (y16) y16[i] = bf16_bits(r);
  }
}

// x, y (either may be null: the op does not need it), dy, dx are (n); dx16 (may be null): dx's
// bf16 rounding as well
template <class T>
__global__ void unary_backward_kernel(UnaryOp op, const T* x, const T* y, const T* dy, T* dx,
                                      int64_t n, T a, T b, uint16_t* dx16) {
  CTX_GRID_STRIDE(i, n) {
    const T r = dy[i] * formula::unary_deriv(op, x ? x[i] : T(0), y ? y[i] : T(0), a, b);
    dx[i] = r;
    if (dx16) dx16[i] = bf16_bits(r);
  }
}

// out is (n) over nd's shape; a, b strided (stride 0 where broadcast)
template <class T>
__global__ void binary_kernel(BinaryOp op, const T* a, const T* b, T* out, NdStrides<2> nd, int64_t n) {
  CTX_GRID_STRIDE(i, n) {
    int64_t off[2];
    nd.offsets(i, off);
    out[i] = formula::binary(op, a[off[0]], b[off[1]]);
  }
}

// a, b, out all contiguous (n): V consecutive elements a thread by 16-byte accesses (V = 1: one);
// no index arithmetic (the strided kernel's 64-bit division per element halved the residual adds'
// bandwidth on an H200)
template <class T, int V>
__global__ void binary_flat_kernel(BinaryOp op, const T* a, const T* b, T* out, int64_t n) {
  using P = Pack<T, V>;
  CTX_GRID_STRIDE(i, n / V) {
    const P x = reinterpret_cast<const P*>(a)[i], y = reinterpret_cast<const P*>(b)[i];
    P z;
    for (int e = 0; e < V; ++e) z.x[e] = formula::binary(op, x.x[e], y.x[e]);
    reinterpret_cast<P*>(out)[i] = z;
  }
  if (V > 1 && blockIdx.x == 0)  // the tail past the last whole pack
    for (int64_t i = n / V * V + threadIdx.x; i < n; i += blockDim.x) out[i] = formula::binary(op, a[i], b[i]);
}

// y is (n) over nd's shape; mask strided (broadcast), t / f contiguous like y or scalars
template <class T, class M>
__global__ void select_kernel(const M* mask, const T* t, T ts, const T* f, T fs, T* y,
                              NdStrides<1> nd, int64_t n) {
  CTX_GRID_STRIDE(i, n) {
    int64_t off[1];
    nd.offsets(i, off);
    y[i] = mask[off[0]] != M(0) ? (t ? t[i] : ts) : (f ? f[i] : fs);
  }
}

// x is (N, Tq, S)
template <class T>
__global__ void causal_fill_kernel(T* x, int64_t N, int64_t Tq, int64_t S, T v, int64_t diag,
                                   int64_t window) {
  CTX_GRID_STRIDE(e, N * Tq * S) {
    const int64_t j = e % S, i = (e / S) % Tq;
    if (j > i + diag || (window > 0 && j <= i + diag - window)) x[e] = v;
  }
}

template <class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, DropoutMask m) {
  m = m.resolved();  // a recorded step's seed: read where it was written before the replay
  CTX_GRID_STRIDE(i, n) y[i] = x[i] * m.factor<T>((uint64_t)i);
}

}  // namespace

template <class T>
void unary(UnaryOp op, const T* x, T* y, int64_t n, T a, T b, uint16_t* y16) {
  if (n == 0) return;
  CTX_LAUNCH(unary_kernel<T>, grid_for(n), kThreads, 0, stream(), op, x, y, n, a, b, y16);
  CTX_CUDA_LAUNCH_CHECK("unary_kernel");
}

template <class T>
void unary_backward(UnaryOp op, const T* x, const T* y, const T* dy, T* dx, int64_t n, T a, T b, uint16_t* dx16) {
  if (n == 0) return;
  CTX_LAUNCH(unary_backward_kernel<T>, grid_for(n), kThreads, 0, stream(), op, x, y, dy, dx, n, a, b, dx16);
  CTX_CUDA_LAUNCH_CHECK("unary_backward_kernel");
}

template <class T>
void binary(BinaryOp op, const T* a, const T* b, T* out, const NdStrides<2>& nd, int64_t n) {
  if (n == 0) return;
  const bool flat = nd.nd == 1 && nd.stride[0][0] == 1 && nd.stride[1][0] == 1;  // a, b from their offsets
  if (flat) {
    const T *pa = a + nd.offset[0], *pb = b + nd.offset[1];
    constexpr int V = kPack<T>;
    if (packs<T>(0, {pa, pb, out}))  // (any length: the kernel's tail takes the rest)
      CTX_LAUNCH((binary_flat_kernel<T, V>), grid_for(n / V + 1), kThreads, 0, stream(), op, pa, pb, out, n);
    else
      CTX_LAUNCH((binary_flat_kernel<T, 1>), grid_for(n), kThreads, 0, stream(), op, pa, pb, out, n);
    CTX_CUDA_LAUNCH_CHECK("binary_flat_kernel");
    return;
  }
  CTX_LAUNCH(binary_kernel<T>, grid_for(n), kThreads, 0, stream(), op, a, b, out, nd, n);
  CTX_CUDA_LAUNCH_CHECK("binary_kernel");
}

template <class T, class M>
void select(const M* mask, const T* t, T ts, const T* f, T fs, T* y, const NdStrides<1>& nd, int64_t n) {
  if (n == 0) return;
  CTX_LAUNCH((select_kernel<T, M>), grid_for(n), kThreads, 0, stream(), mask, t, ts, f, fs, y, nd, n);
  CTX_CUDA_LAUNCH_CHECK("select_kernel");
}

template <class T>
void causal_fill(T* x, int64_t N, int64_t Tq, int64_t S, T v, int64_t diag, int64_t window) {
  const int64_t n = N * Tq * S;
  if (n == 0) return;
  CTX_LAUNCH(causal_fill_kernel<T>, grid_for(n), kThreads, 0, stream(), x, N, Tq, S, v, diag, window);
  CTX_CUDA_LAUNCH_CHECK("causal_fill_kernel");
}

template <class T>
void dropout(const T* x, T* y, int64_t n, const DropoutMask& m) {
  if (n == 0) return;
  CTX_LAUNCH(dropout_kernel<T>, grid_for(n), kThreads, 0, stream(), x, y, n, m);
  CTX_CUDA_LAUNCH_CHECK("dropout_kernel");
}

#define CTX_INST_SELECT(T, M) \
  template void select<T, M>(const M*, const T*, T, const T*, T, T*, const NdStrides<1>&, int64_t);
#define CTX_INST_ELEMENTWISE(T)                                                                     \
  template void unary<T>(UnaryOp, const T*, T*, int64_t, T, T, uint16_t*);                          \
  template void unary_backward<T>(UnaryOp, const T*, const T*, const T*, T*, int64_t, T, T, uint16_t*); \
  template void binary<T>(BinaryOp, const T*, const T*, T*, const NdStrides<2>&, int64_t);          \
  template void causal_fill<T>(T*, int64_t, int64_t, int64_t, T, int64_t, int64_t);                 \
  template void dropout<T>(const T*, T*, int64_t, const DropoutMask&);                              \
  CTX_INST_SELECT(T, float) CTX_INST_SELECT(T, double) CTX_INST_SELECT(T, int32_t) CTX_INST_SELECT(T, int64_t)
CTX_INST_ELEMENTWISE(float)
CTX_INST_ELEMENTWISE(double)

}  // namespace ctx::cuda
