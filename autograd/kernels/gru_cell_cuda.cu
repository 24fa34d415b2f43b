// autograd/kernels/gru_cell_cuda.cu — the CUDA kernels of the GRU cell (gru_cell.h; semantics
// there, the CPU twin in gru_cell_cpu.cpp), compiled into libctxlab_cuda.so and registered for
// Device::CUDA as it loads: one thread per (b, j) of [B, H], elementwise, no reductions (the
// GEMMs around it are the backend's). Like core/cuda/, it includes only core/cuda/compat.h (through
// check.h / launch.h) for CUDA things, so the same text runs on the emulator.
#include <cmath>
#include <cstdint>

#include "autograd/kernels/gru_cell.h"
#include "core/cuda/check.h"
#include "core/cuda/dispatch.h"
#include "core/cuda/launch.h"

namespace ctx::kernels {
namespace {
using cuda::grid_for;
using cuda::kThreads;

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

template <class T>
void launch_forward(const T* xg, const T* hg, const T* bhn, const T* hp, T* h, T* rzn, T* hn, int64_t B, int64_t H) {
  if (B * H == 0) return;
  CTX_LAUNCH(gru_forward_kernel<T>, grid_for(B * H), kThreads, 0, cuda::stream(), xg, hg, bhn, hp, h, rzn, hn, B, H);
  CTX_CUDA_LAUNCH_CHECK("gru_forward_kernel");
}

template <class T>
void launch_backward(const T* gy, const T* dhc, const T* hp, const T* rzn, const T* hn, T* d1, T* d2, T* dh,
                     int64_t B, int64_t H) {
  if (B * H == 0) return;
  CTX_LAUNCH(gru_backward_kernel<T>, grid_for(B * H), kThreads, 0, cuda::stream(), gy, dhc, hp, rzn, hn, d1, d2, dh, B, H);
  CTX_CUDA_LAUNCH_CHECK("gru_backward_kernel");
}

template <class T>
T* ptr(Tensor& t) { return t.data<T>(); }
template <class T>
const T* ptr(const Tensor& t) { return t.data<T>(); }

// The arguments are checked (gru_cell.cpp) before these run.
void forward(const Tensor& xg, const Tensor& hg, const Tensor& bhn, const Tensor& hp, Tensor& h, Tensor& rzn,
             Tensor& hn) {
  CTX_CUDA_DISPATCH_FLOAT(hp.dtype(), "gru_cell_forward",
                          launch_forward<T>(ptr<T>(xg), ptr<T>(hg), ptr<T>(bhn), ptr<T>(hp), ptr<T>(h), ptr<T>(rzn),
                                            ptr<T>(hn), hp.size(0), hp.size(1)));
}

void backward(const Tensor& gy, const Tensor& dhc, const Tensor& hp, const Tensor& rzn, const Tensor& hn, Tensor& d1,
              Tensor& d2, Tensor& dh) {
  CTX_CUDA_DISPATCH_FLOAT(hp.dtype(), "gru_cell_backward",
                          launch_backward<T>(ptr<T>(gy), ptr<T>(dhc), ptr<T>(hp), ptr<T>(rzn), ptr<T>(hn), ptr<T>(d1),
                                             ptr<T>(d2), ptr<T>(dh), hp.size(0), hp.size(1)));
}

[[maybe_unused]] const bool g_registered = (gru_cell_forward.add(Device::CUDA, &forward, __FILE__),
                                            gru_cell_backward.add(Device::CUDA, &backward, __FILE__), true);

}  // namespace
}  // namespace ctx::kernels
