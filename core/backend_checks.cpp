// core/backend_checks.cpp — the argument checks of core/backend_checks.h: each op's in the order
// the CPU backend ran them before they were shared (its messages are the contract).
#include "core/backend_checks.h"

#include <algorithm>

#include "core/attention_checks.h"
#include "core/extension.h"

namespace ctx::checks {

void on(Device dev, const Tensor& t, const char* op, const char* what) {
  CTX_CHECK(t.defined(), op, ": ", what, " is undefined");
  CTX_CHECK(t.device() == dev, op, ": ", what, " ", t.str(), " is on ", device_name(t.device()), ", expected ",
            device_name(dev));
}

void same(const Tensor& a, const Tensor& b, const char* op) {
  CTX_CHECK(a.shape() == b.shape(), op, ": shape mismatch ", a.str(), " vs ", b.str());
  same_dtype(a, b, op);
}

void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  CTX_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch ", a.str(), " vs ", b.str());
}

void float_dtype(const char* op, DType dt) {
  CTX_CHECK(dt == DType::F32 || dt == DType::F64, op, ": expected a float tensor, got ", dtype_name(dt));
}

void index_dtype(const char* op, DType dt) {
  CTX_CHECK(dt == DType::I32 || dt == DType::I64, op, ": index tensor must be i32 or i64, got ", dtype_name(dt));
}

std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out, const char* op, const Shape& other) {
  std::vector<int64_t> st(out.size(), 0);
  const Shape cs = contiguous_strides(s);
  const int64_t off = (int64_t)out.size() - (int64_t)s.size();
  CTX_CHECK(off >= 0, op, ": cannot broadcast ", shape_str(s), " and ", shape_str(other));
  for (size_t i = 0; i < s.size(); ++i) {
    const int64_t o = out[i + off];
    CTX_CHECK(s[i] == o || s[i] == 1, op, ": cannot broadcast ", shape_str(s), " and ", shape_str(other));
    st[i + off] = (s[i] == 1 && o != 1) ? 0 : cs[i];
  }
  return st;
}

bool copy_strided(Device dev, const Tensor& src, const Strided& s, const Tensor& dst, const Strided& d,
                  const Shape& shape) {
  on(dev, src, "copy_strided", "src");
  on(dev, dst, "copy_strided", "dst");
  same_dtype(src, dst, "copy_strided");
  CTX_CHECK(s.strides.size() == shape.size() && d.strides.size() == shape.size(),
            "copy_strided: strides rank does not match shape ", shape_str(shape));
  if (shape_numel(shape) == 0) return false;
  auto max_off = [&](const Strided& st) {  // the largest offset the view reaches
    int64_t m = st.offset;
    for (size_t i = 0; i < shape.size(); ++i)
      if (shape[i] > 0) m += (shape[i] - 1) * std::max<int64_t>(st.strides[i], 0);
    return m;
  };
  CTX_CHECK(s.offset >= 0 && max_off(s) < src.numel(), "copy_strided: source view out of bounds of ", src.str());
  CTX_CHECK(d.offset >= 0 && max_off(d) < dst.numel(), "copy_strided: destination view out of bounds of ",
            dst.str());
  return true;
}

void fill(Device dev, const Tensor& x) { on(dev, x, "fill", "x"); }

void set_values(Device dev, const Tensor& dst, int64_t n) {
  on(dev, dst, "set_values", "dst");
  CTX_CHECK(dst.dtype() == DType::I64 && dst.numel() >= n, "set_values: ", n, " values into ", dst.str(),
            "; expected an i64 tensor of at least ", n, " elements");
}

void convert(Device dev, const Tensor& src, const Tensor& dst) {
  on(dev, src, "convert", "src");
  on(dev, dst, "convert", "dst");
  CTX_CHECK(src.numel() == dst.numel(), "convert: ", src.str(), " into ", dst.str());
}

void unary(Device dev, UnaryOp op, const Tensor& x, const Tensor& y) {
  const char* nm = unary_name(op);
  on(dev, x, nm, "x");
  same(x, y, nm);
  on(dev, y, nm, "y");
  float_dtype(nm, x.dtype());
}

void unary_backward(Device dev, UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  const char* nm = unary_name(op);
  on(dev, dy, nm, "dy");
  same(dy, dx, nm);
  if (x.defined()) same(x, dy, nm);
  if (y.defined()) same(y, dy, nm);
  check_on_device(dev, nm, {&dx, &x, &y});
  float_dtype(nm, dy.dtype());
}

