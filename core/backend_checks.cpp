// core/backend_checks.cpp — the shared argument checks of core/backend_checks.h.
#include "core/backend_checks.h"

#include <algorithm>

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

void unary_backward(Device dev, const char* op, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& dx) {
  on(dev, dy, op, "dy");
  same(dy, dx, op);
  if (x.defined()) same(x, dy, op);
  if (y.defined()) same(y, dy, op);
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

void targets(Device dev, const char* op, const Tensor& logits, const Tensor& targets) {
  on(dev, logits, op, "logits");
  on(dev, targets, op, "targets");
  CTX_CHECK(logits.dim() == 2, op, ": logits must be [N, V], got ", logits.str());
  CTX_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), op, ": targets ", targets.str(),
            " do not match logits ", logits.str());
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

void adamw(Device dev, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, int64_t step) {
  on(dev, p, "adamw", "param");
  on(dev, g, "adamw", "grad");
  on(dev, m, "adamw", "m");
  on(dev, v, "adamw", "v");
  same(p, g, "adamw");
  same(p, m, "adamw");
  same(p, v, "adamw");
  CTX_CHECK(step >= 1, "adamw: step must be >= 1, got ", step);
}

}  // namespace ctx::checks
