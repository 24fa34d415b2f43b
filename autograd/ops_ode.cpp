// autograd/ops_ode.cpp — ode_positions (ops_position_gen.h): FLOATER's positions from a fixed-step
// classic RK4 integration, as one node whose backward differentiates every stage of the unrolled
// solver (exact gradients of what the forward computed; not the adjoint method).
// Field: h(p, tau) = W2 u + b2, u = tanh(W1 p + b1 + tau wt). Step s (tau = s eta):
//   stage j = 1..4 at point p_j = p + c_j k_{j-1} (c = 0, eta/2, eta/2, eta), time tau + e_j
//   (e = 0, eta/2, eta/2, eta); p <- p + eta/6 (k1 + 2 k2 + 2 k3 + k4).
// Saved per step and stage (rows s*4 + j - 1): the points Pt [S*4, D] and activations U [S*4, F].
// Backward, s = S-1..0, with gp = dL/dp after step s (output gradient at positions included):
//   gk = eta/6 (1, 2, 2, 1) gp; for j = 4..1: ga_j = (W2^T gk_j) (1 - u_j^2), gp_j = W1^T ga_j,
//   gp += gp_j, gk_{j-1} += c_j gp_j. Then dW2 = GK^T U, db2 = sum GK, dW1 = GA^T Pt,
//   db1 = sum GA, dwt = GA^T tau (one GEMM each over all 4S stage rows).
// On a device with the RK4 kernels (the CPU; CTXLAB_FUSED_ODE=0 turns them off) the integration and
// its backward are one call each (autograd/kernels/ode_rk4_cpu.cpp, the same operations in the
// same order); the loop below is the reference, and the path of devices without them (CUDA). The
// kernels are this op's own extension kernels (core/extension.h), not Backend methods:
// autograd/kernels/ode_rk4.h declares them.
#include <vector>

#include "autograd/kernels/ode_rk4.h"
#include "autograd/ops_seq_util.h"
#include "autograd/ops_position_gen.h"

