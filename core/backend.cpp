// core/backend.cpp — the base-class side of core/backend.h: the names of the ops and of the fused
// methods, every method's public side (its checks, core/backend_checks.h, then the device's
// kernel), and the fused kernels' default versions, which throw (callers ask use_fused,
// core/fast_paths.h, and otherwise compose the same computation from primitives).
#include "core/backend.h"

#include <cmath>

#include "core/attention_dist_bias.h"
#include "core/backend_checks.h"

namespace ctx {

const char* unary_name(UnaryOp op) {
  switch (op) {
#define CTX_UNARY_NAME(o, name, exact) \
  case UnaryOp::o: return name;
    CTX_UNARY_OPS(CTX_UNARY_NAME)
#undef CTX_UNARY_NAME
  }
  return "?";
}

bool unary_exact(UnaryOp op) {
  switch (op) {
#define CTX_UNARY_EXACT(o, name, exact) \
  case UnaryOp::o: return exact;
    CTX_UNARY_OPS(CTX_UNARY_EXACT)
#undef CTX_UNARY_EXACT
  }
  return false;
}

const char* binary_name(BinaryOp op) {
  switch (op) {
    case BinaryOp::Add: return "add";
    case BinaryOp::Sub: return "sub";
    case BinaryOp::Mul: return "mul";
    case BinaryOp::Div: return "div";
  }
  return "?";
}

const char* fused_name(Fused f) {
  switch (f) {
    case Fused::Attention: return "attention";
    case Fused::Rope: return "rope";
    case Fused::Heads: return "heads";
    case Fused::Linear: return "linear";
    case Fused::FlatAdamW: return "flat_adamw";
  }
  return "?";
}

bool Backend::has(Fused) const { return false; }
bool Backend::prefers_fused_attention(const AttnQuery&) const { return has(Fused::Attention); }
bool Backend::reads_dist_bias(const AttnDims&, const Tensor&, const AttnRel&) const { return false; }

namespace {
[[noreturn]] void unsupported(const Backend& b, const char* method, Fused f) {
  throw Error(str(method, ": not supported by backend ", b.name(), " (it does not report Fused::",
                  fused_name(f), "; check Backend::has first)"));
}
// A fused method is called only where has() reports it (else: the message above, before the
// arguments are looked at).
void require(const Backend& b, const char* method, Fused f) {
  if (!b.has(f)) unsupported(b, method, f);
}
}  // namespace

// ---- the public methods: the op's checks, then the device's kernel ----

void Backend::fill(Tensor& x, double value) {
  checks::fill(device(), x);
  fill_impl(x, value);
}
void Backend::set_values(Tensor& dst, const std::vector<int64_t>& values) {
  checks::set_values(device(), dst, (int64_t)values.size());
  if (!values.empty()) set_values_impl(dst, values);
}
void Backend::copy_strided(const Tensor& src, const Strided& s, Tensor& dst, const Strided& d, const Shape& shape,
                           bool accumulate) {
  if (checks::copy_strided(device(), src, s, dst, d, shape)) copy_strided_impl(src, s, dst, d, shape, accumulate);
}
void Backend::convert(const Tensor& src, Tensor& dst) {
  checks::convert(device(), src, dst);
  convert_impl(src, dst);
}
void Backend::unary(UnaryOp op, const Tensor& x, Tensor& y, double a, double b) {
  checks::unary(device(), op, x, y);
  unary_impl(op, x, y, a, b);
}
void Backend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, double a,
                             double b) {
  checks::unary_backward(device(), op, x, y, dy, dx);
  unary_backward_impl(op, x, y, dy, dx, a, b);
}
void Backend::binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) {
  const checks::BinaryStrides st = checks::binary(device(), op, a, b, out);
  binary_impl(op, a, b, out, st.a, st.b);
}
void Backend::reduce_sum(const Tensor& x, Tensor& out) {
  const Shape so = checks::reduce_sum(device(), x, out);
  reduce_sum_impl(x, out, so);
}
void Backend::where_scalar(const Tensor& mask, const Tensor& a, double b, Tensor& y) {
  const Shape sm = checks::where_scalar(device(), mask, a, y);
  where_scalar_impl(mask, a, b, y, sm);
}
void Backend::where(const Tensor& mask, const Tensor& a, const Tensor& b, Tensor& y) {
  const Shape sm = checks::where(device(), mask, a, b, y);
  where_impl(mask, a, b, y, sm);
}
void Backend::causal_fill(Tensor& x, double value, int64_t diag, int64_t window) {
  checks::causal_fill(device(), x);
  causal_fill_impl(x, value, diag, window);
}
void Backend::dropout(const Tensor& x, const DropoutMask& m, Tensor& y) {
  checks::dropout(device(), x, m, y);
  dropout_impl(x, m, y);
}
void Backend::gemm(const GemmDesc& g, const Tensor& A, const Tensor& B, Tensor& C) {
  if (checks::gemm(device(), g, A, B, C)) gemm_impl(g, A, B, C);
}
void Backend::softmax(const Tensor& x, Tensor& y, bool log) {
  checks::softmax(device(), x, y);
  softmax_impl(x, y, log);
}
void Backend::softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) {
  checks::softmax_backward(device(), y, dy, dx);
  softmax_backward_impl(y, dy, dx, log);
}
void Backend::causal_softmax(const Tensor& x, Tensor& y, int64_t diag, int64_t window) {
  const CausalRows rows = checks::causal_softmax(device(), x, y, diag, window);
  causal_softmax_impl(x, y, rows);
}
void Backend::causal_softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, int64_t diag, int64_t window) {
  const CausalRows rows = checks::causal_softmax_backward(device(), y, dy, dx, diag, window);
  causal_softmax_backward_impl(y, dy, dx, rows);
}
void Backend::layernorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y, Tensor& mean,
                        Tensor& rstd) {
  checks::layernorm(device(), x, w, b, y, mean, rstd);
  Tensor none;
  layernorm_impl(x, Tensor(), w, b, eps, none, y, mean, rstd);
}
void Backend::layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                 const Tensor& rstd, Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dres) {
  checks::layernorm_backward(device(), dy, x, w, mean, rstd, dx, dw, db);
  checks::residual_grad(device(), "layer_norm_backward", dx, dres);
  layernorm_backward_impl(dy, x, w, mean, rstd, dres, dx, dw, db);
}
void Backend::rmsnorm(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd) {
  checks::rmsnorm(device(), x, w, y, rstd);
  Tensor none;
  rmsnorm_impl(x, Tensor(), w, eps, none, y, rstd);
}
void Backend::rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, Tensor& dx,
                               Tensor& dw, const Tensor& dres) {
  checks::rmsnorm_backward(device(), dy, x, w, rstd, dx, dw);
  checks::residual_grad(device(), "rms_norm_backward", dx, dres);
  rmsnorm_backward_impl(dy, x, w, rstd, dres, dx, dw);
}
void Backend::add_layernorm(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, double eps, Tensor& h,
                            Tensor& y, Tensor& mean, Tensor& rstd) {
  checks::layernorm(device(), x, w, b, y, mean, rstd);
  checks::residual_add(device(), "add_layer_norm", x, a, h, y);
  layernorm_impl(x, a, w, b, eps, h, y, mean, rstd);
}
void Backend::add_rmsnorm(const Tensor& x, const Tensor& a, const Tensor& w, double eps, Tensor& h, Tensor& y,
                          Tensor& rstd) {
  checks::rmsnorm(device(), x, w, y, rstd);
  checks::residual_add(device(), "add_rms_norm", x, a, h, y);
  rmsnorm_impl(x, a, w, eps, h, y, rstd);
}
void Backend::cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) {
  checks::cross_entropy(device(), logits, targets, loss, lse);
  cross_entropy_impl(logits, targets, loss, lse);
}
void Backend::cross_entropy_backward(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                     const Tensor& dloss, Tensor& dlogits) {
  checks::cross_entropy_backward(device(), logits, targets, lse, dloss, dlogits);
  cross_entropy_backward_impl(logits, targets, lse, dloss, dlogits);
}
void Backend::index_select(const Tensor& x, int64_t dim, const Tensor& idx, Tensor& out) {
  const DimSplit s = checks::index_select(device(), x, dim, idx, out);
  index_select_impl(x, dim, idx, out, s);
}
void Backend::index_add(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  const DimSplit s = checks::index_add(device(), out, dim, idx, src);
  index_add_impl(out, dim, idx, src, s);
}
void Backend::adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr, double beta1, double beta2,
                    double eps, double weight_decay, int64_t step) {
  checks::adamw(device(), param, grad, m, v, step);
  adamw_impl(param, grad, m, v, lr, beta1, beta2, eps, weight_decay, step);
}

