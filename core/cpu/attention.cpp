// core/cpu/attention.cpp — Backend::attention_forward / _backward on the CPU (core/cpu/fused.h):
// checks the tensors against AttnDims (errors name the method, the field and the shape), then
// runs the f32 / f64 kernels of core/cpu/flash_attention.h on their pointers.
#include "core/cpu/fused.h"
#include "core/cpu/flash_attention.h"

namespace ctx::cpu {
namespace {

void expect(const char* op, const char* name, const Tensor& t, DType dt, const Shape& want) {
  CTX_CHECK(t.defined() && t.dtype() == dt && t.shape() == want, op, ": ", name, " must be ",
            dtype_name(dt), shape_str(want), ", got ", t.defined() ? t.str() : std::string("undefined"));
}

// [H, T, S], or [1, H, T, S]
void expect_bias(const char* op, const char* name, const Tensor& t, DType dt, const AttnDims& d) {
  const bool ok = t.shape() == Shape{d.H, d.T, d.S} || t.shape() == Shape{1, d.H, d.T, d.S};
  CTX_CHECK(ok && t.dtype() == dt, op, ": ", name, " must be ", dtype_name(dt), "[", d.H, ", ", d.T, ", ", d.S,
            "] (or [1, H, T, S]), got ", t.str());
}

// Checks q, k, v, bias and rel against d; returns q's dtype.
DType check(const char* op, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
            const Tensor& bias, const AttnRel& rel) {
  CTX_CHECK(q.defined(), op, ": q is undefined");
  const DType dt = q.dtype();
  CTX_CHECK(dt == DType::F32 || dt == DType::F64, op, ": q must be f32 or f64, got ", q.str());
  CTX_CHECK(d.S >= d.T && d.window >= 0, op, ": bad sizes T = ", d.T, ", S = ", d.S, ", window = ", d.window);
  expect(op, "q", q, dt, {d.B, d.H, d.T, d.Dh});
  expect(op, "k", k, dt, {d.B, d.H, d.S, d.Dh});
  expect(op, "v", v, dt, {d.B, d.H, d.S, d.Dh});
  if (bias.defined()) expect_bias(op, "bias", bias, dt, d);
  if (rel.qrel.defined() || rel.vrel.defined()) expect(op, "rel.qidx", rel.qidx, DType::I32, {d.T, d.S});
  if (rel.krel.defined()) expect(op, "rel.kidx", rel.kidx, DType::I32, {d.T, d.S});
  if (rel.qrel.defined()) expect(op, "rel.qrel", rel.qrel, dt, {d.B, d.H, d.T, rel.Rq});
  if (rel.vrel.defined()) expect(op, "rel.vrel", rel.vrel, dt, {rel.Rq, d.Dh});
  if (rel.krel.defined()) expect(op, "rel.krel", rel.krel, dt, {d.B, d.H, d.S, rel.Rk});
  return dt;
}

template <class F>
const F* ptr(const Tensor& t) {
  return t.defined() ? t.data<F>() : nullptr;
}
template <class F>
F* mptr(Tensor& t) {
  return t.defined() ? t.data<F>() : nullptr;
}

// The kernels' view of rel (and of the relative gradients to write, when given).
template <class F>
FlashRel<F> flash_rel(const AttnRel& rel, AttnRelGrad* drel) {
  FlashRel<F> fr;
  fr.Rq = rel.Rq, fr.Rk = rel.Rk;
  if (rel.qidx.defined()) fr.qidx = rel.qidx.data<int32_t>();
  if (rel.kidx.defined()) fr.kidx = rel.kidx.data<int32_t>();
  fr.qrel = ptr<F>(rel.qrel);
  fr.krel = ptr<F>(rel.krel);
  fr.vrel = ptr<F>(rel.vrel);
  if (drel) {
    fr.dqrel = mptr<F>(drel->dqrel);
    fr.dkrel = mptr<F>(drel->dkrel);
    fr.dvrel = mptr<F>(drel->dvrel);
  }
  return fr;
}

}  // namespace

void attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                       Tensor& out, Tensor& lse, const AttnRel& rel) {
  const char* op = "attention_forward";
  const DType dt = check(op, d, q, k, v, bias, rel);
  expect(op, "out", out, dt, {d.B, d.H, d.T, d.Dh});
  expect(op, "lse", lse, dt, {d.B, d.H, d.T});
  auto run = [&](auto tag) {
    using F = decltype(tag);
    flash_attention_forward<F>(d, q.data<F>(), k.data<F>(), v.data<F>(), ptr<F>(bias), out.data<F>(),
                               lse.data<F>(), flash_rel<F>(rel, nullptr));
  };
  if (dt == DType::F32) run(float());
  else run(double());
}

void attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                        Tensor& dv, Tensor& dbias, const AttnRel& rel, AttnRelGrad& drel) {
  const char* op = "attention_backward";
  const DType dt = check(op, d, q, k, v, bias, rel);
  expect(op, "out", out, dt, {d.B, d.H, d.T, d.Dh});
  expect(op, "lse", lse, dt, {d.B, d.H, d.T});
  expect(op, "dout", dout, dt, {d.B, d.H, d.T, d.Dh});
  expect(op, "dq", dq, dt, {d.B, d.H, d.T, d.Dh});
  expect(op, "dk", dk, dt, {d.B, d.H, d.S, d.Dh});
  expect(op, "dv", dv, dt, {d.B, d.H, d.S, d.Dh});
  if (dbias.defined()) expect_bias(op, "dbias", dbias, dt, d);
  if (drel.dqrel.defined()) expect(op, "drel.dqrel", drel.dqrel, dt, {d.B, d.H, d.T, rel.Rq});
  if (drel.dkrel.defined()) expect(op, "drel.dkrel", drel.dkrel, dt, {d.B, d.H, d.S, rel.Rk});
  if (drel.dvrel.defined()) expect(op, "drel.dvrel", drel.dvrel, dt, {rel.Rq, d.Dh});
  auto run = [&](auto tag) {
    using F = decltype(tag);
    flash_attention_backward<F>(d, q.data<F>(), k.data<F>(), v.data<F>(), ptr<F>(bias), out.data<F>(),
                                lse.data<F>(), dout.data<F>(), dq.data<F>(), dk.data<F>(), dv.data<F>(),
                                mptr<F>(dbias), flash_rel<F>(rel, &drel));
  };
  if (dt == DType::F32) run(float());
  else run(double());
}

}  // namespace ctx::cpu