BinaryStrides binary(Device dev, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const char* nm = binary_name(op);
  on(dev, a, nm, "a");
  on(dev, b, nm, "b");
  on(dev, out, nm, "out");
  same_dtype(a, b, nm);
  same_dtype(a, out, nm);
  BinaryStrides st;
  st.a = broadcast_strides(a.shape(), out.shape(), nm, b.shape());
  st.b = broadcast_strides(b.shape(), out.shape(), nm, a.shape());
  float_dtype(nm, a.dtype());
  return st;
}

Shape reduce_sum(Device dev, const Tensor& x, const Tensor& out) {
  on(dev, x, "reduce_sum", "x");
  on(dev, out, "reduce_sum", "out");
  same_dtype(x, out, "reduce_sum");
  // out's shape right-aligned to x; dims where out is 1 are summed.
  Shape so = broadcast_strides(out.shape(), x.shape(), "reduce_sum", x.shape());
  float_dtype("reduce_sum", x.dtype());
  return so;
}

Shape where_scalar(Device dev, const Tensor& mask, const Tensor& a, const Tensor& y) {
  on(dev, mask, "masked_fill", "mask");
  on(dev, a, "masked_fill", "a");
  same(a, y, "masked_fill");
  on(dev, y, "masked_fill", "y");
  Shape sm = broadcast_strides(mask.shape(), a.shape(), "masked_fill", a.shape());
  float_dtype("masked_fill", a.dtype());
  return sm;
}

Shape where(Device dev, const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& y) {
  on(dev, mask, "where", "mask");
  on(dev, a, "where", "a");
  on(dev, b, "where", "b");
  same(a, b, "where");
  same(a, y, "where");
  on(dev, y, "where", "y");
  Shape sm = broadcast_strides(mask.shape(), a.shape(), "where", a.shape());
  float_dtype("where", a.dtype());
  return sm;
}

void causal_fill(Device dev, const Tensor& x) {
  on(dev, x, "causal_mask", "x");
  CTX_CHECK(x.dim() >= 2, "causal_mask: needs [..., T, S], got ", x.str());
  float_dtype("causal_mask", x.dtype());
}

// A mask whose seed lives in device memory (a step being recorded into a CUDA Graph) on the CPU,
// which records nothing: it would read a device address.
static void host_seed(Device dev, const DropoutMask& m, const char* op) {
  CTX_CHECK(!m.seed_at || dev != Device::CPU, op, ": a dropout mask with its seed in device memory (seed_at: a "
            "recorded step's) reached the cpu");
}

void dropout(Device dev, const Tensor& x, const DropoutMask& m, const Tensor& y) {
  host_seed(dev, m, "dropout");
  on(dev, x, "dropout", "x");
  same(x, y, "dropout");
  on(dev, y, "dropout", "y");
  float_dtype("dropout", x.dtype());
}

bool gemm(Device dev, const GemmDesc& g, const Tensor& A, const Tensor& B, const Tensor& C) {
  on(dev, A, "gemm", "A");
  on(dev, B, "gemm", "B");
  on(dev, C, "gemm", "C");
  same_dtype(A, B, "gemm");
  same_dtype(A, C, "gemm");
  // Bounds: every batch item must fit.
  auto need = [&](int64_t stride, int64_t rows, int64_t cols) { return (g.batch - 1) * stride + rows * cols; };
  CTX_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0 && g.batch >= 1, "gemm: bad sizes M=", g.M, " N=", g.N, " K=", g.K,
            " batch=", g.batch);
  CTX_CHECK(need(g.stride_a, g.M, g.K) <= A.numel(), "gemm: A ", A.str(), " too small for batch ", g.batch, " of ",
            g.M, "x", g.K);
  CTX_CHECK(need(g.stride_b, g.K, g.N) <= B.numel(), "gemm: B ", B.str(), " too small for batch ", g.batch, " of ",
            g.K, "x", g.N);
  CTX_CHECK(need(g.stride_c, g.M, g.N) <= C.numel(), "gemm: C ", C.str(), " too small for batch ", g.batch, " of ",
            g.M, "x", g.N);
  if (g.M == 0 || g.N == 0) return false;  // nothing to compute: any dtype
  CTX_CHECK(A.dtype() == DType::F32 || A.dtype() == DType::F64, "gemm: expected f32 or f64, got ", A.str());
  return true;
}

