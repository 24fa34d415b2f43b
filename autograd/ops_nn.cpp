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

Variable layer_norm(const Variable& x, const Variable& w, const Variable& b, double eps) {
  const Tensor xd = x.data(), wd = w.data();
  Tensor bd = b.defined() ? b.data() : Tensor();
  check_compatible(xd, wd, "layer_norm");
  CTX_CHECK(xd.dim() >= 1, "layer_norm: x must have at least one dim, got ", xd.str());
  const int64_t C = xd.size(-1), N = xd.numel() / (C ? C : 1);
  Tensor y = empty_like(xd);
  Tensor mean = Tensor::empty({N}, xd.dtype(), xd.device());
  Tensor rstd = Tensor::empty({N}, xd.dtype(), xd.device());
  backend_of(xd).layernorm(xd, wd, bd, eps, y, mean, rstd);
  std::vector<Variable> ins{x, w};
  if (b.defined()) ins.push_back(b);
  return make_result(y, "layer_norm", ins, [x, w, b, xd, wd, mean, rstd](const Tensor& g) {
    Tensor dx = empty_like(g);
    Tensor dw = zeros_like(wd);
    Tensor db = b.defined() ? zeros_like(wd) : Tensor();
    backend_of(g).layernorm_backward(g, xd, wd, mean, rstd, dx, dw, db);
    acc(x, dx);
    acc(w, dw);
    if (b.defined()) acc(b, db);
  });
}

Variable rms_norm(const Variable& x, const Variable& w, double eps) {
  const Tensor xd = x.data(), wd = w.data();
  check_compatible(xd, wd, "rms_norm");
  CTX_CHECK(xd.dim() >= 1, "rms_norm: x must have at least one dim, got ", xd.str());
  const int64_t C = xd.size(-1), N = xd.numel() / (C ? C : 1);
  Tensor y = empty_like(xd);
  Tensor rstd = Tensor::empty({N}, xd.dtype(), xd.device());
  backend_of(xd).rmsnorm(xd, wd, eps, y, rstd);
  return make_result(y, "rms_norm", {x, w}, [x, w, xd, wd, rstd](const Tensor& g) {
    Tensor dx = empty_like(g);
    Tensor dw = zeros_like(wd);
    backend_of(g).rmsnorm_backward(g, xd, wd, rstd, dx, dw);
    acc(x, dx);
    acc(w, dw);
  });
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
