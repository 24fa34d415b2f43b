// autograd/ops_cope.cpp — cope_logits (ops_posenc2024.h): CoPE's gated positions as one node.
// Forward: A [B, H, T, S] = scale q k^T (one batched GEMM), Z [B H T, npos] = q E (one GEMM), then
//   the cope_forward extension kernel: per query row the gates, their reverse cumulative sum
//   (psum, kept), the clamp and the interpolation of Z -> out = A + e scale [B, H, T, S].
// Backward from dout: cope_backward gives dA [B, H, T, S] (dout + the gate path) and
//   dZ [B H T, npos]; then
//   dq = scale dA k + dZ E^T, dk = scale dA^T q, dE = q^T dZ (GEMMs).
#include "autograd/kernels/cope.h"
#include "autograd/ops_posenc2024.h"
#include "autograd/ops_seq_util.h"

namespace ctx {
using namespace detail;

namespace {
// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] over `batch` row-major matrices.
void bmm(const Tensor& A, bool ta, const Tensor& B, bool tb, Tensor& C, int64_t batch, int64_t M, int64_t N,
         int64_t K, double alpha, double beta = 0) {
  GemmDesc g;
  g.trans_a = ta, g.trans_b = tb;
  g.M = M, g.N = N, g.K = K, g.batch = batch;
  g.stride_a = M * K, g.stride_b = K * N, g.stride_c = M * N;
  g.alpha = alpha, g.beta = beta;
  backend_of(A).gemm(g, A, B, C);
}
}  // namespace

Variable cope_logits(const Variable& q, const Variable& k, const Variable& E, double scale, int64_t q_pos0,
                   int64_t window) {
  const Tensor Q = q.data(), K = k.data(), Ed = E.data();
  CTX_CHECK(Q.dim() == 4 && K.dim() == 4 && K.size(0) == Q.size(0) && K.size(1) == Q.size(1) &&
                K.size(3) == Q.size(3),
            "cope_logits: q must be [B, H, T, d] and k [B, H, S, d], got ", Q.str(), " and ", K.str());
  const int64_t B = Q.size(0), H = Q.size(1), T = Q.size(2), S = K.size(2), d = Q.size(3), BH = B * H;
  CTX_CHECK(Ed.dim() == 2 && Ed.size(0) == d && Ed.size(1) >= 1, "cope_logits: E must be [", d, ", npos], got ",
            Ed.str());
  check_compatible(Q, K, "cope_logits");
  check_compatible(Q, Ed, "cope_logits");
  const int64_t np = Ed.size(1);
  Tensor A = seq::like(Q, {B, H, T, S}), Z = seq::like(Q, {B, H, T, np});
  bmm(Q, false, K, true, A, BH, T, S, d, scale);
  seq::mm(Q.view({BH * T, d}), false, Ed, false, Z.view({BH * T, np}));
  Tensor out = seq::like(Q, {B, H, T, S}), psum = seq::like(Q, {B, H, T, S});
  kernels::cope_forward(Q.device(), A, Z, q_pos0, window, scale, out, psum);

  return make_result(out, "cope_logits", {q, k, E}, [=](const Tensor& dy) {
    Tensor dA = seq::like(dy, {B, H, T, S}), dZ = seq::like(dy, {B, H, T, np});
    kernels::cope_backward(dy.device(), dy, A, Z, psum, q_pos0, window, scale, dA, dZ);
    const Tensor dZr = dZ.view({BH * T, np});
    if (q.requires_grad()) {
      Tensor dq = seq::like(dy, {B, H, T, d});
      bmm(dA, false, K, false, dq, BH, T, d, S, scale);
      Tensor dqv = dq.view({BH * T, d});
      seq::mm(dZr, false, Ed, true, dqv, 1.f);
      acc(q, dq);
    }
    if (k.requires_grad()) {
      Tensor dk = seq::like(dy, {B, H, S, d});
      bmm(dA, true, Q, false, dk, BH, S, d, T, scale);
      acc(k, dk);
    }
    if (E.requires_grad()) {
      Tensor dE = seq::like(dy, {d, np});
      seq::mm(Q.view({BH * T, d}), true, dZr, false, dE);
      acc(E, dE);
    }
  });
}

}  // namespace ctx