void Backend::attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel,
                                AttnRowStats* stats) {
  require(*this, "attention_forward", Fused::Attention);
  checks::attention_forward(device(), d, q, k, v, bias, out, lse, rel);
  if (rel.dist_bias.defined() && !reads_dist_bias(d, q, rel)) {  // the table as a bias [H, T, S]
    AttnRel r = rel;
    r.dist_bias = Tensor();
    return attention_forward(d, q, k, v, expand_dist_bias(*this, d, rel.dist_bias), out, lse, r, stats);
  }
  if (!stats) return attention_forward_impl(d, q, k, v, bias, out, lse, rel);
  CTX_CHECK(has_attention_stats(), "attention_forward: the ", device_name(device()),
            " backend has no attention row statistics (compose them: attention_row_stats)");
  CTX_CHECK(stats->sink_keys >= 0, "attention_forward: AttnRowStats.sink_keys must be >= 0 (e.g. 4), got ",
            stats->sink_keys);
  stats->rows = Tensor::empty({d.B, d.H, d.T, 3}, q.dtype(), q.device());
  attention_forward_stats_impl(d, q, k, v, bias, out, lse, rel, *stats);
}
std::unique_ptr<DecodeStep> Backend::make_decode_step(const DecodeStack& s, int threads) {
  checks::decode_stack(device(), s);
  CTX_CHECK(threads >= 1, "make_decode_step: threads must be >= 1, got ", threads);
  return make_decode_step_impl(s, threads);
}
std::unique_ptr<DecodeStep> Backend::make_decode_step_impl(const DecodeStack&, int) { return nullptr; }
void Backend::attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                 const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                                 Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias, const AttnRel& rel,
                                 AttnRelGrad& drel) {
  require(*this, "attention_backward", Fused::Attention);
  checks::attention_backward(device(), d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, drel);
  if (rel.dist_bias.defined() && !reads_dist_bias(d, q, rel)) {  // as the forward: a bias [H, T, S]
    AttnRel r = rel;
    r.dist_bias = Tensor();
    AttnRelGrad dr = drel;
    dr.ddist_bias = Tensor();
    Tensor db;  // dL/dbias [H, T, S], reduced by diagonals onto the table
    if (drel.ddist_bias.defined()) db = Tensor::empty({d.H, d.T, d.S}, q.dtype(), q.device());
    attention_backward(d, q, k, v, expand_dist_bias(*this, d, rel.dist_bias), out, lse, dout, dq, dk, dv, db, r,
                       dr);
    if (db.defined()) reduce_dist_bias(*this, d, db, drel.ddist_bias);
    return;
  }
  attention_backward_impl(d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, drel);
}
void Backend::rope_rotate(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out, bool interleaved,
                          bool transpose) {
  require(*this, "rope_rotate", Fused::Rope);
  checks::rope_rotate(device(), x, C, S, out);
  rope_rotate_impl(x, C, S, out, interleaved, transpose);
}
void Backend::split_heads(const Tensor& qkv, int64_t H, int64_t q_begin, Tensor& q, Tensor& k, Tensor& v) {
  require(*this, "split_heads", Fused::Heads);
  checks::split_heads(device(), qkv, H, q_begin, q, k, v);
  split_heads_impl(qkv, H, q_begin, q, k, v);
}
void Backend::split_heads_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H, int64_t q_begin,
                                   Tensor& dqkv) {
  require(*this, "split_heads_backward", Fused::Heads);
  checks::split_heads_backward(device(), dq, dk, dv, H, q_begin, dqkv);
  split_heads_backward_impl(dq, dk, dv, H, q_begin, dqkv);
}
void Backend::merge_heads(const Tensor& o, Tensor& out) {
  require(*this, "merge_heads", Fused::Heads);
  checks::merge_heads(device(), o, out);
  merge_heads_impl(o, out);
}
void Backend::merge_heads_backward(const Tensor& dout, Tensor& d_o) {
  require(*this, "merge_heads_backward", Fused::Heads);
  checks::merge_heads_backward(device(), dout, d_o);
  merge_heads_backward_impl(dout, d_o);
}
void Backend::linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  require(*this, "linear", Fused::Linear);
  checks::linear(device(), x, w, b, y);
  linear_impl(x, w, b, y);
}
void Backend::linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& pre, Tensor& h) {
  require(*this, "linear_gelu", Fused::Linear);
  checks::linear(device(), x, w, b, pre);
  checks::on(device(), h, "linear_gelu", "h");
  checks::same(pre, h, "linear_gelu");
  linear_gelu_impl(x, w, b, pre, h);
}
void Backend::gemm_dgelu(const GemmDesc& g, const Tensor& A, const Tensor& B, const Tensor& pre, Tensor& dpre,
                         Tensor& dbias) {
  CTX_CHECK(g.batch == 1 && g.beta == 0.0, "gemm_dgelu: one batch item with beta 0, got batch ", g.batch, " beta ",
            g.beta);
  if (!checks::gemm(device(), g, A, B, dpre)) return;
  checks::on(device(), pre, "gemm_dgelu", "pre");
  checks::same(dpre, pre, "gemm_dgelu");
  CTX_CHECK(dpre.numel() == g.M * g.N, "gemm_dgelu: dpre ", dpre.str(), " should hold ", g.M, " x ", g.N);
  if (dbias.defined()) {
    checks::on(device(), dbias, "gemm_dgelu", "dbias");
    CTX_CHECK(dbias.numel() == g.N && dbias.dtype() == dpre.dtype(), "gemm_dgelu: dbias ", dbias.str(), " should be [",
              g.N, "] of ", dpre.str(), "'s dtype");
  }
  gemm_dgelu_impl(g, A, B, pre, dpre, dbias);
}
void Backend::sum_squares(const Tensor& x, const std::vector<FlatChunk>& chunks, Tensor& out) {
  require(*this, "sum_squares", Fused::FlatAdamW);
  checks::sum_squares(device(), x, chunks, out);
  sum_squares_impl(x, chunks, out);
}
AdamWStepTerms adamw_step_terms(const AdamWHyper& h) {
  const double bc1 = 1.0 - std::pow(h.beta1, (double)h.step);
  const double bc2 = 1.0 - std::pow(h.beta2, (double)h.step);
  return {1.0 - h.lr * h.weight_decay, std::sqrt(bc2), h.lr / bc1};
}

