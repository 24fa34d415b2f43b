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
//   softmax's backward into dL/dlogits, then the scan's) and the same GEMMs; all of it by query
//   blocks of 64 rows over only the keys and positions a block's causal rows reach (query_blocks).
#include "autograd/kernels/cope.h"
#include "autograd/ops_posenc2024.h"
#include "autograd/ops_seq_util.h"

#include <algorithm>
#include <vector>

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

namespace {
// C[b] = alpha op(A[b]) op(B[b]) + beta C[b] over `batch` items whose first elements lie
// a0 + b sa, b0 + b sb, c0 + b sc into A, B and C (sb 0: B shared): the rows of a query block
// within each (b, h) (rows are contiguous per (b, h), the blocks' starts are offsets).
void bmm_at(const Tensor& A, int64_t a0, int64_t sa, bool ta, const Tensor& B, int64_t b0, int64_t sb, bool tb,
            const Tensor& C, int64_t c0, int64_t sc, int64_t batch, int64_t M, int64_t N, int64_t K, double alpha,
            double beta = 0) {
  auto at = [](const Tensor& t, int64_t off) { return t.view({t.numel()}).slice0(off, t.numel()); };
  GemmDesc g;
  g.trans_a = ta, g.trans_b = tb;
  g.M = M, g.N = N, g.K = K, g.batch = batch;
  g.stride_a = sa, g.stride_b = sb, g.stride_c = sc;
  g.alpha = alpha, g.beta = beta;
  Tensor c = at(C, c0);
  backend_of(A).gemm(g, at(A, a0), at(B, b0), c);
}

// cope_attention's query blocks: rows [i0, i0 + rows) of every (b, h) see only the keys [0, n),
// n = min(S, q_pos0 + i0 + rows) (causal), and their positions p <= psum <= n (a sum of at most
// n gates, each <= 1, rounded up to no more than n) reach only Z's columns [0, np), np =
// min(npos, n + 1): the clamp min(psum, np - 1) is then the full one's. So a block's GEMMs and
// kernels run on [rows, n] and [rows, np] instead of [rows, S] and [rows, npos]: at T = S 256 in
// blocks of 64, 640 of 1024 key columns (the causal half less the diagonal blocks).
constexpr int64_t kCopeQueryBlock = 64;
struct QueryBlock {
  int64_t i0, rows, n, np;
};
std::vector<QueryBlock> query_blocks(int64_t T, int64_t S, int64_t npos, int64_t q_pos0) {
  std::vector<QueryBlock> out;
  for (int64_t i0 = 0; i0 < T; i0 += kCopeQueryBlock) {
    const int64_t rows = std::min(kCopeQueryBlock, T - i0), n = std::min(S, q_pos0 + i0 + rows);
    out.push_back({i0, rows, n, std::min(npos, n + 1)});
  }
  return out;
}

// A gradient buffer the blocks accumulate into (beta 1): zeros unless the widest block (the last)
// writes all of it first (beta 0), which `covered` says.
Tensor grad_buffer(const Tensor& like, const Shape& s, bool covered) {
  return covered ? seq::like(like, s) : Tensor::zeros(s, like.dtype(), like.device());
}
}  // namespace

