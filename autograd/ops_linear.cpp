// autograd/ops_linear.cpp — Linear, y = x w^T + b (w [out, in], b [out]), as one node, and the
// transformer MLP built of two (mlp_gelu: linear, gelu_tanh, linear as one node).
// Forward: Backend::linear (Fused::Linear: one GEMM with the bias inside it; CPU:
// core/cpu/linear.cpp). Backward: dx = dy w (NN), dw = dy^T x (TN), db = column sums of dy;
// dw and db go straight into the parameter's gradient buffer when it has one (grad_target: the
// trainer's flat gradient slot, or an earlier gradient, with beta = 1), and the backend hears
// that dy is read by two GEMMs (gemm_operand_reused: the CPU converts it to bf16 once).
// Without a bias, or where use_fused(FastPath::Linear) says no (core/fast_paths.h: a backend
// without Fused::Linear, or CTXLAB_FUSED_LINEAR=0), it is matmul (+ add).
// mlp_gelu: Backend::linear_gelu keeps pre = x w1^T + b1 and h = gelu(pre), then linear; its
// backward forms dpre = (dy w2) * gelu'(pre) and db1 by Backend::gemm_dgelu (CUDA: one cuBLASLt
// GEMM with the DGELU epilogue, then the column sums), never the GELU's input gradient dh on its
// own; the rest is Linear's backward.
#include "autograd/ops.h"
#include "autograd/ops_util.h"
#include "core/fast_paths.h"

namespace ctx {
using namespace detail;

namespace {

// ---- reference: the composition of two nodes ----
Variable linear_unfused(const Variable& x, const Variable& w, const Variable& bias) {
  Variable y = matmul(x, w, false, true);
  return bias.defined() ? add(y, bias) : y;
}

// ---- the backward's pieces (Linear's, and the MLP node's two layers) ----
// A parameter's gradient written by `write(target, add)`: straight into its gradient buffer when
// it has one (grad_target: the trainer's flat slot, or an earlier gradient, add = true when it
// holds one), else into a new tensor that is accumulated. `accumulates`: write can add (beta = 1);
// otherwise only a first write goes to the buffer.
template <class Write>
void write_grad(const Variable& p, bool accumulates, const Write& write) {
  bool add = false;
  Tensor t = grad_target(*p.impl(), add);
  if (t.defined() && (accumulates || !add)) {
    write(t, add);
    grad_written(*p.impl(), t);
    return;
  }
  const Tensor& pd = p.data();
  t = Tensor::empty(pd.shape(), pd.dtype(), pd.device());
  write(t, false);
  acc(p, t);
}
// dw [N, K] (+)= dy^T [N, R] x [R, K]
void weight_grad(Backend& be, const Tensor& dy, const Tensor& xd, const Variable& w, int64_t N, int64_t K, int64_t R) {
  write_grad(w, true, [&](Tensor& dw, bool add) {
    GemmDesc g;
    g.trans_a = true;
    g.M = N; g.N = K; g.K = R;
    g.beta = add ? 1.f : 0.f;
    be.gemm(g, dy, xd, dw);
  });
}
// db [N] = sum over rows of dy
void bias_grad(Backend& be, const Tensor& dy, const Variable& b) {
  write_grad(b, false, [&](Tensor& db, bool) { be.reduce_sum(dy, db); });
}
// dx [R, K] = dy [R, N] w [N, K]
void input_grad(Backend& be, const Tensor& dy, const Tensor& wd, const Variable& x, int64_t N, int64_t K, int64_t R) {
  const Tensor& xd = x.data();
  Tensor dx = Tensor::empty(xd.shape(), xd.dtype(), xd.device());
  GemmDesc g;
  g.M = R; g.N = K; g.K = N;
  be.gemm(g, dy, wd, dx);
  acc(x, dx);
}
// rows of x [..., K]
int64_t rows_of(const Tensor& xd) { return shape_numel(Shape(xd.shape().begin(), xd.shape().end() - 1)); }
void check_weights(const char* op, const Variable& x, const Variable& w, const Variable& bias) {
  CTX_CHECK(w.dim() == 2, op, ": weight must be [out, in], got ", w.data().str());
  CTX_CHECK(x.size(-1) == w.size(1), op, ": input ", x.data().str(), " does not match weight ", w.data().str(),
            " (in_features ", w.size(1), ")");
  if (bias.defined())
    CTX_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), op, ": bias ", bias.data().str(),
              " does not match weight ", w.data().str());
}

}  // namespace

