// autograd/ops_fire.cpp — fire_bias (ops_posenc2024.h): FIRE's bias as one node.
// Forward, N = Bp T S points:
//   X, DC, DL [N]   = fire_distances (the extension kernel: x and dx/dc, dx/dlm per point)
//   pre [N, W]      = X w1^T + b1;  hid = relu(pre);  out [N, H] = hid w2^T + b2
//   bias [Bp, H, T, S] = out viewed [Bp, T S, H], the last two dims swapped
// Backward from dB [Bp, H, T, S]: dOut [N, H] (swapped back), db2 = sum dOut, dw2 = dOut^T hid,
//   dpre = (dOut w2) * (pre > 0), dw1 = dpre^T X, db1 = sum dpre, dX = dpre w1,
//   dc = sum dX DC, dlm = sum dX DL. Everything but the distances is Backend GEMMs and reductions.
#include "autograd/kernels/fire.h"
#include "autograd/ops_posenc2024.h"
#include "autograd/ops_seq_util.h"

namespace ctx {
using namespace detail;

namespace {
// [Bp, M, K] -> [Bp, K, M] (fresh)
Tensor swap12(const Tensor& x, int64_t Bp, int64_t M, int64_t K) {
  Tensor out = seq::like(x, {Bp, K, M});
  // over out's index space (b, k, m): src element b*M*K + m*K + k
  backend_of(x).copy_strided(x, Strided{0, {M * K, 1, K}}, out, Strided{0, {K * M, M, 1}}, Shape{Bp, K, M},
                             false);
  return out;
}
// sum of a * b over all elements -> [1]
Tensor dot(const Tensor& a, const Tensor& b) { return seq::colsum(seq::mul(a, b).view({-1, 1})); }
}  // namespace

Variable fire_bias(const Variable& c, const Variable& lm, const Variable& w1, const Variable& b1,
                   const Variable& w2, const Variable& b2, const Tensor& pq, const Tensor& pk,
                   double init_L, double eps) {
  const Tensor W1 = w1.data(), B1 = b1.data(), W2 = w2.data(), B2 = b2.data();
  CTX_CHECK(W1.dim() == 2 && W1.size(1) == 1, "fire_bias: w1 must be [W, 1], got ", W1.str());
  const int64_t W = W1.size(0);
  CTX_CHECK(W2.dim() == 2 && W2.size(1) == W, "fire_bias: w2 must be [H, ", W, "], got ", W2.str());
  const int64_t H = W2.size(0);
  CTX_CHECK(B1.shape() == Shape{W} && B2.shape() == Shape{H}, "fire_bias: b1 must be [", W, "] and b2 [", H,
            "], got ", B1.str(), " and ", B2.str());
  for (const Tensor* t : {&W1, &B1, &W2, &B2}) check_compatible(c.data(), *t, "fire_bias");
  CTX_CHECK(pq.dim() == 2 && pk.dim() == 2 && pk.size(0) == pq.size(0), "fire_bias: positions must be [Bp, T] and [Bp, S], got ",
            pq.str(), " and ", pk.str());
  const int64_t Bp = pq.size(0), T = pq.size(1), S = pk.size(1), N = Bp * T * S;
  const Tensor cd = c.data();
  Tensor X = seq::like(cd, {Bp, T, S}), DC = seq::like(cd, {Bp, T, S}), DL = seq::like(cd, {Bp, T, S});
  kernels::fire_distances(cd.device(), pq, pk, cd, lm.data(), init_L, eps, X, DC, DL);
  Backend& be = backend_of(cd);
  Tensor pre = seq::like(cd, {N, W}), out = seq::like(cd, {N, H});
  be.linear(X.view({N, 1}), W1, B1, pre);
  Tensor hid = seq::un(UnaryOp::Relu, pre);
  be.linear(hid, W2, B2, out);
  Tensor bias = swap12(out, Bp, T * S, H).view({Bp, H, T, S});

  return make_result(bias, "fire_bias", {c, lm, w1, b1, w2, b2}, [=](const Tensor& dy) {
    const Tensor dOut = swap12(dy, Bp, H, T * S).view({N, H});
    acc(b2, seq::colsum(dOut));
    if (w2.requires_grad()) {
      Tensor dw2 = seq::like(dy, {H, W});
      seq::mm(dOut, true, hid, false, dw2);
      acc(w2, dw2);
    }
    if (!(w1.requires_grad() || b1.requires_grad() || c.requires_grad() || lm.requires_grad())) return;
    Tensor dhid = seq::like(dy, {N, W}), dpre = seq::like(dy, {N, W});
    seq::mm(dOut, false, W2, false, dhid);
    backend_of(dy).unary_backward(UnaryOp::Relu, pre, hid, dhid, dpre);
    acc(b1, seq::colsum(dpre));
    const Tensor Xc = X.view({N, 1});
    if (w1.requires_grad()) {
      Tensor dw1 = seq::like(dy, {W, 1});
      seq::mm(dpre, true, Xc, false, dw1);
      acc(w1, dw1);
    }
    Tensor dX = seq::like(dy, {N, 1});
    seq::mm(dpre, false, W1, false, dX);
    if (c.requires_grad()) acc(c, dot(dX, DC.view({N, 1})));
    if (lm.requires_grad()) acc(lm, dot(dX, DL.view({N, 1})));
  });
}

}  // namespace ctx
