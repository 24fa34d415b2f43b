// autograd/ops_nn.cpp — softmax, log-softmax, layer norm, RMS norm and the fused
// cross-entropy (softmax + NLL in one pass, gradient softmax - onehot), all over the last dim.
#include "autograd/ops.h"
#include "autograd/ops_util.h"
#include "core/fast_paths.h"

namespace ctx {
using namespace detail;

static Variable softmax_impl(const Variable& x, bool log) {
  const Tensor xd = x.data();
  CTX_CHECK(xd.dim() >= 1, log ? "log_softmax" : "softmax", ": needs at least 1-D, got ", xd.str());
  Tensor y = empty_like(xd);
  backend_of(xd).softmax(xd, y, log);
  return make_result(y, log ? "log_softmax" : "softmax", {x}, [x, y, log](const Tensor& g) {
    Tensor dx = empty_like(g);
    backend_of(g).softmax_backward(y, g, dx, log);
    acc(x, dx);
  });
}
Variable softmax(const Variable& x) { return softmax_impl(x, false); }

Variable causal_softmax(const Variable& scores, int64_t diag, int64_t window) {
  const Tensor xd = scores.data();
  CTX_CHECK(window >= 0, "causal_softmax: window must be >= 0 (0 = no window), got ", window);
  CTX_CHECK(xd.dim() >= 2, "causal_softmax: scores must be [..., T, S], got ", xd.str());
  Backend& be = backend_of(xd);
  const bool fused = use_fused(FastPath::CausalSoftmax, be);
  Tensor y;  // [..., T, S]
  if (fused) {  // one pass: the mask, then the softmax
    y = empty_like(xd);
    be.causal_softmax(xd, y, diag, window);
  } else {  // two: the mask on a copy, then the softmax in place (each row is read before written)
    y = xd.clone();
    be.causal_fill(y, -INFINITY, diag, window);
    be.softmax(y, y, false);
  }
  return make_result(y, "causal_softmax", {scores}, [scores, y, diag, window, fused](const Tensor& g) {
    Tensor dx = empty_like(g);
    Backend& b = backend_of(g);
    if (fused) {
      b.causal_softmax_backward(y, g, dx, diag, window);  // 0 where masked
    } else {
      b.softmax_backward(y, g, dx, false);  // y = 0 where masked: dx = y (g - <g, y>) = 0
    }
    acc(scores, dx);
  });
}
Variable log_softmax(const Variable& x) { return softmax_impl(x, true); }

// ---- the norms, and the residual add fused in front of them (FastPath::AddNorm) ----
// x's gradient from a norm's backward: `write(dx, dres)`. With `sum` (the switch on) dx is summed
// into what x already holds as it is written: dres is x's gradient (undefined: x has none yet) and
// dx is that gradient itself where nobody else holds it (in place: grad_target), else new. Without,
// dx is new and accumulate_grad adds it by its own pass.
template <class Write>
void norm_input_grad(const Variable& x, const Tensor& like, bool sum, const Write& write) {
  if (sum && x.requires_grad()) {
    bool has = false;
    const Tensor t = grad_target(*x.impl(), has);
    Tensor dx = t.defined() ? t : empty_like(like);
    write(dx, has ? x.impl()->grad : Tensor());
    grad_written(*x.impl(), dx);
    return;
  }
  Tensor dx = empty_like(like);
  write(dx, Tensor());
  acc(x, dx);
}

// {h, norm(h)}: a undefined, h is x (the plain norm); else h = x + a from the same kernel, and
// h's node has add's backward. rms: RMSNorm (b unused).
static std::pair<Variable, Variable> norm_op(const Variable& x, const Variable& a, const Variable& w,
                                             const Variable& b, double eps, bool rms) {
  const char* name = rms ? (a.defined() ? "add_rms_norm" : "rms_norm") : (a.defined() ? "add_layer_norm" : "layer_norm");
  const Tensor xd = x.data(), wd = w.data();
  const Tensor bd = !rms && b.defined() ? b.data() : Tensor();
  check_compatible(xd, wd, name);
  CTX_CHECK(xd.dim() >= 1, name, ": x must have at least one dim, got ", xd.str());
  Backend& be = backend_of(xd);
  const bool fused = use_fused(FastPath::AddNorm, be);
  if (a.defined()) {
    check_compatible(xd, a.data(), name);
    CTX_CHECK(a.data().shape() == xd.shape(), name, ": a ", a.data().str(), " must have x's shape ", xd.str());
    if (!fused) {  // the composed twin: the add, then the norm
      Variable h = add(x, a);
      return {h, norm_op(h, Variable(), w, b, eps, rms).second};
    }
  }
  const int64_t C = xd.size(-1), N = xd.numel() / (C ? C : 1);
  Tensor y = empty_like(xd), hd = a.defined() ? empty_like(xd) : xd;
  Tensor mean = rms ? Tensor() : Tensor::empty({N}, xd.dtype(), xd.device());
  Tensor rstd = Tensor::empty({N}, xd.dtype(), xd.device());
  if (a.defined() && rms) be.add_rmsnorm(xd, a.data(), wd, eps, hd, y, rstd);
  else if (a.defined()) be.add_layernorm(xd, a.data(), wd, bd, eps, hd, y, mean, rstd);
  else if (rms) be.rmsnorm(xd, wd, eps, y, rstd);
  else be.layernorm(xd, wd, bd, eps, y, mean, rstd);
  // h's node: add's backward, named for the fused call (the profiler gives it the kernel's time)
  Variable h = x;
  if (a.defined()) h = make_result(hd, name, {x, a}, [x, a](const Tensor& g) {
    acc(x, g);
    acc(a, g);
  });
  std::vector<Variable> ins{h, w};
  if (bd.defined()) ins.push_back(b);
  Variable out = make_result(y, rms ? "rms_norm" : "layer_norm", ins,
                             [h, w, b, hd, wd, mean, rstd, rms, fused](const Tensor& g) {
    Tensor dw = zeros_like(wd);
    Tensor db = !rms && b.defined() ? zeros_like(wd) : Tensor();
    norm_input_grad(h, g, fused, [&](Tensor& dx, const Tensor& dres) {
      if (rms) backend_of(g).rmsnorm_backward(g, hd, wd, rstd, dx, dw, dres);
      else backend_of(g).layernorm_backward(g, hd, wd, mean, rstd, dx, dw, db, dres);
    });
    acc(w, dw);
    if (db.defined()) acc(b, db);
  });
  return {h, out};
}

Variable layer_norm(const Variable& x, const Variable& w, const Variable& b, double eps) {
  return norm_op(x, Variable(), w, b, eps, false).second;
}
Variable rms_norm(const Variable& x, const Variable& w, double eps) {
  return norm_op(x, Variable(), w, Variable(), eps, true).second;
}
std::pair<Variable, Variable> add_layer_norm(const Variable& x, const Variable& a, const Variable& w,
                                             const Variable& b, double eps) {
  return norm_op(x, a, w, b, eps, false);
}
std::pair<Variable, Variable> add_rms_norm(const Variable& x, const Variable& a, const Variable& w, double eps) {
  return norm_op(x, a, w, Variable(), eps, true);
}

Variable cross_entropy(const Variable& logits, const Tensor& targets) {
  const Tensor z = logits.data();
  CTX_CHECK(z.dim() == 2, "cross_entropy: logits must be [N, V], got ", z.str());
  CTX_CHECK(targets.defined() && (targets.dtype() == DType::I32 || targets.dtype() == DType::I64),
            "cross_entropy: targets must be i32 or i64, got ", targets.str());
  CTX_CHECK(targets.numel() == z.size(0), "cross_entropy: targets ", targets.str(), " (",
            targets.numel(), " targets) do not match logits ", z.str());
  const int64_t N = z.size(0);
  Tensor tg = targets.view({N});
  Tensor loss = Tensor::empty({N}, z.dtype(), z.device());
  Tensor lse = Tensor::empty({N}, z.dtype(), z.device());
  backend_of(z).cross_entropy(z, tg, loss, lse);
  // mean over rows whose target is not ignored (-1); the targets' values from the host (a batch
  // uploaded from the host has a mirror there: no copy, no wait for the device), or none read
  // where their writer proved every target a class (range_proven to V: none is ignored)
  int64_t count = 0;
  if (range_proven(tg, z.size(1))) {
    count = N;
  } else {
    const Tensor th = host_values(tg);
    for (int64_t i = 0; i < N; ++i) count += th.at(i) >= 0;
  }
  CTX_CHECK(count > 0, "cross_entropy: every target is ignored");
  Tensor total = Tensor::empty({}, z.dtype(), z.device());
  backend_of(z).reduce_sum(loss, total);
  Tensor out = empty_like(total);
  backend_of(z).unary(UnaryOp::Scale, total, out, 1.0 / (double)count);
  return make_result(out, "cross_entropy", {logits}, [logits, z, tg, lse, count, N](const Tensor& g) {
    // dloss[n] = g / count for every row (ignored rows get zero inside the kernel): g broadcast
    // and scaled on its device (g is not read on the host)
    Backend& be = backend_of(z);
    Tensor dl = Tensor::empty({N}, z.dtype(), z.device());
    be.copy_strided(g, Strided{0, {0}}, dl, Strided{0, {1}}, {N}, false);
    be.unary(UnaryOp::Scale, dl, dl, 1.0 / (double)count);
    Tensor dz = empty_like(z);
    backend_of(z).cross_entropy_backward(z, tg, lse, dl, dz);
    acc(logits, dz);
  });
}

Variable cross_entropy(const Variable& logits, const Tensor& targets, const Tensor& weights) {
  const Tensor z = logits.data();
  CTX_CHECK(z.dim() == 2, "cross_entropy: logits must be [N, V], got ", z.str());
  CTX_CHECK(targets.defined() && (targets.dtype() == DType::I32 || targets.dtype() == DType::I64),
            "cross_entropy: targets must be i32 or i64, got ", targets.str());
  const int64_t N = z.size(0);
  CTX_CHECK(targets.numel() == N, "cross_entropy: targets ", targets.str(), " (", targets.numel(),
            " targets) do not match logits ", z.str());
  CTX_CHECK(weights.defined() && is_float(weights.dtype()) && weights.numel() == N,
            "cross_entropy: weights must be a float tensor of ", N, " values (one per row of ", z.str(), "), got ",
            weights.defined() ? weights.str() : std::string("none"));
  Tensor tg = targets.view({N});
  Tensor w = weights.view({N});
  if (w.dtype() != z.dtype()) w = w.to(z.dtype());
  if (w.device() != z.device()) w = w.to(z.device());
  Backend& be = backend_of(z);
  Tensor loss = Tensor::empty({N}, z.dtype(), z.device());
  Tensor lse = Tensor::empty({N}, z.dtype(), z.device());
  be.cross_entropy(z, tg, loss, lse);  // ignored rows: loss 0
  be.binary(BinaryOp::Mul, loss, w, loss);
  Tensor out = Tensor::empty({}, z.dtype(), z.device());
  be.reduce_sum(loss, out);
  return make_result(out, "cross_entropy", {logits}, [logits, z, tg, lse, w, N](const Tensor& g) {
    // dloss[n] = g * weights[n], g broadcast on its device
    Backend& bk = backend_of(z);
    Tensor dl = Tensor::empty({N}, z.dtype(), z.device());
    bk.copy_strided(g, Strided{0, {0}}, dl, Strided{0, {1}}, {N}, false);
    bk.binary(BinaryOp::Mul, dl, w, dl);
    Tensor dz = empty_like(z);
    bk.cross_entropy_backward(z, tg, lse, dl, dz);
    acc(logits, dz);
  });
}

}  // namespace ctx
