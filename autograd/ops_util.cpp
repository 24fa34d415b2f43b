// autograd/ops_util.cpp — helpers shared by the op files (see ops_util.h).
#include "autograd/ops_util.h"

namespace ctx::detail {

Shape broadcast_shape(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    CTX_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
              " do not broadcast (dim ", i, ": ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  Tensor out = Tensor::empty(shape, g.dtype(), g.device());
  backend_of(g).reduce_sum(g, out);
  return out;
}

Tensor broadcast_to(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t;
  Shape bs = broadcast_shape(t.shape(), shape, "expand");
  CTX_CHECK(bs == shape, "expand: cannot expand ", t.str(), " to ", shape_str(shape));
  Tensor out = Tensor::empty(shape, t.dtype(), t.device());
  Strided s, d;
  s.strides.assign(shape.size(), 0);
  Shape cs = contiguous_strides(t.shape());
  size_t off = shape.size() - t.dim();
  for (size_t i = 0; i < (size_t)t.dim(); ++i) s.strides[i + off] = t.shape()[i] == 1 ? 0 : cs[i];
  d.strides = contiguous_strides(shape);
  backend_of(t).copy_strided(t, s, out, d, shape, false);
  return out;
}

void check_compatible(const Tensor& a, const Tensor& b, const char* op) {
  CTX_CHECK(a.defined() && b.defined(), op, ": undefined operand");
  CTX_CHECK(a.dtype() == b.dtype(), op, ": dtype mismatch ", a.str(), " vs ", b.str());
  CTX_CHECK(a.device() == b.device(), op, ": device mismatch ", device_name(a.device()), " ",
            a.str(), " vs ", device_name(b.device()), " ", b.str());
}

int64_t wrap_dim(int64_t d, int64_t ndim, const char* op, const Shape& shape) {
  int64_t w = d < 0 ? d + ndim : d;
  CTX_CHECK(w >= 0 && w < ndim, op, ": dim ", d, " out of range for shape ", shape_str(shape));
  return w;
}

}  // namespace ctx::detail
