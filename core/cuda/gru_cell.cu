// core/cuda/gru_cell.cu — one GRU time step with its gates fused (Backend::gru_cell_forward /
// gru_cell_backward; semantics in core/backend.h, the CPU twin in core/cpu/gru_cell.cpp): one
// thread per (b, j) of [B, H], elementwise, no reductions (the GEMMs around it are gemm.cu's).
#include <cmath>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

template <class T>
__device__ __forceinline__ T sigm(T x) {  // (1 + tanh(x / 2)) / 2, as the CPU
  return T(0.5) * std::tanh(T(0.5) * x) + T(0.5);
}

template <class T>
__global__ void gru_forward_kernel(const T* xg, const T* hg, const T* bhn, const T* hp, T* h, T* rzn, T* hn,
                                   int64_t B, int64_t H) {
  CTX_GRID_STRIDE(e, B * H) {
    const int64_t b = e / H, j = e % H, o = b * 3 * H;
    const T r = sigm(xg[o + j] + hg[o + j]), z = sigm(xg[o + H + j] + hg[o + H + j]);
    const T hv = hg[o + 2 * H + j] + bhn[j];
    const T n = std::tanh(xg[o + 2 * H + j] + r * hv);
    h[e] = n + z * (hp[e] - n);
    rzn[o + j] = r, rzn[o + H + j] = z, rzn[o + 2 * H + j] = n;
    hn[e] = hv;
  }
}

template <class T>
__global__ void gru_backward_kernel(const T* gy, const T* dhc, const T* hp, const T* rzn, const T* hn, T* d1,
                                    T* d2, T* dh, int64_t B, int64_t H) {
  CTX_GRID_STRIDE(e, B * H) {
    const int64_t b = e / H, j = e % H, o = b * 3 * H;
    const T g = gy[e] + dhc[e];
    const T r = rzn[o + j], z = rzn[o + H + j], n = rzn[o + 2 * H + j];
    const T dnp = (g - g * z) * (T(1) - n * n);
    const T dar = dnp * hn[e] * (r * (T(1) - r));
    const T daz = g * (hp[e] - n) * (z * (T(1) - z));
    d1[o + j] = dar, d1[o + H + j] = daz, d1[o + 2 * H + j] = dnp;
    d2[o + j] = dar, d2[o + H + j] = daz, d2[o + 2 * H + j] = dnp * r;
    dh[e] = g * z;
  }
}

}  // namespace

template <class T>
void gru_cell_forward(const T* xg, const T* hg, const T* bhn, const T* hp, T* h, T* rzn, T* hn, int64_t B, int64_t H) {
  if (B * H == 0) return;
  CTX_LAUNCH(gru_forward_kernel<T>, grid_for(B * H), kThreads, 0, 0, xg, hg, bhn, hp, h, rzn, hn, B, H);
  CTX_CUDA_LAUNCH_CHECK("gru_forward_kernel");
}

template <class T>
void gru_cell_backward(const T* gy, const T* dhc, const T* hp, const T* rzn, const T* hn, T* d1, T* d2, T* dh,
                       int64_t B, int64_t H) {
  if (B * H == 0) return;
  CTX_LAUNCH(gru_backward_kernel<T>, grid_for(B * H), kThreads, 0, 0, gy, dhc, hp, rzn, hn, d1, d2, dh, B, H);
  CTX_CUDA_LAUNCH_CHECK("gru_backward_kernel");
}

#define CTX_INST_GRU(T)                                                                                    \
  template void gru_cell_forward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t); \
  template void gru_cell_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t);
CTX_INST_GRU(float)
CTX_INST_GRU(double)

}  // namespace ctx::cuda
