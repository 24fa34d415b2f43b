// autograd/ops_index.cpp — embedding lookup, index_select, scatter_add, where / masked_fill
// and the causal mask, each with its backward (gathers scatter-add their gradient back).
#include <cmath>

#include "autograd/ops.h"
#include "autograd/ops_util.h"

namespace ctx {
using namespace detail;

static void check_index_tensor(const Tensor& idx, const char* op) {
  CTX_CHECK(idx.defined(), op, ": indices undefined");
  CTX_CHECK(idx.dtype() == DType::I32 || idx.dtype() == DType::I64, op,
            ": indices must be i32 or i64, got ", idx.str());
}

// Range-check host indices against n here, so that the error names the calling op and both
// shapes (the backend checks again, but names its primitive: index_select / index_add).
static void check_index_range(const Tensor& idx, int64_t n, const char* op, const char* what,
                              const Tensor& x) {
  if (idx.device() != Device::CPU) return;
  for (int64_t i = 0; i < idx.numel(); ++i) {
    int64_t v = idx.dtype() == DType::I32 ? (int64_t)idx.host<int32_t>()[i] : idx.host<int64_t>()[i];
    CTX_CHECK(v >= 0 && v < n, op, ": ", what, " ", v, " at position ", i, " out of range [0, ", n,
              ") for ", x.str(), " (", what, "s ", idx.str(), ")");
  }
}

Variable index_select(const Variable& x, int64_t dim, const Tensor& idx) {
  const Tensor xd = x.data();
  check_index_tensor(idx, "index_select");
  CTX_CHECK(idx.dim() <= 1, "index_select: indices must be 1-D, got ", idx.str());
  int64_t d = wrap_dim(dim, xd.dim(), "index_select", xd.shape());
  Shape os = xd.shape();
  os[d] = idx.numel();
  Tensor out = Tensor::empty(os, xd.dtype(), xd.device());
  backend_of(xd).index_select(xd, d, idx, out);
  return make_result(out, "index_select", {x}, [x, xd, d, idx](const Tensor& g) {
    Tensor dx = zeros_like(xd);
    backend_of(g).index_add(dx, d, idx, g);
    acc(x, dx);
  });
}

Variable embedding(const Variable& weight, const Tensor& ids) {
  const Tensor& w = weight.data();
  check_index_tensor(ids, "embedding");
  CTX_CHECK(w.dim() == 2, "embedding: weight must be [V, D], got ", w.str());
  check_index_range(ids, w.size(0), "embedding", "id", w);
  Shape os = ids.shape();
  os.push_back(w.size(1));
  Variable flat = index_select(weight, 0, ids.view({ids.numel()}));
  return reshape(flat, os);
}

Variable scatter_add(const Variable& x, int64_t dim, const Tensor& idx, const Variable& src) {
  const Tensor xd = x.data();
  check_index_tensor(idx, "scatter_add");
  check_compatible(xd, src.data(), "scatter_add");
  int64_t d = wrap_dim(dim, xd.dim(), "scatter_add", xd.shape());
  Shape expect = xd.shape();
  expect[d] = idx.numel();
  CTX_CHECK(src.shape() == expect, "scatter_add: src ", src.data().str(), " should be ",
            shape_str(expect), " for x ", xd.str(), " and ", idx.numel(), " indices along dim ", d);
  check_index_range(idx, xd.size(d), "scatter_add", "index", xd);
  Tensor out = xd.clone();
  backend_of(xd).index_add(out, d, idx, src.data());
  return make_result(out, "scatter_add", {x, src}, [x, src, d, idx](const Tensor& g) {
    acc(x, g);
    if (src.requires_grad()) {
      Tensor ds = Tensor::empty(src.shape(), g.dtype(), g.device());
      backend_of(g).index_select(g, d, idx, ds);
      acc(src, ds);
    }
  });
}

Variable where(const Tensor& mask, const Variable& a, const Variable& b) {
  const Tensor ad = a.data(), bd = b.data();
  check_compatible(ad, bd, "where");
  CTX_CHECK(ad.shape() == bd.shape(), "where: shape mismatch ", ad.str(), " vs ", bd.str());
  broadcast_shape(mask.shape(), ad.shape(), "where");
  Tensor out = empty_like(ad);
  backend_of(ad).where(mask, ad, bd, out);
  return make_result(out, "where", {a, b}, [a, b, mask](const Tensor& g) {
    if (a.requires_grad()) {
      Tensor da = empty_like(g);
      Tensor z = zeros_like(g);
      backend_of(g).where(mask, g, z, da);
      acc(a, da);
    }
    if (b.requires_grad()) {
      Tensor db = empty_like(g);
      backend_of(g).where_scalar(mask, g, 0.0, db);
      acc(b, db);
    }
  });
}

Variable masked_fill(const Variable& x, const Tensor& mask, double value) {
  const Tensor xd = x.data();
  broadcast_shape(mask.shape(), xd.shape(), "masked_fill");
  Tensor out = empty_like(xd);
  backend_of(xd).where_scalar(mask, xd, value, out);
  return make_result(out, "masked_fill", {x}, [x, mask](const Tensor& g) {
    Tensor dx = empty_like(g);
    backend_of(g).where_scalar(mask, g, 0.0, dx);
    acc(x, dx);
  });
}

Variable causal_mask(const Variable& scores, int64_t diag, int64_t window) {
  CTX_CHECK(window >= 0, "causal_mask: window must be >= 0 (0 = no window), got ", window);
  Tensor out = scores.data().clone();
  backend_of(out).causal_fill(out, -INFINITY, diag, window);
  return make_result(out, "causal_mask", {scores}, [scores, diag, window](const Tensor& g) {
    Tensor dx = g.clone();
    backend_of(dx).causal_fill(dx, 0.0, diag, window);
    acc(scores, dx);
  });
}

}  // namespace ctx
