// autograd/ops_linalg.cpp — matmul / batched matmul with transposes (Linear: ops_linear.cpp).
// Backward of C = alpha op(A) op(B):  d op(A) = alpha dC op(B)^T,  d op(B) = alpha op(A)^T dC, each
// expressed as one GEMM (alpha its scale) with the right transpose flags so nothing is materialised.
#include "autograd/ops.h"
#include "autograd/ops_util.h"

namespace ctx {
using namespace detail;

namespace {

struct MatmulPlan {
  GemmDesc g;
  Shape out_shape;
  bool b_shared = false;  // b is one matrix used by every batch item
  bool a_shared = false;
};

// a: [..., M, K] (or [..., K, M] if ta); b: [..., K, N] (or [..., N, K] if tb) or 2-D.
MatmulPlan plan_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, double alpha) {
  check_compatible(a, b, "matmul");
  CTX_CHECK(is_float(a.dtype()), "matmul: expected float tensors, got ", a.str());
  CTX_CHECK(a.dim() >= 2 && b.dim() >= 2, "matmul: operands must be at least 2-D, got ", a.str(),
            " and ", b.str());
  MatmulPlan p;
  GemmDesc& g = p.g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.alpha = alpha;
  g.M = ta ? a.size(-1) : a.size(-2);
  int64_t Ka = ta ? a.size(-2) : a.size(-1);
  int64_t Kb = tb ? b.size(-1) : b.size(-2);
  g.N = tb ? b.size(-2) : b.size(-1);
  CTX_CHECK(Ka == Kb, "matmul: inner dimensions differ: ", a.str(), (ta ? "^T" : ""), " @ ",
            b.str(), (tb ? "^T" : ""), " (", Ka, " vs ", Kb, ")");
  g.K = Ka;
  Shape abatch(a.shape().begin(), a.shape().end() - 2);
  Shape bbatch(b.shape().begin(), b.shape().end() - 2);
  int64_t na = shape_numel(abatch), nb = shape_numel(bbatch);
  if (b.dim() == 2 && a.dim() > 2) {
    p.b_shared = true;
    g.batch = na;
    p.out_shape = abatch;
  } else if (a.dim() == 2 && b.dim() > 2) {
    p.a_shared = true;
    g.batch = nb;
    p.out_shape = bbatch;
  } else {
    CTX_CHECK(abatch == bbatch, "matmul: batch dimensions differ: ", a.str(), " vs ", b.str());
    g.batch = na;
    p.out_shape = abatch;
  }
  p.out_shape.push_back(g.M);
  p.out_shape.push_back(g.N);
  g.stride_a = p.a_shared ? 0 : g.M * g.K;
  g.stride_b = p.b_shared ? 0 : g.K * g.N;
  g.stride_c = g.M * g.N;
  // One big GEMM when b is shared and a is not transposed: [batch*M, K] x op(B).
  if (p.b_shared && !ta) {
    g.M *= g.batch;
    g.batch = 1;
    g.stride_a = g.stride_c = 0;
  }
  return p;
}

// C (+)= alpha op(A) op(B) with explicit batch handling; when `reduce_batch`, every batch item
// accumulates into the same C (the gradient of a shared operand).
void run_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch, const Tensor& A,
              int64_t sa, const Tensor& B, int64_t sb, Tensor& C, bool reduce_batch, double alpha) {
  Backend& be = backend_of(A);
  GemmDesc g;
  g.alpha = alpha;
  g.trans_a = ta;
  g.trans_b = tb;
  g.M = M; g.N = N; g.K = K;
  if (!reduce_batch) {
    g.batch = batch;
    g.stride_a = sa; g.stride_b = sb; g.stride_c = M * N;
    be.gemm(g, A, B, C);
    return;
  }
  // Accumulate over the batch: one GEMM per item with beta = 1 after the first.
  g.batch = 1;
  for (int64_t i = 0; i < batch; ++i) {
    g.beta = i == 0 ? 0.f : 1.f;
    Tensor Ai = A.view({-1}).slice0(i * sa, i * sa + (ta ? K * M : M * K));
    Tensor Bi = B.view({-1}).slice0(i * sb, i * sb + (tb ? N * K : K * N));
    be.gemm(g, Ai, Bi, C);
  }
}

}  // namespace

Variable matmul(const Variable& a, const Variable& b, bool ta, bool tb, double alpha) {
  const Tensor ad = a.data(), bd = b.data();
  MatmulPlan p = plan_matmul(ad, bd, ta, tb, alpha);
  Tensor out = Tensor::empty(p.out_shape, ad.dtype(), ad.device());
  backend_of(ad).gemm(p.g, ad, bd, out);
  return make_result(out, "matmul", {a, b}, [a, b, ad, bd, ta, tb, alpha, p](const Tensor& g) {
    // Per-item sizes (before any flattening)
    const int64_t M = ta ? ad.size(-1) : ad.size(-2);
    const int64_t K = ta ? ad.size(-2) : ad.size(-1);
    const int64_t N = tb ? bd.size(-2) : bd.size(-1);
    const int64_t batch = shape_numel(Shape(p.out_shape.begin(), p.out_shape.end() - 2));
    const int64_t sa = p.a_shared ? 0 : M * K, sb = p.b_shared ? 0 : K * N, sc = M * N;
    if (a.requires_grad()) {
      Tensor da = Tensor::empty(ad.shape(), ad.dtype(), ad.device());
      if (p.b_shared && !ta)  // all rows at once: dA [batch*M, K] = dC op(B)^T
        run_gemm(false, !tb, M * batch, K, N, 1, g, 0, bd, 0, da, false, alpha);
      else if (!ta)  // dA [M,K] = dC [M,N] op(B)^T
        run_gemm(false, !tb, M, K, N, batch, g, sc, bd, sb, da, p.a_shared, alpha);
      else      // dA [K,M] = op(B) dC^T
        run_gemm(tb, true, K, M, N, batch, bd, sb, g, sc, da, p.a_shared, alpha);
      acc(a, da);
    }
    if (b.requires_grad()) {
      Tensor db = Tensor::empty(bd.shape(), bd.dtype(), bd.device());
      if (p.b_shared && !ta && !tb) {        // dB [K,N] = A^T dC over all rows at once
        run_gemm(true, false, K, N, M * batch, 1, ad, 0, g, 0, db, false, alpha);
      } else if (p.b_shared && !ta && tb) {  // dB [N,K] = dC^T A over all rows at once
        run_gemm(true, false, N, K, M * batch, 1, g, 0, ad, 0, db, false, alpha);
      } else if (!tb) {                      // dB [K,N] = op(A)^T dC
        run_gemm(!ta, false, K, N, M, batch, ad, sa, g, sc, db, p.b_shared, alpha);
      } else {                               // dB [N,K] = dC^T op(A)
        run_gemm(true, ta, N, K, M, batch, g, sc, ad, sa, db, p.b_shared, alpha);
      }
      acc(b, db);
    }
  });
}

// linear(): autograd/ops_linear.cpp (one node with the bias folded into the GEMM).

}  // namespace ctx
