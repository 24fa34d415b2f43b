// autograd/ops_elementwise.cpp — elementwise ops (binary with broadcasting, unary, dropout):
// each forward beside its backward.
#include "autograd/ops.h"
#include "autograd/ops_util.h"
#include "core/rng.h"

namespace ctx {
using namespace detail;

// ---- binary: out = a op b (broadcast) ----
static Tensor binary_fwd(BinaryOp op, const Tensor& a, const Tensor& b) {
  check_compatible(a, b, binary_name(op));
  Tensor out = Tensor::empty(broadcast_shape(a.shape(), b.shape(), binary_name(op)), a.dtype(), a.device());
  backend_of(a).binary(op, a, b, out);
  return out;
}

Variable add(const Variable& a, const Variable& b) {
  Tensor out = binary_fwd(BinaryOp::Add, a.data(), b.data());
  return make_result(out, "add", {a, b}, [a, b](const Tensor& g) {
    acc(a, sum_to(g, a.shape()));
    acc(b, sum_to(g, b.shape()));
  });
}

Variable sub(const Variable& a, const Variable& b) {
  Tensor out = binary_fwd(BinaryOp::Sub, a.data(), b.data());
  return make_result(out, "sub", {a, b}, [a, b](const Tensor& g) {
    acc(a, sum_to(g, a.shape()));
    if (b.requires_grad()) {
      Tensor ng = empty_like(g);
      backend_of(g).unary(UnaryOp::Neg, g, ng);
      acc(b, sum_to(ng, b.shape()));
    }
  });
}

Variable mul(const Variable& a, const Variable& b) {
  Tensor out = binary_fwd(BinaryOp::Mul, a.data(), b.data());
  Tensor ad = a.data(), bd = b.data();
  return make_result(out, "mul", {a, b}, [a, b, ad, bd](const Tensor& g) {
    if (a.requires_grad()) acc(a, sum_to(binary_fwd(BinaryOp::Mul, g, bd), ad.shape()));  // da = g * b
    if (b.requires_grad()) acc(b, sum_to(binary_fwd(BinaryOp::Mul, g, ad), bd.shape()));  // db = g * a
  });
}

Variable div(const Variable& a, const Variable& b) {
  Tensor out = binary_fwd(BinaryOp::Div, a.data(), b.data());
  Tensor bd = b.data();
  return make_result(out, "div", {a, b}, [a, b, bd, out](const Tensor& g) {
    Tensor gb = binary_fwd(BinaryOp::Div, g, bd);  // g / b
    if (a.requires_grad()) acc(a, sum_to(gb, a.shape()));
    if (b.requires_grad()) {  // db = -g * a / b^2 = -(g / b) * out
      Tensor t = binary_fwd(BinaryOp::Mul, gb, out);
      backend_of(t).unary(UnaryOp::Neg, t, t);
      acc(b, sum_to(t, bd.shape()));
    }
  });
}

// ---- unary: y = f(x), dx = dy * f'(x) ----
static Variable unary_op(const Variable& x, UnaryOp op, double a = 0, double b = 0) {
  const Tensor& xd = x.data();
  CTX_CHECK(is_float(xd.dtype()), unary_name(op), ": expected a float tensor, got ", xd.str());
  Tensor y = empty_like(xd);
  backend_of(xd).unary(op, xd, y, a, b);
  return make_result(y, unary_name(op), {x}, [x, xd, y, op, a, b](const Tensor& g) {
    Tensor dx = empty_like(g);
    backend_of(g).unary_backward(op, xd, y, g, dx, a, b);
    acc(x, dx);
  });
}

Variable neg(const Variable& x) { return unary_op(x, UnaryOp::Neg); }
Variable scale(const Variable& x, double s) { return unary_op(x, UnaryOp::Scale, s); }
Variable add_scalar(const Variable& x, double s) { return unary_op(x, UnaryOp::AddScalar, s); }
Variable exp(const Variable& x) { return unary_op(x, UnaryOp::Exp); }
Variable log(const Variable& x) { return unary_op(x, UnaryOp::Log); }
Variable tanh(const Variable& x) { return unary_op(x, UnaryOp::Tanh); }
Variable sin(const Variable& x) { return unary_op(x, UnaryOp::Sin); }
Variable cos(const Variable& x) { return unary_op(x, UnaryOp::Cos); }
Variable sqrt(const Variable& x) { return unary_op(x, UnaryOp::Sqrt); }
Variable relu(const Variable& x) { return unary_op(x, UnaryOp::Relu); }
Variable gelu_tanh(const Variable& x) { return unary_op(x, UnaryOp::GeluTanh); }
Variable pow(const Variable& x, double p) { return unary_op(x, UnaryOp::Pow, p); }
Variable square(const Variable& x) { return unary_op(x, UnaryOp::Square); }
Variable clamp(const Variable& x, double lo, double hi) {
  CTX_CHECK(lo <= hi, "clamp: lo ", lo, " > hi ", hi);
  return unary_op(x, UnaryOp::Clamp, lo, hi);
}

// ---- dropout: y = x * mask, mask in {0, 1/(1-p)} ----
// The mask is a function of one seed drawn from rng (core/dropout_mask.h): nothing is stored or
// uploaded, and the backward recomputes it on the gradient's device.
Variable dropout(const Variable& x, double p, bool training, Rng& rng) {
  CTX_CHECK(p >= 0 && p < 1, "dropout: p must be in [0, 1), got ", p);
  if (!training || p == 0) return x;
  return dropout(x, dropout_mask(p, rng.next_u64()));
}

Variable dropout(const Variable& x, const DropoutMask& m) {
  if (!m.active()) return x;
  const Tensor& xd = x.data();
  CTX_CHECK(is_float(xd.dtype()), "dropout: expected a float tensor, got ", xd.str());
  Tensor y = empty_like(xd);
  backend_of(xd).dropout(xd, m, y);
  return make_result(y, "dropout", {x}, [x, m](const Tensor& g) {
    Tensor dx = empty_like(g);
    backend_of(g).dropout(g, m, dx);
    acc(x, dx);
  });
}

}  // namespace ctx
