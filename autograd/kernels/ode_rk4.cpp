// autograd/kernels/ode_rk4.cpp — the slots of the RK4 kernels (ode_rk4.h) and the argument checks
// every device runs before its kernel: one message per mistake, whatever the device.
#include "autograd/kernels/ode_rk4.h"

namespace ctx::kernels {
namespace {

// v [D], w1 [F, D], w2 [D, F], dt > 0, substeps >= 1, P [n, D], Pt [4S, D], U [4S, F]
// (S = (n - 1) substeps, n >= 2), every `fvec` [F] and dvec [D], one dtype and device.
void check_ode_rk4(const char* op, const Tensor& v, const Tensor& w1, const Tensor& w2, double dt, int64_t substeps,
                   const Tensor& P, const Tensor& Pt, const Tensor& U, std::initializer_list<const Tensor*> fvec,
                   const Tensor* dvec) {
  CTX_CHECK(v.defined() && v.dim() == 1 && (v.dtype() == DType::F32 || v.dtype() == DType::F64), op,
            ": p0 / gp0 must be f32 or f64 [D], got ", v.defined() ? v.str() : std::string("undefined"));
  CTX_CHECK(dt > 0 && substeps >= 1, op, ": need dt > 0 and substeps >= 1, got ", dt, " and ", substeps);
  const int64_t D = v.size(0);
  CTX_CHECK(w1.defined() && w1.dim() == 2 && w1.size(1) == D, op, ": w1 must be [F, ", D, "], got ", w1.str());
  const int64_t F = w1.size(0);
  CTX_CHECK(P.defined() && P.dim() == 2 && P.size(0) >= 2 && P.size(1) == D, op, ": P / gP must be [n >= 2, ", D,
            "], got ", P.defined() ? P.str() : std::string("undefined"));
  const int64_t n = P.size(0), S = (n - 1) * substeps;
  auto check = [&](const char* name, const Tensor* t, const Shape& want) {
    CTX_CHECK(t->defined() && t->dtype() == v.dtype() && t->shape() == want && t->device() == v.device(), op, ": ",
              name, " must be ", dtype_name(v.dtype()), shape_str(want), " on ", device_name(v.device()), ", got ",
              t->defined() ? t->str() : std::string("undefined"));
  };
  check("w1", &w1, {F, D});
  check("w2", &w2, {D, F});
  check("P", &P, {n, D});
  check("Pt / GK", &Pt, {4 * S, D});
  check("U / GA", &U, {4 * S, F});
  for (const Tensor* t : fvec) check("b1 / wt", t, {F});
  if (dvec) check("b2", dvec, {D});
}

void check_forward(Device d, const Tensor& p0, const Tensor& w1, const Tensor& b1, const Tensor& wt, const Tensor& w2,
                   const Tensor& b2, const double& dt, const int64_t& substeps, const Tensor& P, const Tensor& Pt,
                   const Tensor& U) {
  check_on_device(d, "ode_rk4_forward", {&p0, &w1, &b1, &wt, &w2, &b2, &P, &Pt, &U});
  check_ode_rk4("ode_rk4_forward", p0, w1, w2, dt, substeps, P, Pt, U, {&b1, &wt}, &b2);
}

void check_backward(Device d, const Tensor& gP, const Tensor& w1, const Tensor& w2, const Tensor& U, const double& dt,
                    const int64_t& substeps, const Tensor& gp0, const Tensor& GK, const Tensor& GA) {
  check_on_device(d, "ode_rk4_backward", {&gP, &w1, &w2, &U, &gp0, &GK, &GA});
  check_ode_rk4("ode_rk4_backward", gp0, w1, w2, dt, substeps, gP, GK, GA, {}, nullptr);
  CTX_CHECK(U.dtype() == gP.dtype() && U.shape() == GA.shape(), "ode_rk4_backward: U must be ", shape_str(GA.shape()),
            ", got ", U.str());
}

}  // namespace

ExtensionKernel<OdeRk4Forward> ode_rk4_forward{"ode_rk4_forward", &check_forward};
ExtensionKernel<OdeRk4Backward> ode_rk4_backward{"ode_rk4_backward", &check_backward};

}  // namespace ctx::kernels
