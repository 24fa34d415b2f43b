// core/attention_checks.cpp — see attention_checks.h.
#include "core/attention_checks.h"

#include <algorithm>

namespace ctx {
namespace {

void expect(const char* op, const char* name, const Tensor& t, DType dt, const Shape& want, Device dev) {
  CTX_CHECK(t.defined() && t.dtype() == dt && t.shape() == want, op, ": ", name, " must be ", dtype_name(dt),
            shape_str(want), ", got ", t.defined() ? t.str() : std::string("undefined"));
  CTX_CHECK(t.device() == dev, op, ": ", name, " ", t.str(), " is on ", device_name(t.device()), ", expected ",
            device_name(dev));
}

// [H, T, S], or [1, H, T, S]
void expect_bias(const char* op, const char* name, const Tensor& t, DType dt, const AttnDims& d, Device dev) {
  const bool ok = t.shape() == Shape{d.H, d.T, d.S} || t.shape() == Shape{1, d.H, d.T, d.S};
  CTX_CHECK(ok && t.dtype() == dt, op, ": ", name, " must be ", dtype_name(dt), "[", d.H, ", ", d.T, ", ", d.S,
            "] (or [1, H, T, S]), got ", t.str());
  CTX_CHECK(t.device() == dev, op, ": ", name, " ", t.str(), " is on ", device_name(t.device()), ", expected ",
            device_name(dev));
}

DType check_inputs(const char* op, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& bias, const Tensor& out, const Tensor& lse, const AttnRel& rel, Device dev) {
  CTX_CHECK(q.defined(), op, ": q is undefined");
  const DType dt = q.dtype();
  CTX_CHECK(dt == DType::F32 || dt == DType::F64, op, ": q must be f32 or f64, got ", q.str());
  CTX_CHECK(d.S >= d.T && d.T >= 0 && d.window >= 0 && (d.kv_rows == 0 || d.kv_rows >= d.S), op,
            ": bad sizes T = ", d.T, ", S = ", d.S, ", window = ", d.window, ", kv_rows = ", d.kv_rows,
            " (S >= T, kv_rows 0 or >= S)");
  expect(op, "q", q, dt, {d.B, d.H, d.T, d.Dh}, dev);
  expect(op, "k", k, dt, {d.B, d.H, d.kv_stride(), d.Dh}, dev);
  expect(op, "v", v, dt, {d.B, d.H, d.kv_stride(), d.Dh}, dev);
  if (bias.defined()) expect_bias(op, "bias", bias, dt, d, dev);
  if (rel.qrel.defined() || rel.vrel.defined()) expect(op, "rel.qidx", rel.qidx, DType::I32, {d.T, d.S}, dev);
  if (rel.krel.defined()) expect(op, "rel.kidx", rel.kidx, DType::I32, {d.T, d.S}, dev);
  if (rel.qrel.defined()) expect(op, "rel.qrel", rel.qrel, dt, {d.B, d.H, d.T, rel.Rq}, dev);
  if (rel.vrel.defined()) expect(op, "rel.vrel", rel.vrel, dt, {rel.Rq, d.Dh}, dev);
  if (rel.krel.defined()) expect(op, "rel.krel", rel.krel, dt, {d.B, d.H, d.S, rel.Rk}, dev);
  if (rel.dist_bias.defined()) {  // [H, n], n >= S (the distances of the call are 0 .. S - 1)
    const Tensor& t = rel.dist_bias;
    CTX_CHECK(!bias.defined(), op, ": rel.dist_bias and bias are exclusive (give one), got bias ", bias.str());
    CTX_CHECK(t.dim() == 2 && t.size(0) == d.H && t.size(1) >= std::max<int64_t>(d.S, 1) && t.dtype() == dt, op,
              ": rel.dist_bias must be ", dtype_name(dt), "[", d.H, ", n] with n >= S = ", d.S, ", got ", t.str());
    expect(op, "rel.dist_bias", t, dt, t.shape(), dev);
  }
  expect(op, "out", out, dt, {d.B, d.H, d.T, d.Dh}, dev);
  expect(op, "lse", lse, dt, {d.B, d.H, d.T}, dev);
  return dt;
}

}  // namespace

DType check_attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& bias, const Tensor& out, const Tensor& lse, const AttnRel& rel,
                              Device dev) {
  return check_inputs("attention_forward", d, q, k, v, bias, out, lse, rel, dev);
}

DType check_attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dbias,
                               const AttnRel& rel, const AttnRelGrad& drel, Device dev) {
  const char* op = "attention_backward";
  const DType dt = check_inputs(op, d, q, k, v, bias, out, lse, rel, dev);
  expect(op, "dout", dout, dt, {d.B, d.H, d.T, d.Dh}, dev);
  expect(op, "dq", dq, dt, {d.B, d.H, d.T, d.Dh}, dev);
  expect(op, "dk", dk, dt, {d.B, d.H, d.kv_stride(), d.Dh}, dev);
  expect(op, "dv", dv, dt, {d.B, d.H, d.kv_stride(), d.Dh}, dev);
  if (dbias.defined()) expect_bias(op, "dbias", dbias, dt, d, dev);
  if (drel.dqrel.defined()) expect(op, "drel.dqrel", drel.dqrel, dt, {d.B, d.H, d.T, rel.Rq}, dev);
  if (drel.dkrel.defined()) expect(op, "drel.dkrel", drel.dkrel, dt, {d.B, d.H, d.S, rel.Rk}, dev);
  if (drel.dvrel.defined()) expect(op, "drel.dvrel", drel.dvrel, dt, {rel.Rq, d.Dh}, dev);
  if (drel.ddist_bias.defined()) {
    CTX_CHECK(rel.dist_bias.defined(), op, ": drel.ddist_bias is given without rel.dist_bias");
    expect(op, "drel.ddist_bias", drel.ddist_bias, dt, rel.dist_bias.shape(), dev);
  }
  return dt;
}

}  // namespace ctx
