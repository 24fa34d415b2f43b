// autograd/kernels/ode_rk4.h — FLOATER's RK4 integration in one call each way, the kernels of the
// `floater` encoding's ode_positions (autograd/ops_ode.cpp, their owner and only caller, whose
// composed loop is the reference): extension kernels (core/extension.h), not Backend methods.
// Registered for the CPU by ode_rk4_cpu.cpp; the argument checks every device runs first are in
// ode_rk4.cpp. No CUDA kernel (a sequential integration of [1, D] products would need a
// single-block kernel; not written): on CUDA, has() is false and ops_ode.cpp runs its composed
// loop. cmake/check_layers.py lets no library file but ops_ode.cpp include this header.
// tests/test_posenc_survey.cpp holds the fused op to the composed one (CTXLAB_FUSED_ODE=0).
#pragma once
#include <cstdint>

#include "core/extension.h"
#include "core/tensor.h"

namespace ctx::kernels {

// Field h(p, tau) = W2 tanh(W1 p + b1 + tau wt) + b2 (w1 [F, D], b1, wt [F], w2 [D, F], b2 [D]);
// S = (n - 1) substeps classic RK4 steps of eta = dt / substeps from p0 [D], stage times and
// points as in ops_ode.cpp, in the tensors' precision (f32 / f64, one dtype, all on the device
// called; dt > 0, substeps >= 1, n >= 2). Writes P [n, D] (p at every dt) and, for the backward,
// the stage points Pt [4S, D] and activations U [4S, F] (row 4 s + j).
using OdeRk4Forward = void(const Tensor& p0, const Tensor& w1, const Tensor& b1, const Tensor& wt, const Tensor& w2,
                           const Tensor& b2, double dt, int64_t substeps, Tensor& P, Tensor& Pt, Tensor& U);
extern ExtensionKernel<OdeRk4Forward> ode_rk4_forward;

// Given gP = dL/dP [n, D] and the forward's U: writes gp0 = dL/dp0 [D] and every stage's
// GK = dL/dk [4S, D] and GA = dL/d(W1 p + b1 + tau wt) [4S, F] (the weight gradients are GEMMs
// of these over the 4S rows: the caller's).
using OdeRk4Backward = void(const Tensor& gP, const Tensor& w1, const Tensor& w2, const Tensor& U, double dt,
                            int64_t substeps, Tensor& gp0, Tensor& GK, Tensor& GA);
extern ExtensionKernel<OdeRk4Backward> ode_rk4_backward;

}  // namespace ctx::kernels