void softmax(Device dev, const Tensor& x, const Tensor& y) {
  on(dev, x, "softmax", "x");
  same(x, y, "softmax");
  on(dev, y, "softmax", "y");
  if (x.numel() > 0) float_dtype("softmax", x.dtype());
}

void softmax_backward(Device dev, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  on(dev, y, "softmax_backward", "y");
  same(y, dy, "softmax_backward");
  same(y, dx, "softmax_backward");
  check_on_device(dev, "softmax_backward", {&dy, &dx});
  if (y.numel() > 0) float_dtype("softmax_backward", y.dtype());
}

CausalRows causal_softmax(Device dev, const Tensor& x, const Tensor& y, int64_t diag, int64_t window) {
  const CausalRows rows = causal_rows(dev, "causal_softmax", x, y, Tensor(), diag, window);
  on(dev, y, "causal_softmax", "y");
  if (x.numel() > 0) float_dtype("causal_softmax", x.dtype());
  return rows;
}

CausalRows causal_softmax_backward(Device dev, const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t diag,
                                   int64_t window) {
  const CausalRows rows = causal_rows(dev, "causal_softmax_backward", y, dy, dx, diag, window);
  check_on_device(dev, "causal_softmax_backward", {&dy, &dx});
  if (y.numel() > 0) float_dtype("causal_softmax_backward", y.dtype());
  return rows;
}

CausalRows causal_rows(Device dev, const char* op, const Tensor& a, const Tensor& b, const Tensor& c, int64_t diag,
                       int64_t window) {
  on(dev, a, op, c.defined() ? "y" : "x");
  same(a, b, op);
  if (c.defined()) same(a, c, op);
  CTX_CHECK(a.dim() >= 2, op, ": needs [..., T, S], got ", a.str());
  CTX_CHECK(window >= 0, op, ": window must be >= 0 (0 = no window), got ", window);
  return CausalRows{a.size(-2), diag, window};
}

void norm(Device dev, const char* op, const Tensor& x, const Tensor& w, const Tensor& b) {
  on(dev, x, op, "x");
  on(dev, w, op, "weight");
  CTX_CHECK(x.dim() >= 1, op, ": x must have at least one dim, got ", x.str());
  CTX_CHECK(w.dim() == 1 && w.size(0) == x.size(-1), op, ": weight ", w.str(), " does not match the last dim of x ",
            x.str());
  same_dtype(x, w, op);
  if (b.defined()) {
    on(dev, b, op, "bias");
    CTX_CHECK(b.shape() == w.shape(), op, ": bias ", b.str(), " does not match weight ", w.str());
    same_dtype(x, b, op);
  }
}

void layernorm(Device dev, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
               const Tensor& rstd) {
  norm(dev, "layer_norm", x, w, b);
  same(x, y, "layer_norm");
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  CTX_CHECK(mean.numel() == N && rstd.numel() == N, "layer_norm: mean/rstd need ", N, " elements");
  check_on_device(dev, "layer_norm", {&y, &mean, &rstd});
  float_dtype("layer_norm", x.dtype());
}

void layernorm_backward(Device dev, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db) {
  norm(dev, "layer_norm_backward", x, w, db);
  same(x, dy, "layer_norm_backward");
  same(x, dx, "layer_norm_backward");
  same(w, dw, "layer_norm_backward");
  check_on_device(dev, "layer_norm_backward", {&dy, &dx, &dw, &mean, &rstd});
  float_dtype("layer_norm_backward", x.dtype());
}

void rmsnorm(Device dev, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd) {
  norm(dev, "rms_norm", x, w, Tensor());
  same(x, y, "rms_norm");
  const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
  CTX_CHECK(rstd.numel() == N, "rms_norm: rstd needs ", N, " elements");
  check_on_device(dev, "rms_norm", {&y, &rstd});
  float_dtype("rms_norm", x.dtype());
}

void rmsnorm_backward(Device dev, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw) {
  norm(dev, "rms_norm_backward", x, w, Tensor());
  same(x, dy, "rms_norm_backward");
  same(x, dx, "rms_norm_backward");
  same(w, dw, "rms_norm_backward");
  check_on_device(dev, "rms_norm_backward", {&dy, &dx, &dw, &rstd});
  float_dtype("rms_norm_backward", x.dtype());
}

