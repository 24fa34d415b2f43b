// autograd/kernels/cope_cpu.cpp — the CPU kernels of CoPE's gated positions (cope.h, the
// semantics; registered below for Device::CPU): one scan per query row (cope_formula.h), rows in
// parallel. Its CUDA twin is cope_cuda.cu.
#include "autograd/kernels/cope.h"
#include "autograd/kernels/cope_formula.h"
#include "core/cpu/parallel.h"

namespace ctx::kernels {
namespace {

// The arguments are checked (cope.cpp) before these run.
template <class F>
void forward_t(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, double scale, Tensor& out,
               Tensor& psum) {
  const int64_t T = a.size(2), S = a.size(3), np = z.size(3), R = a.numel() / S;
  const F *ap = a.data<F>(), *zp = z.data<F>();
  F *op = out.data<F>(), *pp = psum.data<F>();
#pragma omp parallel for schedule(static) if (cpu::parallel_pays(R * S * 2))
  for (int64_t r = 0; r < R; ++r)
    cope_row_forward(ap + r * S, zp + r * np, S, np, q_pos0 + r % T, window, (F)scale, op + r * S, pp + r * S);
}

template <class F>
void backward_t(const Tensor& dout, const Tensor& a, const Tensor& z, const Tensor& psum, int64_t q_pos0,
                int64_t window, double scale, Tensor& da, Tensor& dz) {
  const int64_t T = a.size(2), S = a.size(3), np = z.size(3), R = a.numel() / S;
  const F *dp = dout.data<F>(), *ap = a.data<F>(), *zp = z.data<F>(), *pp = psum.data<F>();
  F *dap = da.data<F>(), *dzp = dz.data<F>();
#pragma omp parallel for schedule(static) if (cpu::parallel_pays(R * S * 2))
  for (int64_t r = 0; r < R; ++r)
    cope_row_backward(dp + r * S, ap + r * S, zp + r * np, pp + r * S, S, np, q_pos0 + r % T, window, (F)scale,
                      dap + r * S, dzp + r * np);
}

void forward(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, double scale, Tensor& out,
             Tensor& psum) {
  if (a.dtype() == DType::F32)
    forward_t<float>(a, z, q_pos0, window, scale, out, psum);
  else
    forward_t<double>(a, z, q_pos0, window, scale, out, psum);
}

void backward(const Tensor& dout, const Tensor& a, const Tensor& z, const Tensor& psum, int64_t q_pos0,
              int64_t window, double scale, Tensor& da, Tensor& dz) {
  if (a.dtype() == DType::F32)
    backward_t<float>(dout, a, z, psum, q_pos0, window, scale, da, dz);
  else
    backward_t<double>(dout, a, z, psum, q_pos0, window, scale, da, dz);
}

[[maybe_unused]] const bool g_registered = (cope_forward.add(Device::CPU, &forward, __FILE__),
                                            cope_backward.add(Device::CPU, &backward, __FILE__), true);

}  // namespace
}  // namespace ctx::kernels