void Backend::adamw_flat(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const std::vector<FlatChunk>& chunks,
                         const AdamWHyper& h, const Tensor& norm_sq) {
  require(*this, "adamw_flat", Fused::FlatAdamW);
  checks::adamw_flat(device(), p, g, m, v, chunks, h, norm_sq);
  adamw_flat_impl(p, g, m, v, chunks, h, norm_sq);
}

void Backend::capture_begin() {
  throw Error(str(name(), ": this device runs its work as it is called and cannot record it (no CUDA Graphs)"));
}
std::shared_ptr<CapturedWork> Backend::capture_end(bool) {
  throw Error(str(name(), ": capture_end without a capture (this device cannot record its work)"));
}

// ---- the fused kernels' defaults: a backend that reports has() overrides them ----

void Backend::attention_forward_impl(const AttnDims&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                     Tensor&, Tensor&, const AttnRel&) {
  unsupported(*this, "attention_forward", Fused::Attention);
}
void Backend::attention_forward_stats_impl(const AttnDims&, const Tensor&, const Tensor&, const Tensor&,
                                           const Tensor&, Tensor&, Tensor&, const AttnRel&, AttnRowStats&) {
  unsupported(*this, "attention_forward (row statistics)", Fused::Attention);
}
void Backend::attention_backward_impl(const AttnDims&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const Tensor&, const Tensor&, Tensor&, Tensor&, Tensor&, Tensor&,
                                      const AttnRel&, AttnRelGrad&) {
  unsupported(*this, "attention_backward", Fused::Attention);
}
void Backend::rope_rotate_impl(const Tensor&, const Tensor&, const Tensor&, Tensor&, bool, bool) {
  unsupported(*this, "rope_rotate", Fused::Rope);
}
void Backend::split_heads_impl(const Tensor&, int64_t, int64_t, Tensor&, Tensor&, Tensor&) {
  unsupported(*this, "split_heads", Fused::Heads);
}
void Backend::split_heads_backward_impl(const Tensor&, const Tensor&, const Tensor&, int64_t, int64_t, Tensor&) {
  unsupported(*this, "split_heads_backward", Fused::Heads);
}
void Backend::merge_heads_impl(const Tensor&, Tensor&) { unsupported(*this, "merge_heads", Fused::Heads); }
void Backend::merge_heads_backward_impl(const Tensor&, Tensor&) {
  unsupported(*this, "merge_heads_backward", Fused::Heads);
}
// The compositions the fused MLP methods stand for (every backend has these primitives).
void Backend::linear_gelu_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& pre, Tensor& h) {
  linear_impl(x, w, b, pre);
  unary(UnaryOp::GeluTanh, pre, h);
}
void Backend::gemm_dgelu_impl(const GemmDesc& g, const Tensor& A, const Tensor& B, const Tensor& pre, Tensor& dpre,
                              Tensor& dbias) {
  Tensor dh = Tensor::empty(dpre.shape(), dpre.dtype(), dpre.device());
  gemm(g, A, B, dh);
  unary_backward(UnaryOp::GeluTanh, pre, Tensor(), dh, dpre);
  if (dbias.defined()) reduce_sum(dpre.view({g.M, g.N}), dbias);
}
void Backend::linear_impl(const Tensor&, const Tensor&, const Tensor&, Tensor&) {
  unsupported(*this, "linear", Fused::Linear);
}
void Backend::sum_squares_impl(const Tensor&, const std::vector<FlatChunk>&, Tensor&) {
  unsupported(*this, "sum_squares", Fused::FlatAdamW);
}
void Backend::adamw_flat_impl(Tensor&, const Tensor&, Tensor&, Tensor&, const std::vector<FlatChunk>&,
                              const AdamWHyper&, const Tensor&) {
  unsupported(*this, "adamw_flat", Fused::FlatAdamW);
}

}  // namespace ctx
