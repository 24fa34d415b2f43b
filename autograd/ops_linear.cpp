// autograd/ops_linear.cpp — Linear, y = x w^T + b (w [out, in], b [out]), as one node.
// Forward: Backend::linear (Fused::Linear: one GEMM with the bias inside it; CPU:
// core/cpu/linear.cpp). Backward: dx = dy w (NN), dw = dy^T x (TN), db = column sums of dy;
// dw and db go straight into the parameter's gradient buffer when it has one (grad_target: the
// trainer's flat gradient slot, or an earlier gradient, with beta = 1), and the backend hears
// that dy is read by two GEMMs (gemm_operand_reused: the CPU converts it to bf16 once).
// Without a bias, or where use_fused(FastPath::Linear) says no (core/fast_paths.h: a backend
// without Fused::Linear, or CTXLAB_FUSED_LINEAR=0), it is matmul (+ add).
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

}  // namespace

// ---- fast: one node ----
Variable linear(const Variable& x, const Variable& w, const Variable& bias) {
  CTX_CHECK(w.dim() == 2, "linear: weight must be [out, in], got ", w.data().str());
  CTX_CHECK(x.size(-1) == w.size(1), "linear: input ", x.data().str(), " does not match weight ",
            w.data().str(), " (in_features ", w.size(1), ")");
  if (bias.defined())
    CTX_CHECK(bias.dim() == 1 && bias.size(0) == w.size(0), "linear: bias ", bias.data().str(),
              " does not match weight ", w.data().str());
  if (!bias.defined() || x.dim() < 2 || !use_fused(FastPath::Linear, backend_of(x.data())))
    return linear_unfused(x, w, bias);

  const Tensor xd = x.data(), wd = w.data(), bd = bias.data();
  check_compatible(xd, wd, "linear");
  check_compatible(xd, bd, "linear");
  CTX_CHECK(is_float(xd.dtype()), "linear: expected float tensors, got ", xd.str());
  const int64_t N = wd.size(0), K = wd.size(1);
  const int64_t R = shape_numel(Shape(xd.shape().begin(), xd.shape().end() - 1));  // rows
  Shape ys = xd.shape();
  ys.back() = N;
  Tensor y = Tensor::empty(ys, xd.dtype(), xd.device());
  backend_of(xd).linear(xd, wd, bd, y);

  return make_result(y, "linear", {x, w, bias}, [x, w, bias, xd, wd, N, K, R](const Tensor& dy) {
    Backend& be = backend_of(dy);
    if (x.requires_grad() && w.requires_grad()) be.gemm_operand_reused(dy);  // read by dx and dw
    if (x.requires_grad()) {  // dx [R, K] = dy [R, N] w [N, K]
      Tensor dx = Tensor::empty(xd.shape(), xd.dtype(), xd.device());
      GemmDesc g;
      g.M = R; g.N = K; g.K = N;
      be.gemm(g, dy, wd, dx);
      acc(x, dx);
    }
    if (w.requires_grad()) {  // dw [N, K] (+)= dy^T [N, R] x [R, K]
      GemmDesc g;
      g.trans_a = true;
      g.M = N; g.N = K; g.K = R;
      bool add = false;
      Tensor dw = grad_target(*w.impl(), add);  // w's gradient buffer, written in place
      if (dw.defined()) {
        g.beta = add ? 1.f : 0.f;
        be.gemm(g, dy, xd, dw);
        grad_written(*w.impl(), dw);
      } else {
        dw = Tensor::empty(wd.shape(), wd.dtype(), wd.device());
        be.gemm(g, dy, xd, dw);
        acc(w, dw);
      }
    }
    if (bias.requires_grad()) {  // db [N] = sum over rows of dy
      bool add = false;
      Tensor db = grad_target(*bias.impl(), add);
      if (db.defined() && !add) {  // the first write into a preassigned slot
        be.reduce_sum(dy, db);
        grad_written(*bias.impl(), db);
      } else {
        db = Tensor::empty({N}, dy.dtype(), dy.device());
        be.reduce_sum(dy, db);
        acc(bias, db);
      }
    }
  });
}

}  // namespace ctx