Variable cope_attention(const Variable& q, const Variable& k, const Variable& v, const Variable& E, double scale,
                        int64_t q_pos0, int64_t window, int64_t sinks) {
  const Tensor Q = q.data(), K = k.data(), V = v.data(), Ed = E.data();
  check_cope_inputs("cope_attention", Q, K, Ed);
  CTX_CHECK(V.dim() == 4 && V.size(0) == K.size(0) && V.size(1) == K.size(1) && V.size(2) == K.size(2), 
            "cope_attention: v must be [B, H, S, dv] like k ", K.str(), ", got ", V.str());
  check_compatible(Q, V, "cope_attention");
  const int64_t B = Q.size(0), H = Q.size(1), T = Q.size(2), S = K.size(2), d = Q.size(3), dv = V.size(3),
                np = Ed.size(1);
  const int64_t BH = B * H;
  const std::vector<QueryBlock> blocks = query_blocks(T, S, np, q_pos0);
  // Per block: A = scale q[rows] k[:n]^T [B, H, rows, n], Z = q[rows] E[:, :np] [B, H, rows, np]
  // (through Et = E^T [npos, d], whose first np rows are contiguous), P and psum from the kernel,
  // O[rows] = P v[:n].
  const Tensor Et = seq::swap01(Ed.view({d, np, 1})).view({np, d});
  std::vector<Tensor> As, Zs, Ps, psums;
  Tensor O = seq::like(Q, {B, H, T, dv});
  for (const QueryBlock& qb : blocks) {
    Tensor A = seq::like(Q, {B, H, qb.rows, qb.n}), Z = seq::like(Q, {B, H, qb.rows, qb.np});
    bmm_at(Q, qb.i0 * d, T * d, false, K, 0, S * d, true, A, 0, qb.rows * qb.n, BH, qb.rows, qb.n, d, scale);
    bmm_at(Q, qb.i0 * d, T * d, false, Et, 0, 0, true, Z, 0, qb.rows * qb.np, BH, qb.rows, qb.np, d, 1.0);
    Tensor P = seq::like(A, A.shape()), psum = seq::like(A, A.shape());
    kernels::cope_softmax_forward(Q.device(), A, Z, q_pos0 + qb.i0, window, sinks, scale, P, psum);
    bmm_at(P, 0, qb.rows * qb.n, false, V, 0, S * dv, false, O, qb.i0 * dv, T * dv, BH, qb.rows, dv, qb.n, 1.0);
    As.push_back(A), Zs.push_back(Z), Ps.push_back(P), psums.push_back(psum);
  }

  return make_result(O, "cope_attention", {q, k, v, E}, [=](const Tensor& dO) {
    // The widest block (the last) first: it writes dv's and dk's first n rows and dE's first np
    // columns with beta 0, the others add theirs.
    const bool all_n = !blocks.empty() && blocks.back().n == S, all_np = !blocks.empty() && blocks.back().np == np;
    const bool gq = q.requires_grad(), gk = k.requires_grad(), gv = v.requires_grad(), gE = E.requires_grad();
    Tensor dV, dq, dk, dEt;
    if (gv) dV = grad_buffer(dO, {B, H, S, dv}, all_n);
    if (gq) dq = seq::like(dO, {B, H, T, d});
    if (gk) dk = grad_buffer(dO, {B, H, S, d}, all_n);
    if (gE) dEt = grad_buffer(dO, {np, d}, all_np);
    for (size_t bi = blocks.size(); bi-- > 0;) {
      const QueryBlock& qb = blocks[bi];
      const double beta = bi + 1 == blocks.size() ? 0.0 : 1.0;
      const int64_t rn = qb.rows * qb.n;
      if (gv)  // dV[:n] += P^T dO[rows]
        bmm_at(Ps[bi], 0, rn, true, dO, qb.i0 * dv, T * dv, false, dV, 0, S * dv, BH, qb.n, dv, qb.rows, 1.0,
               all_n ? beta : 1.0);
      if (!gq && !gk && !gE) continue;
      Tensor dP = seq::like(dO, {B, H, qb.rows, qb.n});  // dP = dO[rows] V[:n]^T
      bmm_at(dO, qb.i0 * dv, T * dv, false, V, 0, S * dv, true, dP, 0, rn, BH, qb.rows, qb.n, dv, 1.0);
      Tensor dA = seq::like(dO, dP.shape()), dZ = seq::like(dO, {B, H, qb.rows, qb.np});
      kernels::cope_softmax_backward(dO.device(), dP, Ps[bi], As[bi], Zs[bi], psums[bi], q_pos0 + qb.i0, window,
                                     sinks, scale, dA, dZ);
      const int64_t rp = qb.rows * qb.np;
      if (gq) {  // dq[rows] = scale dA k[:n] + dZ E[:, :np]^T
        bmm_at(dA, 0, rn, false, K, 0, S * d, false, dq, qb.i0 * d, T * d, BH, qb.rows, d, qb.n, scale);
        bmm_at(dZ, 0, rp, false, Et, 0, 0, false, dq, qb.i0 * d, T * d, BH, qb.rows, d, qb.np, 1.0, 1.0);
      }
      if (gk)  // dk[:n] += scale dA^T q[rows]
        bmm_at(dA, 0, rn, true, Q, qb.i0 * d, T * d, false, dk, 0, S * d, BH, qb.n, d, qb.rows, scale,
               all_n ? beta : 1.0);
      if (gE) {  // dE[:, :np]^T += dZ^T q[rows], summed over (b, h): q's rows gathered
        Tensor Qb = seq::like(Q, {BH * qb.rows, d});
        backend_of(Q).copy_strided(Q, Strided{qb.i0 * d, {T * d, 1}}, Qb, Strided{0, {qb.rows * d, 1}},
                                   Shape{BH, qb.rows * d}, false);
        seq::mm(dZ.view({BH * qb.rows, qb.np}), true, Qb, false, dEt.slice0(0, qb.np), (float)(all_np ? beta : 1.0));
      }
    }
    if (gv) acc(v, dV);
    if (gq) acc(q, dq);
    if (gk) acc(k, dk);
    if (gE) acc(E, seq::swap01(dEt.view({np, d, 1})).view({d, np}));
  });
}

}  // namespace ctx