void residual_add(Device dev, const char* op, const Tensor& x, const Tensor& a, const Tensor& h, const Tensor& y) {
  on(dev, a, op, "a");
  on(dev, h, op, "h");
  same(x, a, op);
  same(x, h, op);
  auto overlaps = [](const Tensor& p, const Tensor& q) { return p.storage() == q.storage(); };
  CTX_CHECK(!overlaps(h, x) && !overlaps(h, a) && !overlaps(h, y), op,
            ": h must have storage of its own (not x's, a's or y's)");
}

void residual_grad(Device dev, const char* op, const Tensor& dx, const Tensor& dres) {
  if (!dres.defined()) return;
  on(dev, dres, op, "dres");
  same(dx, dres, op);
  CTX_CHECK(dres.storage() != dx.storage() || dres.offset() == dx.offset(), op,
            ": dres overlaps dx without being dx");
}

void targets(Device dev, const char* op, const Tensor& logits, const Tensor& targets) {
  on(dev, logits, op, "logits");
  on(dev, targets, op, "targets");
  CTX_CHECK(logits.dim() == 2, op, ": logits must be [N, V], got ", logits.str());
  CTX_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), op, ": targets ", targets.str(),
            " do not match logits ", logits.str());
  index_dtype(op, targets.dtype());
}

void cross_entropy(Device dev, const Tensor& logits, const Tensor& targets_, const Tensor& loss, const Tensor& lse) {
  targets(dev, "cross_entropy", logits, targets_);
  const int64_t N = logits.size(0);
  CTX_CHECK(loss.numel() == N && lse.numel() == N, "cross_entropy: loss/lse need ", N, " elements");
  check_on_device(dev, "cross_entropy", {&loss, &lse});
  float_dtype("cross_entropy", logits.dtype());
}

void cross_entropy_backward(Device dev, const Tensor& logits, const Tensor& targets_, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits) {
  targets(dev, "cross_entropy_backward", logits, targets_);
  same(logits, dlogits, "cross_entropy_backward");
  const int64_t N = logits.size(0);
  CTX_CHECK(dloss.numel() == N && lse.numel() == N, "cross_entropy_backward: dloss/lse need ", N, " elements");
  check_on_device(dev, "cross_entropy_backward", {&lse, &dloss, &dlogits});
  float_dtype("cross_entropy_backward", logits.dtype());
}

DimSplit split_at(const char* op, const Tensor& x, int64_t dim) {
  CTX_CHECK(dim >= 0 && dim < x.dim(), op, ": dim ", dim, " out of range for ", x.str());
  DimSplit s;
  const Shape& sh = x.shape();
  for (int64_t i = 0; i < dim; ++i) s.outer *= sh[i];
  s.n = sh[dim];
  for (size_t i = dim + 1; i < sh.size(); ++i) s.inner *= sh[i];
  return s;
}

DimSplit index_select(Device dev, const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& out) {
  on(dev, x, "index_select", "x");
  const DimSplit s = split_at("index_select", x, dim);
  on(dev, idx, "index_select", "indices");
  index_dtype("index_select", idx.dtype());
  const int64_t m = idx.numel();
  CTX_CHECK(out.numel() == s.outer * m * s.inner, "index_select: out ", out.str(), " should have ",
            s.outer * m * s.inner, " elements");
  on(dev, out, "index_select", "out");
  same_dtype(x, out, "index_select");
  return s;
}

DimSplit index_add(Device dev, const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) {
  on(dev, out, "index_add", "out");
  on(dev, src, "index_add", "src");
  same_dtype(out, src, "index_add");
  const DimSplit s = split_at("index_add", out, dim);
  on(dev, idx, "index_add", "indices");
  index_dtype("index_add", idx.dtype());
  const int64_t m = idx.numel();
  CTX_CHECK(src.numel() == s.outer * m * s.inner, "index_add: src ", src.str(), " does not match out ", out.str(),
            " with ", m, " indices along dim ", dim);
  float_dtype("index_add", out.dtype());
  return s;
}

void adamw(Device dev, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, int64_t step) {
  on(dev, p, "adamw", "param");
  on(dev, g, "adamw", "grad");
  on(dev, m, "adamw", "m");
  on(dev, v, "adamw", "v");
  same(p, g, "adamw");
  same(p, m, "adamw");
  same(p, v, "adamw");
  CTX_CHECK(step >= 1, "adamw: step must be >= 1, got ", step);
  float_dtype("adamw", p.dtype());
}