namespace ctx {
using namespace detail;

Variable ode_positions(const Variable& p0v, const Variable& w1v, const Variable& b1v,
                       const Variable& wtv, const Variable& w2v, const Variable& b2v,
                       const OdeSpec& spec) {
  const Tensor p0 = p0v.data(), w1 = w1v.data(), b1 = b1v.data(), wt = wtv.data(), w2 = w2v.data(),
               b2 = b2v.data();
  CTX_CHECK(p0.dim() == 1, "ode_positions: p0 must be [D], got ", p0.str());
  const int64_t D = p0.size(0);
  CTX_CHECK(w1.dim() == 2 && w1.size(1) == D, "ode_positions: fc.weight must be [F, ", D, "], got ", w1.str());
  const int64_t F = w1.size(0);
  CTX_CHECK(b1.dim() == 1 && b1.size(0) == F && wt.dim() == 1 && wt.size(0) == F,
            "ode_positions: fc.bias and time must be [", F, "], got ", b1.str(), " and ", wt.str());
  CTX_CHECK(w2.dim() == 2 && w2.size(0) == D && w2.size(1) == F, "ode_positions: proj.weight must be [",
            D, ", ", F, "], got ", w2.str());
  CTX_CHECK(b2.dim() == 1 && b2.size(0) == D, "ode_positions: proj.bias must be [", D, "], got ", b2.str());
  for (const Tensor* t : {&w1, &b1, &wt, &w2, &b2}) check_compatible(p0, *t, "ode_positions");
  CTX_CHECK(is_float(p0.dtype()), "ode_positions: expected float tensors, got ", p0.str());
  CTX_CHECK(spec.n >= 1 && spec.substeps >= 1 && spec.dt > 0, "ode_positions: need n >= 1, substeps >= 1, dt > 0");

  const int64_t S = (spec.n - 1) * spec.substeps;  // RK4 steps
  const bool f32 = p0.dtype() == DType::F32;
  // Stage times, in the tensor's precision: tau = s * eta, + eta/2, + eta/2, + eta.
  std::vector<double> tau((size_t)(4 * S));
  for (int64_t s = 0; s < S; ++s) {
    if (f32) {
      const float eta = (float)(spec.dt / (double)spec.substeps), t = (float)s * eta, h = eta / 2.f;
      const float v[4] = {t, t + h, t + h, t + eta};
      for (int j = 0; j < 4; ++j) tau[(size_t)(4 * s + j)] = v[j];
    } else {
      const double eta = spec.dt / (double)spec.substeps, t = (double)s * eta;
      const double v[4] = {t, t + eta / 2, t + eta / 2, t + eta};
      for (int j = 0; j < 4; ++j) tau[(size_t)(4 * s + j)] = v[j];
    }
  }
  const double eta = f32 ? (double)(float)(spec.dt / (double)spec.substeps) : spec.dt / (double)spec.substeps;
  const double c[4] = {0.0, eta / 2, eta / 2, eta};  // stage j's point: p + c_j k_{j-1}

  Tensor P = seq::like(p0, {spec.n, D});            // output
  Tensor Pt = seq::like(p0, {std::max<int64_t>(4 * S, 1), D}), U = seq::like(p0, {std::max<int64_t>(4 * S, 1), F});
  const Device dev = p0.device();
  const bool fused = S > 0 && use_fused(FastPath::OdeRk4, backend_of(p0)) && kernels::ode_rk4_forward.has(dev) &&
                     kernels::ode_rk4_backward.has(dev);
  if (fused) kernels::ode_rk4_forward(dev, p0, w1, b1, wt, w2, b2, spec.dt, spec.substeps, P, Pt, U);
  else seq::copy_into(p0, P.select0(0));
  Tensor p = p0.view({1, D});
  const Tensor b1r = b1.view({1, F}), b2r = b2.view({1, D}), wtr = wt.view({1, F});
  for (int64_t s = 0; s < (fused ? 0 : S); ++s) {
    Tensor k[4], ksum;
    for (int j = 0; j < 4; ++j) {
      Tensor pj = Pt.slice0(4 * s + j, 4 * s + j + 1);  // [1, D]
      if (j == 0) seq::copy_into(p, pj);
      else seq::bin_into(BinaryOp::Add, p, seq::un(UnaryOp::Scale, k[j - 1], c[j]), pj);
      Tensor a = seq::like(p0, {1, F});
      seq::mm(pj, false, w1, true, a);                                     // W1 p_j
      Tensor pre = seq::add(seq::add(a, b1r), seq::un(UnaryOp::Scale, wtr, tau[(size_t)(4 * s + j)]));
      Tensor u = U.slice0(4 * s + j, 4 * s + j + 1);
      seq::un_into(UnaryOp::Tanh, pre, u);
      Tensor kj = seq::like(p0, {1, D});
      seq::mm(u, false, w2, true, kj);                                     // W2 u
      k[j] = seq::add(kj, b2r);
    }
    // p + eta/6 (k1 + 2 k2 + 2 k3 + k4)
    ksum = seq::add(seq::add(k[0], k[3]), seq::un(UnaryOp::Scale, seq::add(k[1], k[2]), 2.0));
    Tensor pn = seq::axpy(p, eta / 6, ksum);
    p = pn;
    if ((s + 1) % spec.substeps == 0) seq::copy_into(p, P.select0((s + 1) / spec.substeps));
  }
  Tensor tau_t = Tensor::empty({std::max<int64_t>(4 * S, 1), 1}, DType::F64);
  for (int64_t i = 0; i < 4 * S; ++i) tau_t.host<double>()[i] = tau[(size_t)i];
  if (S == 0) tau_t.host<double>()[0] = 0;
  tau_t = device_table(tau_t.to(p0.dtype()), p0);

  return make_result(P, "ode_positions", {p0v, w1v, b1v, wtv, w2v, b2v},
                     [=](const Tensor& gP) {
    Tensor GK = seq::like(gP, {std::max<int64_t>(4 * S, 1), D}), GA = seq::like(gP, {std::max<int64_t>(4 * S, 1), F});
    Tensor gp = seq::like(gP, {1, D});
    if (fused) {
      Tensor g0 = gp.view({D});
      kernels::ode_rk4_backward(gP.device(), gP, w1, w2, U, spec.dt, spec.substeps, g0, GK, GA);
    } else {
      seq::copy_into(gP.select0(spec.n - 1), gp);
    }
    const double wk[4] = {eta / 6, eta / 3, eta / 3, eta / 6};
    for (int64_t s = (fused ? -1 : S - 1); s >= 0; --s) {
      Tensor gk[4];
      for (int j = 0; j < 4; ++j) gk[j] = seq::un(UnaryOp::Scale, gp, wk[j]);
      Tensor gsum = gp;
      for (int j = 3; j >= 0; --j) {
        const int64_t row = 4 * s + j;
        seq::copy_into(gk[j], GK.slice0(row, row + 1));
        Tensor gu = seq::like(gP, {1, F});
        seq::mm(gk[j], false, w2, false, gu);                               // W2^T gk_j
        Tensor ga = GA.slice0(row, row + 1);
        seq::tanh_grad_into(U.slice0(row, row + 1), gu, ga);
        Tensor gpj = seq::like(gP, {1, D});
        seq::mm(ga, false, w1, false, gpj);                                 // W1^T ga_j
        gsum = seq::add(gsum, gpj);
        if (j > 0) gk[j - 1] = seq::axpy(gk[j - 1], c[j], gpj);
      }
      if (s % spec.substeps == 0) gsum = seq::add(gsum, gP.slice0(s / spec.substeps, s / spec.substeps + 1));
      gp = gsum;
    }
    if (S == 0) gp = gP.slice0(0, 1).clone();
    acc(p0v, gp.view({D}));
    if (S == 0) {  // no step: only p0 reaches the output
      for (const Variable* v : {&w1v, &b1v, &wtv, &w2v, &b2v})
        if (v->requires_grad()) acc(*v, zeros_like(v->data()));
      return;
    }
    const Tensor GKs = GK.slice0(0, 4 * S), GAs = GA.slice0(0, 4 * S), Us = U.slice0(0, 4 * S),
                 Pts = Pt.slice0(0, 4 * S);
    if (w2v.requires_grad()) {
      Tensor d = seq::like(gP, {D, F});
      seq::mm(GKs, true, Us, false, d);
      acc(w2v, d);
    }
    if (b2v.requires_grad()) acc(b2v, seq::colsum(GKs));
    if (w1v.requires_grad()) {
      Tensor d = seq::like(gP, {F, D});
      seq::mm(GAs, true, Pts, false, d);
      acc(w1v, d);
    }
    if (b1v.requires_grad()) acc(b1v, seq::colsum(GAs));
    if (wtv.requires_grad()) {
      Tensor d = seq::like(gP, {F, 1});
      seq::mm(GAs, true, tau_t.slice0(0, 4 * S), false, d);
      acc(wtv, d.view({F}));
    }
  });
}

}  // namespace ctx
