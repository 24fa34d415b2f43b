// autograd/kernels/fire.cpp — the slot of FIRE's distance kernel (fire.h) and the argument checks
// every device runs before its kernel: one message per mistake, whatever the device.
#include "autograd/kernels/fire.h"

namespace ctx::kernels {
namespace {

void check(Device d, const Tensor& pq, const Tensor& pk, const Tensor& c, const Tensor& lm, const double& init_L,
           const double& eps, const Tensor& x, const Tensor& dxdc, const Tensor& dxdl) {
  const char* op = "fire_distances";
  check_on_device(d, op, {&pq, &pk, &c, &lm, &x, &dxdc, &dxdl});
  CTX_CHECK(pq.defined() && pq.dim() == 2 && (pq.dtype() == DType::F32 || pq.dtype() == DType::F64), op,
            ": pq must be f32 or f64 [Bp, T], got ", pq.defined() ? pq.str() : std::string("undefined"));
  const int64_t Bp = pq.size(0), T = pq.size(1);
  const int64_t S = pk.defined() && pk.dim() == 2 ? pk.size(1) : -1;
  auto same = [&](const char* name, const Tensor& t, const Shape& want) {
    CTX_CHECK(t.defined() && t.dtype() == pq.dtype() && t.shape() == want, op, ": ", name, " must be ",
              dtype_name(pq.dtype()), shape_str(want), " for pq ", pq.str(), ", got ",
              t.defined() ? t.str() : std::string("undefined"));
  };
  same("pk", pk, {Bp, S < 0 ? 0 : S});
  same("c", c, {1});
  same("lm", lm, {1});
  for (auto [n, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"dxdc", &dxdc}, {"dxdl", &dxdl}})
    same(n, *t, {Bp, T, S});
  CTX_CHECK(init_L > 0 && eps > 0, op, ": need init_L > 0 and eps > 0, got ", init_L, " and ", eps);
}

}  // namespace

ExtensionKernel<FireDistances> fire_distances{"fire_distances", &check};

}  // namespace ctx::kernels