// ---- fused methods ----

void attention_forward(Device dev, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& bias, const Tensor& out, const Tensor& lse, const AttnRel& rel) {
  check_on_device(dev, "attention_forward",
         {&q, &k, &v, &bias, &out, &lse, &rel.qidx, &rel.kidx, &rel.qrel, &rel.krel, &rel.vrel});
  check_attention_forward(d, q, k, v, bias, out, lse, rel, dev);
  host_seed(dev, d.dropout, "attention_forward");
}

void attention_backward(Device dev, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dbias, const AttnRel& rel,
                        const AttnRelGrad& drel) {
  check_on_device(dev, "attention_backward",
         {&q, &k, &v, &bias, &out, &lse, &dout, &dq, &dk, &dv, &dbias, &rel.qidx, &rel.kidx, &rel.qrel, &rel.krel,
          &rel.vrel, &drel.dqrel, &drel.dkrel, &drel.dvrel});
  check_attention_backward(d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, drel, dev);
  host_seed(dev, d.dropout, "attention_backward");
}

void rope_rotate(Device dev, const Tensor& x, const Tensor& C, const Tensor& S, const Tensor& out) {
  check_on_device(dev, "rope_rotate", {&x, &C, &S, &out});
  CTX_CHECK(x.dim() >= 2 && x.size(-1) % 2 == 0, "rope_rotate: x must be [..., T, d] with d even, got ", x.str());
  const int64_t d = x.size(-1), T = x.size(-2);
  for (const Tensor* t : {&C, &S})
    CTX_CHECK(t->dtype() == x.dtype() && t->shape() == (Shape{T, d / 2}), "rope_rotate: cos / sin must be ",
              dtype_name(x.dtype()), "[", T, ", ", d / 2, "] for x ", x.str(), ", got ", t->str());
  CTX_CHECK(out.shape() == x.shape() && out.dtype() == x.dtype(), "rope_rotate: out ", out.str(),
            " does not match x ", x.str());
  CTX_CHECK(out.raw() != x.raw() || x.numel() == 0, "rope_rotate: out may not alias x");
  if (x.numel() == 0) return;
  CTX_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, "rope_rotate: x must be f32 or f64, got ", x.str());
}

namespace {

// qkv [B, S, 3 H Dh] (errors name the method); returns Dh
int64_t split_sizes(const char* op, const Shape& qkv, DType dt, int64_t H, int64_t q_begin) {
  CTX_CHECK(qkv.size() == 3, op, ": qkv must be [B, S, 3D], got ", shape_str(qkv));
  CTX_CHECK(dt == DType::F32 || dt == DType::F64, op, ": expected f32 or f64, got ", dtype_name(dt));
  CTX_CHECK(H > 0 && qkv[2] % (3 * H) == 0, op, ": last dim of ", shape_str(qkv), " is not 3 * H * Dh for H = ", H);
  CTX_CHECK(0 <= q_begin && q_begin < qkv[1], op, ": q_begin ", q_begin, " out of [0, ", qkv[1], ")");
  return qkv[2] / (3 * H);
}

void check_part(const char* op, const char* name, const Tensor& t, DType dt, const Shape& want) {
  CTX_CHECK(t.dtype() == dt && t.shape() == want, op, ": ", name, " must be ", dtype_name(dt), shape_str(want),
            ", got ", t.str());
}

void check_chunks(const char* op, const std::vector<FlatChunk>& chunks, const Tensor& x) {
  for (const FlatChunk& c : chunks)
    CTX_CHECK(0 <= c.begin && c.begin <= c.end && c.end <= x.numel(), op, ": chunk [", c.begin, ", ", c.end,
              ") outside ", x.str());
}

}  // namespace

void split_heads(Device dev, const Tensor& qkv, int64_t H, int64_t q_begin, const Tensor& q, const Tensor& k,
                 const Tensor& v) {
  check_on_device(dev, "split_heads", {&qkv, &q, &k, &v});
  const int64_t Dh = split_sizes("split_heads", qkv.shape(), qkv.dtype(), H, q_begin);
  const int64_t B = qkv.size(0), S = qkv.size(1);
  check_part("split_heads", "q", q, qkv.dtype(), {B, H, S - q_begin, Dh});
  check_part("split_heads", "k", k, qkv.dtype(), {B, H, S, Dh});
  check_part("split_heads", "v", v, qkv.dtype(), {B, H, S, Dh});
}