// ---- fast: one node ----
Variable linear(const Variable& x, const Variable& w, const Variable& bias) {
  check_weights("linear", x, w, bias);
  if (!bias.defined() || x.dim() < 2 || !use_fused(FastPath::Linear, backend_of(x.data())))
    return linear_unfused(x, w, bias);

  const Tensor xd = x.data(), wd = w.data(), bd = bias.data();
  check_compatible(xd, wd, "linear");
  check_compatible(xd, bd, "linear");
  CTX_CHECK(is_float(xd.dtype()), "linear: expected float tensors, got ", xd.str());
  const int64_t N = wd.size(0), K = wd.size(1), R = rows_of(xd);
  Shape ys = xd.shape();
  ys.back() = N;
  Tensor y = Tensor::empty(ys, xd.dtype(), xd.device());
  backend_of(xd).linear(xd, wd, bd, y);

  return make_result(y, "linear", {x, w, bias}, [x, w, bias, xd, wd, N, K, R](const Tensor& dy) {
    Backend& be = backend_of(dy);
    if (x.requires_grad() && w.requires_grad()) be.gemm_operand_reused(dy);  // read by dx and dw
    if (x.requires_grad()) input_grad(be, dy, wd, x, N, K, R);
    if (w.requires_grad()) weight_grad(be, dy, xd, w, N, K, R);
    if (bias.requires_grad()) bias_grad(be, dy, bias);
  });
}

// ---- the MLP as one node: x [R, C] -> pre = x w1^T + b1, h = gelu(pre) [R, F] -> y = h w2^T + b2 ----
Variable mlp_gelu(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2, const Variable& b2) {
  check_weights("mlp_gelu", x, w1, b1);
  CTX_CHECK(w2.dim() == 2 && w2.size(1) == w1.size(0), "mlp_gelu: second weight must be [out, ", w1.size(0),
            "] (in_features = the first weight's out_features), got ", w2.data().str());
  if (b2.defined())
    CTX_CHECK(b2.dim() == 1 && b2.size(0) == w2.size(0), "mlp_gelu: second bias ", b2.data().str(),
              " does not match weight ", w2.data().str());
  const Backend& xb = backend_of(x.data());
  if (!b1.defined() || !b2.defined() || x.dim() < 2 || !use_fused(FastPath::Linear, xb) ||
      !use_fused(FastPath::MlpGelu, xb))
    return linear(gelu_tanh(linear(x, w1, b1)), w2, b2);

  const Tensor xd = x.data(), w1d = w1.data(), w2d = w2.data();
  for (const Variable* p : {&w1, &b1, &w2, &b2}) check_compatible(xd, p->data(), "mlp_gelu");
  CTX_CHECK(is_float(xd.dtype()), "mlp_gelu: expected float tensors, got ", xd.str());
  const int64_t F = w1d.size(0), C = w1d.size(1), R = rows_of(xd);
  Backend& be = backend_of(xd);
  Shape hs = xd.shape(), ys = xd.shape();
  hs.back() = F;
  ys.back() = C;
  Tensor pre = Tensor::empty(hs, xd.dtype(), xd.device()), h = Tensor::empty(hs, xd.dtype(), xd.device());
  be.linear_gelu(xd, w1d, b1.data(), pre, h);
  Tensor y = Tensor::empty(ys, xd.dtype(), xd.device());
  be.linear(h, w2d, b2.data(), y);

  return make_result(y, "mlp_gelu", {x, w1, b1, w2, b2},
                     [x, w1, b1, w2, b2, xd, w1d, w2d, pre, h, F, C, R](const Tensor& dy) {
    Backend& be = backend_of(dy);
    const bool lower = x.requires_grad() || w1.requires_grad() || b1.requires_grad();  // dpre needed
    if (lower && w2.requires_grad()) be.gemm_operand_reused(dy);  // read by dpre's GEMM and dw2's
    if (w2.requires_grad()) weight_grad(be, dy, h, w2, C, F, R);
    if (b2.requires_grad()) bias_grad(be, dy, b2);
    if (!lower) return;
    // dpre [R, F] = (dy [R, C] w2 [C, F]) * gelu'(pre), db1 = its column sums, in one call
    Tensor dpre = Tensor::empty(pre.shape(), pre.dtype(), pre.device());
    GemmDesc g;
    g.M = R; g.N = F; g.K = C;
    if (b1.requires_grad()) {
      write_grad(b1, false, [&](Tensor& db1, bool) { be.gemm_dgelu(g, dy, w2d, pre, dpre, db1); });
    } else {
      Tensor none;
      be.gemm_dgelu(g, dy, w2d, pre, dpre, none);
    }
    if (x.requires_grad() && w1.requires_grad()) be.gemm_operand_reused(dpre);
    if (x.requires_grad()) input_grad(be, dpre, w1d, x, F, C, R);
    if (w1.requires_grad()) weight_grad(be, dpre, xd, w1, F, C, R);
  });
}

}  // namespace ctx
