// autograd/kernels/cope_cuda.cu — the CUDA kernels of CoPE's gated positions (cope.h; the CPU
// twin in cope_cpu.cpp, the row formulas in cope_formula.h), compiled into libctxlab_cuda.so and
// registered for Device::CUDA as it loads: one thread per query row (the scan, and the attention's
// row softmax, are sequential over the row's keys; the GEMMs around it are the backend's). Like core/cuda/, it includes only
// core/cuda/compat.h (through check.h / launch.h) for CUDA things, so the same text runs on the
// emulator.
#include <cstdint>

#include "autograd/kernels/cope.h"
#include "autograd/kernels/cope_formula.h"
#include "core/cuda/check.h"
#include "core/cuda/dispatch.h"
#include "core/cuda/launch.h"

namespace ctx::kernels {
namespace {
using cuda::grid_for;
using cuda::kThreads;

template <class F>
__global__ void cope_forward_kernel(const F* a, const F* z, int64_t R, int64_t T, int64_t S, int64_t np,
                                    int64_t q_pos0, int64_t window, int64_t sinks, F scale, F* out, F* psum) {
  CTX_GRID_STRIDE(r, R) {
    cope_row_forward(a + r * S, z + r * np, S, np, q_pos0 + r % T, window, sinks, scale, out + r * S, psum + r * S);
  }
}

template <class F>
__global__ void cope_backward_kernel(const F* dout, const F* a, const F* z, const F* psum, int64_t R, int64_t T,
                                     int64_t S, int64_t np, int64_t q_pos0, int64_t window, int64_t sinks, F scale,
                                     F* da, F* dz) {
  CTX_GRID_STRIDE(r, R) {
    cope_row_backward(dout + r * S, a + r * S, z + r * np, psum + r * S, S, np, q_pos0 + r % T, window, sinks, scale,
                      da + r * S, dz + r * np);
  }
}

// The attention's rows: the scan, then the row's softmax in the same thread (the row is its own).
template <class F>
__global__ void cope_softmax_forward_kernel(const F* a, const F* z, int64_t R, int64_t T, int64_t S, int64_t np,
                                            int64_t q_pos0, int64_t window, int64_t sinks, F scale, F* p, F* psum) {
  CTX_GRID_STRIDE(r, R) {
    cope_row_forward(a + r * S, z + r * np, S, np, q_pos0 + r % T, window, sinks, scale, p + r * S, psum + r * S);
    cope_row_softmax(p + r * S, S, q_pos0 + r % T, window, sinks);
  }
}

template <class F>
__global__ void cope_softmax_backward_kernel(F* dp, const F* p, const F* a, const F* z, const F* psum, int64_t R,
                                             int64_t T, int64_t S, int64_t np, int64_t q_pos0, int64_t window,
                                             int64_t sinks, F scale, F* da, F* dz) {
  CTX_GRID_STRIDE(r, R) {
    cope_row_softmax_backward(p + r * S, dp + r * S, S, q_pos0 + r % T, window, sinks);  // dp -> dL/dlogits
    cope_row_backward(dp + r * S, a + r * S, z + r * np, psum + r * S, S, np, q_pos0 + r % T, window, sinks, scale,
                      da + r * S, dz + r * np);
  }
}

// The arguments are checked (cope.cpp) before these run.
void forward(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, int64_t sinks, double scale,
             Tensor& out, Tensor& psum) {
  const int64_t Tq = a.size(2), S = a.size(3), np = z.size(3), R = S ? a.numel() / S : 0;
  if (R == 0) return;
  CTX_CUDA_DISPATCH_FLOAT(a.dtype(), "cope_forward", {
    CTX_LAUNCH(cope_forward_kernel<T>, grid_for(R), kThreads, 0, cuda::stream(), a.data<T>(), z.data<T>(), R, Tq, S, np, q_pos0,
               window, sinks, (T)scale, out.data<T>(), psum.data<T>());
    CTX_CUDA_LAUNCH_CHECK("cope_forward_kernel");
  });
}

void backward(const Tensor& dout, const Tensor& a, const Tensor& z, const Tensor& psum, int64_t q_pos0,
              int64_t window, int64_t sinks, double scale, Tensor& da, Tensor& dz) {
  const int64_t Tq = a.size(2), S = a.size(3), np = z.size(3), R = S ? a.numel() / S : 0;
  if (R == 0) return;
  CTX_CUDA_DISPATCH_FLOAT(a.dtype(), "cope_backward", {
    CTX_LAUNCH(cope_backward_kernel<T>, grid_for(R), kThreads, 0, cuda::stream(), dout.data<T>(), a.data<T>(), z.data<T>(),
               psum.data<T>(), R, Tq, S, np, q_pos0, window, sinks, (T)scale, da.data<T>(), dz.data<T>());
    CTX_CUDA_LAUNCH_CHECK("cope_backward_kernel");
  });
}

void softmax_forward(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, int64_t sinks, double scale,
                     Tensor& p, Tensor& psum) {
  const int64_t Tq = a.size(2), S = a.size(3), np = z.size(3), R = S ? a.numel() / S : 0;
  if (R == 0) return;
  CTX_CUDA_DISPATCH_FLOAT(a.dtype(), "cope_softmax_forward", {
    CTX_LAUNCH(cope_softmax_forward_kernel<T>, grid_for(R), kThreads, 0, cuda::stream(), a.data<T>(), z.data<T>(), R, Tq, S, np,
               q_pos0, window, sinks, (T)scale, p.data<T>(), psum.data<T>());
    CTX_CUDA_LAUNCH_CHECK("cope_softmax_forward_kernel");
  });
}

void softmax_backward(Tensor& dp, const Tensor& p, const Tensor& a, const Tensor& z, const Tensor& psum,
                      int64_t q_pos0, int64_t window, int64_t sinks, double scale, Tensor& da, Tensor& dz) {
  const int64_t Tq = a.size(2), S = a.size(3), np = z.size(3), R = S ? a.numel() / S : 0;
  if (R == 0) return;
  CTX_CUDA_DISPATCH_FLOAT(a.dtype(), "cope_softmax_backward", {
    CTX_LAUNCH(cope_softmax_backward_kernel<T>, grid_for(R), kThreads, 0, cuda::stream(), dp.data<T>(), p.data<T>(),
               a.data<T>(), z.data<T>(), psum.data<T>(), R, Tq, S, np, q_pos0, window, sinks, (T)scale, da.data<T>(),
               dz.data<T>());
    CTX_CUDA_LAUNCH_CHECK("cope_softmax_backward_kernel");
  });
}

[[maybe_unused]] const bool g_registered = (cope_forward.add(Device::CUDA, &forward, __FILE__),
                                            cope_backward.add(Device::CUDA, &backward, __FILE__),
                                            cope_softmax_forward.add(Device::CUDA, &softmax_forward, __FILE__),
                                            cope_softmax_backward.add(Device::CUDA, &softmax_backward, __FILE__),
                                            true);

}  // namespace
}  // namespace ctx::kernels