void split_heads_backward(Device dev, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H,
                          int64_t q_begin, const Tensor& dqkv) {
  const char* op = "split_heads_backward";
  check_on_device(dev, op, {&dq, &dk, &dv, &dqkv});
  const int64_t Dh = split_sizes(op, dqkv.shape(), dqkv.dtype(), H, q_begin);
  const int64_t B = dqkv.size(0), S = dqkv.size(1);
  const DType dt = dqkv.dtype();
  if (dq.defined()) check_part(op, "dq", dq, dt, {B, H, S - q_begin, Dh});
  if (dk.defined()) check_part(op, "dk", dk, dt, {B, H, S, Dh});
  if (dv.defined()) check_part(op, "dv", dv, dt, {B, H, S, Dh});
}

void merge_heads(Device dev, const Tensor& o, const Tensor& out) {
  check_on_device(dev, "merge_heads", {&o, &out});
  CTX_CHECK(o.dim() == 4, "merge_heads: o must be [B, H, T, Dh], got ", o.str());
  check_part("merge_heads", "out", out, o.dtype(), {o.size(0), o.size(2), o.size(1) * o.size(3)});
  CTX_CHECK(o.dtype() == DType::F32 || o.dtype() == DType::F64, "merge_heads: o must be f32 or f64, got ", o.str());
}

void merge_heads_backward(Device dev, const Tensor& dout, const Tensor& d_o) {
  check_on_device(dev, "merge_heads_backward", {&dout, &d_o});
  CTX_CHECK(d_o.dim() == 4, "merge_heads_backward: do must be [B, H, T, Dh], got ", d_o.str());
  check_part("merge_heads_backward", "dout", dout, d_o.dtype(), {d_o.size(0), d_o.size(2), d_o.size(1) * d_o.size(3)});
  CTX_CHECK(dout.dtype() == DType::F32 || dout.dtype() == DType::F64,
            "merge_heads_backward: dout must be f32 or f64, got ", dout.str());
}

void linear(Device dev, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  check_on_device(dev, "linear", {&x, &w, &b, &y});
  CTX_CHECK(w.dim() == 2, "linear: weight must be [N, K], got ", w.str());
  const int64_t N = w.size(0), K = w.size(1);
  CTX_CHECK(x.dim() >= 1 && x.size(-1) == K, "linear: x ", x.str(), " does not match weight ", w.str());
  CTX_CHECK(b.defined() && b.shape() == Shape{N}, "linear: bias must be [", N, "], got ",
            b.defined() ? b.str() : std::string("undefined"));
  const int64_t R = K ? x.numel() / K : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  CTX_CHECK(y.numel() == R * N && y.size(-1) == N, "linear: y ", y.str(), " should be [", R, ", ", N, "]");
  CTX_CHECK(x.dtype() == w.dtype() && x.dtype() == b.dtype() && x.dtype() == y.dtype(), "linear: dtypes differ: x ",
            x.str(), ", w ", w.str(), ", b ", b.str(), ", y ", y.str());
}

void sum_squares(Device dev, const Tensor& x, const std::vector<FlatChunk>& chunks, const Tensor& out) {
  check_on_device(dev, "sum_squares", {&x, &out});
  CTX_CHECK(out.numel() == 1 && out.dtype() == DType::F64, "sum_squares: out must be one f64 element, got ",
            out.str());
  check_chunks("sum_squares", chunks, x);
  CTX_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::F64, "sum_squares: x must be f32 or f64, got ", x.str());
}

void adamw_flat(Device dev, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                const std::vector<FlatChunk>& chunks, const AdamWHyper& h, const Tensor& norm_sq) {
  check_on_device(dev, "adamw_flat", {&p, &g, &m, &v, &norm_sq});
  for (const Tensor* t : {&g, &m, &v})
    CTX_CHECK(t->shape() == p.shape() && t->dtype() == p.dtype(), "adamw_flat: ", t->str(),
              " does not match the parameters ", p.str());
  CTX_CHECK(p.dim() == 1, "adamw_flat: the buffers must be flat [n], got ", p.str());
  CTX_CHECK(h.step >= 1, "adamw_flat: step must be >= 1, got ", h.step);
  check_chunks("adamw_flat", chunks, p);
  if (norm_sq.defined() && h.max_norm > 0)
    CTX_CHECK(norm_sq.numel() == 1 && norm_sq.dtype() == DType::F64,
              "adamw_flat: norm_sq must be one f64 element (sum_squares' output), got ", norm_sq.str());
  CTX_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64, "adamw_flat: parameters must be f32 or f64, got ",
            p.str());
  if (h.terms.defined()) {
    check_on_device(dev, "adamw_flat (terms)", {&h.terms});
    CTX_CHECK(h.terms.numel() == 3 && h.terms.dtype() == DType::F64,
              "adamw_flat: terms must be three f64 elements (decay, bc2_sqrt, step_size), got ", h.terms.str());
  }
}

