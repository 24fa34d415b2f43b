// autograd/kernels/fire_cuda.cu — the CUDA kernel of FIRE's normalised distances (fire.h; the
// CPU twin in fire_cpu.cpp, the formula in fire_formula.h), compiled into libctxlab_cuda.so and
// registered for Device::CUDA as it loads: one thread per (b, i, j), elementwise. c and lm are
// read on the device (no host round trip). Like core/cuda/, it includes only core/cuda/compat.h
// (through check.h / launch.h) for CUDA things, so the same text runs on the emulator.
#include <cstdint>

#include "autograd/kernels/fire.h"
#include "autograd/kernels/fire_formula.h"
#include "core/cuda/check.h"
#include "core/cuda/dispatch.h"
#include "core/cuda/launch.h"

namespace ctx::kernels {
namespace {
using cuda::grid_for;
using cuda::kThreads;

template <class T>
__global__ void fire_kernel(const T* pq, const T* pk, const T* c, const T* lm, T init_L, T eps, T* x, T* dc, T* dl,
                            int64_t T_, int64_t S, int64_t n) {
  CTX_GRID_STRIDE(e, n) {
    const int64_t r = e / S, j = e % S, b = r / T_;
    fire_point(pq[r], pk[b * S + j], c[0], lm[0], init_L, eps, x[e], dc[e], dl[e]);
  }
}

template <class T>
void launch(const Tensor& pq, const Tensor& pk, const Tensor& c, const Tensor& lm, double init_L, double eps,
            Tensor& x, Tensor& dxdc, Tensor& dxdl) {
  const int64_t n = x.numel();
  if (n == 0) return;
  CTX_LAUNCH(fire_kernel<T>, grid_for(n), kThreads, 0, cuda::stream(), pq.data<T>(), pk.data<T>(), c.data<T>(), lm.data<T>(),
             (T)init_L, (T)eps, x.data<T>(), dxdc.data<T>(), dxdl.data<T>(), pq.size(1), pk.size(1), n);
  CTX_CUDA_LAUNCH_CHECK("fire_kernel");
}

// The arguments are checked (fire.cpp) before this runs.
void distances(const Tensor& pq, const Tensor& pk, const Tensor& c, const Tensor& lm, double init_L, double eps,
               Tensor& x, Tensor& dxdc, Tensor& dxdl) {
  CTX_CUDA_DISPATCH_FLOAT(pq.dtype(), "fire_distances", launch<T>(pq, pk, c, lm, init_L, eps, x, dxdc, dxdl));
}

[[maybe_unused]] const bool g_registered = (fire_distances.add(Device::CUDA, &distances, __FILE__), true);

}  // namespace
}  // namespace ctx::kernels
