// autograd/kernels/ode_rk4_cpu.cpp — the CPU kernels of FLOATER's RK4 integration (ode_rk4.h,
// registered below for Device::CPU): the positions do not depend on the batch, so the whole solver
// is a sequential loop of small matrix-vector products (W1 [F, D], W2 [D, F]) on one thread, with
// no backend call, fork/join or temporary per stage. The reference is the composed loop in
// autograd/ops_ode.cpp (CTXLAB_FUSED_ODE=0), which it follows operation for operation;
// tests/test_posenc_survey.cpp holds the two equal.
#include <cmath>
#include <vector>

#include "autograd/kernels/ode_rk4.h"

namespace ctx::kernels {
namespace {

// Stage times tau and point offsets c of step s, in F's precision (as ops_ode.cpp computes them).
template <class F>
struct Rk4Steps {
  F eta, c[4];
  explicit Rk4Steps(double dt, int64_t substeps) {
    eta = (F)(dt / (double)substeps);
    const F h = eta / F(2);
    c[0] = F(0), c[1] = h, c[2] = h, c[3] = eta;
  }
  void tau(int64_t s, F out[4]) const {
    const F t = (F)s * eta, h = eta / F(2);
    out[0] = t, out[1] = t + h, out[2] = t + h, out[3] = t + eta;
  }
};

// out [C] = W^T v for W [R, C] row-major, v [R]: rows added in order (vectorised over C)
template <class F>
void matvec_t(const F* W, int64_t R, int64_t C, const F* v, F* out) {
  for (int64_t c = 0; c < C; ++c) out[c] = 0;
  for (int64_t r = 0; r < R; ++r) {
    const F* wr = W + r * C;
    const F vr = v[r];
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) out[c] += wr[c] * vr;
  }
}

template <class F>
void forward_kernel(const F* p0, const F* w1, const F* b1, const F* wt, const F* w2, const F* b2, int64_t n,
                    int64_t D, int64_t Fh, double dt, int64_t substeps, F* P, F* Pt, F* U) {
  const int64_t S = (n - 1) * substeps;
  const Rk4Steps<F> st(dt, substeps);
  thread_local std::vector<F> buf;
  buf.resize((size_t)(6 * D));
  F* p = buf.data();
  F* k = p + D;  // k[j] = k + j * D, j < 4
  F* pn = k + 4 * D;
  for (int64_t d = 0; d < D; ++d) p[d] = p0[d], P[d] = p0[d];
  for (int64_t s = 0; s < S; ++s) {
    F tau[4];
    st.tau(s, tau);
    for (int j = 0; j < 4; ++j) {
      F* pj = Pt + (4 * s + j) * D;
      if (j == 0)
        for (int64_t d = 0; d < D; ++d) pj[d] = p[d];
      else
        for (int64_t d = 0; d < D; ++d) pj[d] = p[d] + k[(j - 1) * D + d] * st.c[j];
      F* u = U + (4 * s + j) * Fh;
      for (int64_t f = 0; f < Fh; ++f) {
        const F* wr = w1 + f * D;
        F a = 0;
#pragma omp simd reduction(+ : a)
        for (int64_t d = 0; d < D; ++d) a += wr[d] * pj[d];
        u[f] = std::tanh((a + b1[f]) + wt[f] * tau[j]);
      }
      F* kj = k + j * D;
      for (int64_t d = 0; d < D; ++d) {
        const F* wr = w2 + d * Fh;
        F a = 0;
#pragma omp simd reduction(+ : a)
        for (int64_t f = 0; f < Fh; ++f) a += wr[f] * u[f];
        kj[d] = a + b2[d];
      }
    }
    for (int64_t d = 0; d < D; ++d) {  // p + eta/6 ((k1 + k4) + 2 (k2 + k3))
      const F ks = (k[d] + k[3 * D + d]) + (k[D + d] + k[2 * D + d]) * F(2);
      pn[d] = p[d] + ks * (F)((double)st.eta / 6);
    }
    std::swap(p, pn);
    if ((s + 1) % substeps == 0)
      for (int64_t d = 0; d < D; ++d) P[((s + 1) / substeps) * D + d] = p[d];
  }
}

template <class F>
void backward_kernel(const F* gP, const F* w1, const F* w2, const F* U, int64_t n, int64_t D, int64_t Fh,
                     double dt, int64_t substeps, F* gp0, F* GK, F* GA) {
  const int64_t S = (n - 1) * substeps;
  const Rk4Steps<F> st(dt, substeps);
  const F wk[4] = {(F)((double)st.eta / 6), (F)((double)st.eta / 3), (F)((double)st.eta / 3),
                   (F)((double)st.eta / 6)};
  thread_local std::vector<F> buf;
  buf.resize((size_t)(7 * D + Fh));
  F* gp = buf.data();
  F* gsum = gp + D;
  F* gk = gsum + D;  // gk[j] = gk + j * D
  F* gpj = gk + 4 * D;
  F* gu = gpj + D;
  for (int64_t d = 0; d < D; ++d) gp[d] = gP[(n - 1) * D + d];
  for (int64_t s = S - 1; s >= 0; --s) {
    for (int j = 0; j < 4; ++j)
      for (int64_t d = 0; d < D; ++d) gk[j * D + d] = gp[d] * wk[j];
    for (int64_t d = 0; d < D; ++d) gsum[d] = gp[d];
    for (int j = 3; j >= 0; --j) {
      const int64_t row = 4 * s + j;
      const F* g = gk + j * D;
      for (int64_t d = 0; d < D; ++d) GK[row * D + d] = g[d];
      matvec_t(w2, D, Fh, g, gu);  // W2^T gk_j
      const F* u = U + row * Fh;
      F* ga = GA + row * Fh;
      for (int64_t f = 0; f < Fh; ++f) ga[f] = gu[f] * (F(1) - u[f] * u[f]);
      matvec_t(w1, Fh, D, ga, gpj);  // W1^T ga_j
      for (int64_t d = 0; d < D; ++d) gsum[d] += gpj[d];
      if (j > 0)
        for (int64_t d = 0; d < D; ++d) gk[(j - 1) * D + d] += gpj[d] * st.c[j];
    }
    if (s % substeps == 0)
      for (int64_t d = 0; d < D; ++d) gsum[d] += gP[(s / substeps) * D + d];
    std::swap(gp, gsum);
  }
  for (int64_t d = 0; d < D; ++d) gp0[d] = gp[d];
}

// The arguments are checked (ode_rk4.cpp) before these run.
void forward(const Tensor& p0, const Tensor& w1, const Tensor& b1, const Tensor& wt, const Tensor& w2, const Tensor& b2,
             double dt, int64_t substeps, Tensor& P, Tensor& Pt, Tensor& U) {
  const int64_t n = P.size(0), D = p0.size(0), Fh = w1.size(0);
  if (p0.dtype() == DType::F32)
    forward_kernel(p0.data<float>(), w1.data<float>(), b1.data<float>(), wt.data<float>(), w2.data<float>(),
                   b2.data<float>(), n, D, Fh, dt, substeps, P.data<float>(), Pt.data<float>(), U.data<float>());
  else
    forward_kernel(p0.data<double>(), w1.data<double>(), b1.data<double>(), wt.data<double>(), w2.data<double>(),
                   b2.data<double>(), n, D, Fh, dt, substeps, P.data<double>(), Pt.data<double>(), U.data<double>());
}

void backward(const Tensor& gP, const Tensor& w1, const Tensor& w2, const Tensor& U, double dt, int64_t substeps,
              Tensor& gp0, Tensor& GK, Tensor& GA) {
  const int64_t n = gP.size(0), D = gp0.size(0), Fh = w1.size(0);
  if (gP.dtype() == DType::F32)
    backward_kernel(gP.data<float>(), w1.data<float>(), w2.data<float>(), U.data<float>(), n, D, Fh, dt, substeps,
                    gp0.data<float>(), GK.data<float>(), GA.data<float>());
  else
    backward_kernel(gP.data<double>(), w1.data<double>(), w2.data<double>(), U.data<double>(), n, D, Fh, dt,
                    substeps, gp0.data<double>(), GK.data<double>(), GA.data<double>());
}

[[maybe_unused]] const bool g_registered = (ode_rk4_forward.add(Device::CPU, &forward, __FILE__),
                                            ode_rk4_backward.add(Device::CPU, &backward, __FILE__), true);

}  // namespace
}  // namespace ctx::kernels
