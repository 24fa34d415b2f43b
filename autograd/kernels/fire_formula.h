// autograd/kernels/fire_formula.h — FIRE's normalised distance of one (query, key) pair and its
// two parameter derivatives (POSENC_SPEC §7.1; fire.h): the one definition that the CPU kernel
// (fire_cpu.cpp) and the CUDA kernel (fire_cuda.cu) both compile.
#pragma once
#include <cmath>

#include "core/host_device.h"

namespace ctx::kernels {

template <class F>
CTX_HOST_DEVICE inline F fire_sign(F v) {  // torch.sign: 0 at 0
  return v > F(0) ? F(1) : (v < F(0) ? F(-1) : F(0));
}

// pi, pj: query and key positions; c, lm: the parameters; writes x = num / den and dx/dc, dx/dlm.
template <class F>
CTX_HOST_DEVICE inline void fire_point(F pi, F pj, F c, F lm, F init_L, F eps, F& x, F& dxdc, F& dxdl) {
  const F u = pi - pj, cu = c * u;
  const F num = std::log(std::fabs(cu) + F(1));                    // psi(i - j)
  const F thr = std::fabs(lm * init_L);
  const F m = pi > thr ? pi : thr;                                 // max(thr, i)
  const F cm = c * m;
  const F den = std::log(std::fabs(cm) + F(1)) + eps;             // psi(max(thr, i)) + eps
  x = num / den;
  const F dnum_dc = fire_sign(cu) * u / (std::fabs(cu) + F(1));
  const F dden_dc = fire_sign(cm) * m / (std::fabs(cm) + F(1));
  const F dden_dm = fire_sign(cm) * c / (std::fabs(cm) + F(1));
  const F dm_dthr = thr > pi ? F(1) : (thr == pi ? F(0.5) : F(0));  // torch.maximum: 1/2 at a tie
  const F dthr_dlm = fire_sign(lm * init_L) * init_L;
  dxdc = (dnum_dc - x * dden_dc) / den;
  dxdl = -x / den * dden_dm * dm_dthr * dthr_dlm;
}

}  // namespace ctx::kernels
