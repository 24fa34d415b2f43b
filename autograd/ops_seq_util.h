// autograd/ops_seq_util.h — tensor-level (not recorded) math for the sequential ops of the
// survey's encodings (ops_gru.cpp, ops_ode.cpp, ops_complex.cpp): thin wrappers around the
// Backend primitives (gemm, unary, binary, copy_strided, reduce_sum), so that the ops' loops
// run unchanged on every backend (CPU, CUDA) and never bring data to the host.
#pragma once
#include "autograd/ops_util.h"

namespace ctx::seq {

inline Tensor like(const Tensor& t, const Shape& s) { return Tensor::empty(s, t.dtype(), t.device()); }

// out = a op b (broadcast as Backend::binary); out is fresh.
inline Tensor bin(BinaryOp op, const Tensor& a, const Tensor& b) {
  Tensor out = like(a, detail::broadcast_shape(a.shape(), b.shape(), binary_name(op)));
  backend_of(a).binary(op, a, b, out);
  return out;
}
inline Tensor add(const Tensor& a, const Tensor& b) { return bin(BinaryOp::Add, a, b); }
inline Tensor sub(const Tensor& a, const Tensor& b) { return bin(BinaryOp::Sub, a, b); }
inline Tensor mul(const Tensor& a, const Tensor& b) { return bin(BinaryOp::Mul, a, b); }
// dst = a op b written into an existing tensor (a view of a larger buffer); dst must not alias.
inline void bin_into(BinaryOp op, const Tensor& a, const Tensor& b, Tensor dst) {
  backend_of(a).binary(op, a, b, dst);
}
inline Tensor un(UnaryOp op, const Tensor& x, double a = 0, double b = 0) {
  Tensor y = detail::empty_like(x);
  backend_of(x).unary(op, x, y, a, b);
  return y;
}
inline void un_into(UnaryOp op, const Tensor& x, Tensor y, double a = 0, double b = 0) {
  backend_of(x).unary(op, x, y, a, b);
}
// x + s * y
inline Tensor axpy(const Tensor& x, double s, const Tensor& y) { return add(x, un(UnaryOp::Scale, y, s)); }
// sigmoid(x) = (1 + tanh(x / 2)) / 2 (no sigmoid primitive; exact up to rounding)
inline void sigmoid_into(const Tensor& x, Tensor y) {
  Tensor t = un(UnaryOp::Tanh, un(UnaryOp::Scale, x, 0.5));
  backend_of(x).unary(UnaryOp::AddScalar, un(UnaryOp::Scale, t, 0.5), y, 0.5);
}
// dx = dy * s (1 - s) for s = sigmoid(x)
inline void sigmoid_grad_into(const Tensor& s, const Tensor& dy, Tensor dx) {
  bin_into(BinaryOp::Mul, dy, sub(s, un(UnaryOp::Square, s)), dx);
}
// dx = dy * (1 - y^2) for y = tanh(x)
inline void tanh_grad_into(const Tensor& y, const Tensor& dy, Tensor dx) {
  backend_of(y).unary_backward(UnaryOp::Tanh, y, y, dy, dx);
}
inline Tensor tanh_grad(const Tensor& y, const Tensor& dy) {
  Tensor dx = detail::empty_like(y);
  tanh_grad_into(y, dy, dx);
  return dx;
}
// dst = src (same numel; dst may be a view of a larger buffer)
inline void copy_into(const Tensor& src, Tensor dst) {
  backend_of(src).copy_strided(src, Strided{0, {1}}, dst, Strided{0, {1}}, Shape{src.numel()}, false);
}

// C [M, N] = alpha op(A) op(B) + beta C, A and B row-major 2-D (or viewed so).
inline void mm(const Tensor& A, bool ta, const Tensor& B, bool tb, Tensor C, float beta = 0.f,
               float alpha = 1.f) {
  GemmDesc g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.M = C.size(0);
  g.N = C.size(1);
  g.K = ta ? A.size(0) : A.size(1);
  g.alpha = alpha;
  g.beta = beta;
  backend_of(A).gemm(g, A, B, C);
}

// Swap the first two dims of a contiguous [a, b, rest...] tensor: [b, a, rest...].
inline Tensor swap01(const Tensor& x) {
  const int64_t a = x.size(0), b = x.size(1), r = x.numel() / (a * b);
  Shape os = x.shape();
  std::swap(os[0], os[1]);
  Tensor out = like(x, os);
  // over out's index space (j, i, k) in [b, a, r]: src element i*b*r + j*r + k
  backend_of(x).copy_strided(x, Strided{0, {r, b * r, 1}}, out, Strided{0, {a * r, r, 1}},
                             Shape{b, a, r}, false);
  return out;
}

// Row sums of x [R, C] -> [C] (fresh).
inline Tensor colsum(const Tensor& x) {
  Tensor out = like(x, {1, x.size(-1)});
  backend_of(x).reduce_sum(x.view({-1, x.size(-1)}), out);
  return out.view({x.size(-1)});
}

}  // namespace ctx::seq