namespace {
// "make_decode_step: <what> is [..], expected [..]" for a tensor of the stack
void stack_tensor(Device dev, const Tensor& t, const Shape& want, const std::string& what) {
  CTX_CHECK(t.defined(), "make_decode_step: ", what, " is undefined, expected ", shape_str(want));
  on(dev, t, "make_decode_step", what.c_str());
  CTX_CHECK(t.dtype() == DType::F32 && t.shape() == want, "make_decode_step: ", what, " is ", t.str(),
            ", expected f32 ", shape_str(want));
}
}  // namespace

void decode_stack(Device dev, const DecodeStack& s) {
  CTX_CHECK(s.B >= 1 && s.H >= 1 && s.Dh >= 1 && s.capacity >= 1 && s.window >= 0 && !s.layers.empty(),
            "make_decode_step: B (", s.B, "), H (", s.H, "), Dh (", s.Dh, "), capacity (", s.capacity,
            ") and the layers (", s.layers.size(), ") must be >= 1, window (", s.window, ") >= 0");
  CTX_CHECK(!s.cos.defined() || s.Dh % 2 == 0, "make_decode_step: rotary tables need an even Dh, got ", s.Dh);
  CTX_CHECK(s.wte.defined() && s.wte.dim() == 2, "make_decode_step: wte must be [V, D], got ",
            s.wte.defined() ? s.wte.str() : std::string("undefined"));
  const int64_t D = s.H * s.Dh, V = s.wte.size(0);
  const int64_t F = s.layers[0].fc_w.defined() && s.layers[0].fc_w.dim() == 2 ? s.layers[0].fc_w.size(0) : 0;
  stack_tensor(dev, s.wte, {V, D}, "wte");
  stack_tensor(dev, s.head_w, {V, D}, "head_w");
  if (s.add.defined()) stack_tensor(dev, s.add, {s.capacity, D}, "add");
  CTX_CHECK(s.cos.defined() == s.sin.defined(), "make_decode_step: cos and sin come together");
  if (s.cos.defined()) {
    stack_tensor(dev, s.cos, {s.capacity, s.Dh / 2}, "cos");
    stack_tensor(dev, s.sin, {s.capacity, s.Dh / 2}, "sin");
  }
  auto norm = [&](const Tensor& w, const Tensor& b, const std::string& what) {
    stack_tensor(dev, w, {D}, what + "_w");
    if (s.layernorm) stack_tensor(dev, b, {D}, what + "_b");
  };
  norm(s.norm_f_w, s.norm_f_b, "norm_f");
  for (size_t l = 0; l < s.layers.size(); ++l) {
    const DecodeLayer& L = s.layers[l];
    const std::string at = "layer " + std::to_string(l) + " ";
    norm(L.norm1_w, L.norm1_b, at + "norm1");
    norm(L.norm2_w, L.norm2_b, at + "norm2");
    stack_tensor(dev, L.qkv_w, {3 * D, D}, at + "qkv_w");
    stack_tensor(dev, L.qkv_b, {3 * D}, at + "qkv_b");
    stack_tensor(dev, L.proj_w, {D, D}, at + "proj_w");
    stack_tensor(dev, L.proj_b, {D}, at + "proj_b");
    stack_tensor(dev, L.fc_w, {F, D}, at + "fc_w");
    stack_tensor(dev, L.fc_b, {F}, at + "fc_b");
    stack_tensor(dev, L.mproj_w, {D, F}, at + "mproj_w");
    stack_tensor(dev, L.mproj_b, {D}, at + "mproj_b");
    stack_tensor(dev, L.k_cache, {s.B, s.H, s.capacity, s.Dh}, at + "k_cache");
    stack_tensor(dev, L.v_cache, {s.B, s.H, s.capacity, s.Dh}, at + "v_cache");
  }
}

}  // namespace ctx::checks
