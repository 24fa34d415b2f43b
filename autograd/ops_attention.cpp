// autograd/ops_attention.cpp — fused_causal_attention (see ops_attention.h): argument checks,
// the fused CPU kernels (core/cpu/flash_attention.cpp) with their backward, and the composed
// version of the same attention.
#include "autograd/ops_attention.h"

#include <cmath>

#include "autograd/ops_util.h"
#include "core/cpu/flash_attention.h"

namespace ctx {
using namespace detail;

namespace {

// Checks the arguments (errors name the op and the shapes); returns the sizes.
cpu::FlashAttnDims check_args(const char* op, const Variable& q, const Variable& k, const Variable& v,
                              const Variable& bias, double scale, int64_t window) {
  CTX_CHECK(q.defined() && k.defined() && v.defined(), op, ": q, k and v must be defined");
  const Tensor &qd = q.data(), &kd = k.data(), &vd = v.data();
  CTX_CHECK(is_float(qd.dtype()), op, ": q must be f32 or f64, got ", qd.str());
  CTX_CHECK(qd.dim() == 4, op, ": q must be [B, H, T, Dh], got ", qd.str());
  CTX_CHECK(kd.dim() == 4 && vd.dim() == 4, op, ": k and v must be [B, H, S, Dh], got k ", kd.str(),
            " and v ", vd.str());
  check_compatible(qd, kd, op);
  check_compatible(qd, vd, op);
  CTX_CHECK(kd.shape() == vd.shape(), op, ": k ", kd.str(), " and v ", vd.str(), " must have the same shape");
  CTX_CHECK(kd.size(0) == qd.size(0) && kd.size(1) == qd.size(1) && kd.size(3) == qd.size(3), op,
            ": k ", kd.str(), " does not match q ", qd.str(), " (q [B, H, T, Dh], k [B, H, S, Dh])");
  cpu::FlashAttnDims d;
  d.B = qd.size(0), d.H = qd.size(1), d.T = qd.size(2), d.S = kd.size(2), d.Dh = qd.size(3);
  d.window = window;
  d.scale = scale;
  CTX_CHECK(d.S >= d.T, op, ": k ", kd.str(), " has fewer keys than q ", qd.str(),
            " has queries (S must be >= T: queries are the last T positions)");
  CTX_CHECK(window >= 0, op, ": window must be >= 0 (0 = full causal attention), got ", window);
  CTX_CHECK(std::isfinite(scale), op, ": scale must be finite, got ", scale);
  if (bias.defined()) {
    const Tensor& bd = bias.data();
    check_compatible(qd, bd, op);
    const bool ok3 = bd.dim() == 3 && bd.shape() == Shape{d.H, d.T, d.S};
    const bool ok4 = bd.dim() == 4 && bd.shape() == Shape{1, d.H, d.T, d.S};
    CTX_CHECK(ok3 || ok4, op, ": bias must be [H, T, S] = [", d.H, ", ", d.T, ", ", d.S, "] or [1, H, T, S]",
              " for q ", qd.str(), " and k ", kd.str(), ", got ", bd.str());
  }
  return d;
}

// [T, S] mask (q's dtype and device): 1 where j <= i + (S - T) - window (outside the window).
Tensor window_mask(const cpu::FlashAttnDims& d, const Tensor& like) {
  Tensor m = Tensor::zeros({d.T, d.S}, like.dtype());
  const int64_t off = d.S - d.T;
  for (int64_t i = 0; i < d.T; ++i)
    for (int64_t j = 0; j < d.S && j <= i + off - d.window; ++j) m.set(i * d.S + j, 1.0);
  return like.device() == Device::CPU ? m : m.to(like.device());
}

}  // namespace

Variable causal_attention_composed(const Variable& q, const Variable& k, const Variable& v,
                                   const Variable& bias, double scale_, int64_t window) {
  const cpu::FlashAttnDims d = check_args("causal_attention_composed", q, k, v, bias, scale_, window);
  Variable s = scale(matmul(q, k, false, true), scale_);  // [B, H, T, S]
  if (bias.defined()) s = add(s, bias);                   // [H, T, S] broadcasts over B
  s = causal_mask(s, d.S - d.T);
  if (window > 0 && window < d.S) s = masked_fill(s, window_mask(d, q.data()), -INFINITY);
  return matmul(softmax(s), v);                            // [B, H, T, Dh]
}

Variable fused_causal_attention(const Variable& q, const Variable& k, const Variable& v,
                                const Variable& bias, double scale, int64_t window) {
  const char* op = "fused_causal_attention";
  const cpu::FlashAttnDims d = check_args(op, q, k, v, bias, scale, window);
  const Tensor qd = q.data(), kd = k.data(), vd = v.data();
  if (qd.device() != Device::CPU) return causal_attention_composed(q, k, v, bias, scale, window);
  const Tensor bd = bias.defined() ? bias.data() : Tensor();
  Tensor out = empty_like(qd);                                            // [B, H, T, Dh]
  Tensor lse = Tensor::empty({d.B, d.H, d.T}, qd.dtype(), qd.device());  // [B, H, T]
  if (qd.dtype() == DType::F32)
    cpu::flash_attention_forward<float>(d, qd.data<float>(), kd.data<float>(), vd.data<float>(),
                                        bd.defined() ? bd.data<float>() : nullptr, out.data<float>(),
                                        lse.data<float>());
  else
    cpu::flash_attention_forward<double>(d, qd.data<double>(), kd.data<double>(), vd.data<double>(),
                                         bd.defined() ? bd.data<double>() : nullptr,
                                         out.data<double>(), lse.data<double>());
  std::vector<Variable> inputs = {q, k, v};
  if (bias.defined()) inputs.push_back(bias);
  return make_result(out, op, inputs, [q, k, v, bias, qd, kd, vd, bd, out, lse, d](const Tensor& g) {
    // g = dL/do [B, H, T, Dh]; dbias [H, T, S] only when the bias takes part in the graph
    Tensor dq = empty_like(qd), dk = empty_like(kd), dv = empty_like(vd), db;
    if (bias.defined() && bias.requires_grad()) db = Tensor::empty({d.H, d.T, d.S}, qd.dtype());
    if (qd.dtype() == DType::F32)
      cpu::flash_attention_backward<float>(
          d, qd.data<float>(), kd.data<float>(), vd.data<float>(), bd.defined() ? bd.data<float>() : nullptr,
          out.data<float>(), lse.data<float>(), g.data<float>(), dq.data<float>(), dk.data<float>(),
          dv.data<float>(), db.defined() ? db.data<float>() : nullptr);
    else
      cpu::flash_attention_backward<double>(
          d, qd.data<double>(), kd.data<double>(), vd.data<double>(), bd.defined() ? bd.data<double>() : nullptr,
          out.data<double>(), lse.data<double>(), g.data<double>(), dq.data<double>(), dk.data<double>(),
          dv.data<double>(), db.defined() ? db.data<double>() : nullptr);
    acc(q, dq);
    acc(k, dk);
    acc(v, dv);
    if (db.defined()) acc(bias, db.view(bias.shape()));
  });
}

}  // namespace ctx
