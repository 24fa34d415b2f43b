// autograd/ops_cope.cpp — cope_logits and cope_attention (ops_posenc2024.h): CoPE's gated positions
// as one node, and CoPE's whole attention (logits, masked softmax, p v) as one node.
// Forward: A [B, H, T, S] = scale q k^T (one batched GEMM), Z [B H T, npos] = q E (one GEMM), then
//   the cope_forward extension kernel: per query row the gates, their reverse cumulative sum
//   (psum, kept), the clamp and the interpolation of Z -> out = A + e scale [B, H, T, S].
// Backward from dout: cope_backward gives dA [B, H, T, S] (dout + the gate path) and
//   dZ [B H T, npos]; then
//   dq = scale dA k + dZ E^T, dk = scale dA^T q, dE = q^T dZ (GEMMs).
// cope_attention: the same A and Z, then cope_softmax_forward (the scan and the row's softmax: p,
//   never the logits), o = p v; backward: dv = p^T do, dp = do v^T, cope_softmax_backward (the
//   softmax's backward into dL/dlogits, then the scan's) and the same GEMMs.
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

// The checks both ops share: q [B, H, T, d], k [B, H, S, d], E [d, npos], one device and dtype.
void check_cope_inputs(const char* op, const Tensor& Q, const Tensor& K, const Tensor& Ed) {
  CTX_CHECK(Q.dim() == 4 && K.dim() == 4 && K.size(0) == Q.size(0) && K.size(1) == Q.size(1) &&
                K.size(3) == Q.size(3),
            op, ": q must be [B, H, T, d] and k [B, H, S, d], got ", Q.str(), " and ", K.str());
  CTX_CHECK(Ed.dim() == 2 && Ed.size(0) == Q.size(3) && Ed.size(1) >= 1, op, ": E must be [", Q.size(3),
            ", npos], got ", Ed.str());
  check_compatible(Q, K, op);
  check_compatible(Q, Ed, op);
}

// A = scale q k^T [B, H, T, S] and Z = q E [B, H, T, npos]: what both ops' kernels read.
void cope_products(const Tensor& Q, const Tensor& K, const Tensor& Ed, double scale, Tensor& A, Tensor& Z) {
  const int64_t B = Q.size(0), H = Q.size(1), T = Q.size(2), S = K.size(2), d = Q.size(3), np = Ed.size(1);
  A = seq::like(Q, {B, H, T, S}), Z = seq::like(Q, {B, H, T, np});
  bmm(Q, false, K, true, A, B * H, T, S, d, scale);
  seq::mm(Q.view({B * H * T, d}), false, Ed, false, Z.view({B * H * T, np}));
}

// From dA = dL/dA and dZ = dL/dZ: dq = scale dA k + dZ E^T, dk = scale dA^T q, dE = q^T dZ.
void cope_input_grads(const Tensor& dA, const Tensor& dZ, const Tensor& Q, const Tensor& K, const Tensor& Ed,
                      double scale, const Variable& q, const Variable& k, const Variable& E) {
  const int64_t B = Q.size(0), H = Q.size(1), T = Q.size(2), S = K.size(2), d = Q.size(3), np = Ed.size(1);
  const int64_t BH = B * H;
  const Tensor dZr = dZ.view({BH * T, np});
  if (q.requires_grad()) {
    Tensor dq = seq::like(dA, {B, H, T, d});
    bmm(dA, false, K, false, dq, BH, T, d, S, scale);
    Tensor dqv = dq.view({BH * T, d});
    seq::mm(dZr, false, Ed, true, dqv, 1.f);
    acc(q, dq);
  }
  if (k.requires_grad()) {
    Tensor dk = seq::like(dA, {B, H, S, d});
    bmm(dA, true, Q, false, dk, BH, S, d, T, scale);
    acc(k, dk);
  }
  if (E.requires_grad()) {
    Tensor dE = seq::like(dA, {d, np});
    seq::mm(Q.view({BH * T, d}), true, dZr, false, dE);
    acc(E, dE);
  }
}
}  // namespace

Variable cope_logits(const Variable& q, const Variable& k, const Variable& E, double scale, int64_t q_pos0,
                     int64_t window, int64_t sinks) {
  const Tensor Q = q.data(), K = k.data(), Ed = E.data();
  check_cope_inputs("cope_logits", Q, K, Ed);
  const int64_t B = Q.size(0), H = Q.size(1), T = Q.size(2), S = K.size(2), np = Ed.size(1);
  Tensor A, Z;
  cope_products(Q, K, Ed, scale, A, Z);
  Tensor out = seq::like(Q, {B, H, T, S}), psum = seq::like(Q, {B, H, T, S});
  kernels::cope_forward(Q.device(), A, Z, q_pos0, window, sinks, scale, out, psum);

  return make_result(out, "cope_logits", {q, k, E}, [=](const Tensor& dy) {
    Tensor dA = seq::like(dy, {B, H, T, S}), dZ = seq::like(dy, {B, H, T, np});
    kernels::cope_backward(dy.device(), dy, A, Z, psum, q_pos0, window, sinks, scale, dA, dZ);
    cope_input_grads(dA, dZ, Q, K, Ed, scale, q, k, E);
  });
}

bool cope_attention_on(Device d) { return kernels::cope_softmax_forward.has(d) && kernels::cope_softmax_backward.has(d); }

Variable cope_attention(const Variable& q, const Variable& k, const Variable& v, const Variable& E, double scale,
                        int64_t q_pos0, int64_t window, int64_t sinks) {
  const Tensor Q = q.data(), K = k.data(), V = v.data(), Ed = E.data();
  check_cope_inputs("cope_attention", Q, K, Ed);
  CTX_CHECK(V.dim() == 4 && V.size(0) == K.size(0) && V.size(1) == K.size(1) && V.size(2) == K.size(2), 
            "cope_attention: v must be [B, H, S, dv] like k ", K.str(), ", got ", V.str());
  check_compatible(Q, V, "cope_attention");
  const int64_t B = Q.size(0), H = Q.size(1), T = Q.size(2), S = K.size(2), dv = V.size(3), np = Ed.size(1);
  const int64_t BH = B * H;
  Tensor A, Z;
  cope_products(Q, K, Ed, scale, A, Z);
  Tensor P = seq::like(Q, {B, H, T, S}), psum = seq::like(Q, {B, H, T, S});
  kernels::cope_softmax_forward(Q.device(), A, Z, q_pos0, window, sinks, scale, P, psum);
  Tensor O = seq::like(Q, {B, H, T, dv});
  bmm(P, false, V, false, O, BH, T, dv, S, 1.0);  // O = P V

  return make_result(O, "cope_attention", {q, k, v, E}, [=](const Tensor& dO) {
    if (v.requires_grad()) {  // dV = P^T dO
      Tensor dV = seq::like(dO, {B, H, S, dv});
      bmm(P, true, dO, false, dV, BH, S, dv, T, 1.0);
      acc(v, dV);
    }
    if (!q.requires_grad() && !k.requires_grad() && !E.requires_grad()) return;
    Tensor dP = seq::like(dO, {B, H, T, S});
    bmm(dO, false, V, true, dP, BH, T, S, dv, 1.0);  // dP = dO V^T
    Tensor dA = seq::like(dO, {B, H, T, S}), dZ = seq::like(dO, {B, H, T, np});
    kernels::cope_softmax_backward(dO.device(), dP, P, A, Z, psum, q_pos0, window, sinks, scale, dA, dZ);
    cope_input_grads(dA, dZ, Q, K, Ed, scale, q, k, E);
  });
}

}  // namespace ctx
