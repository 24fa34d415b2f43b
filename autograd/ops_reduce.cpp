// autograd/ops_reduce.cpp — sum and mean over all elements or over dims.
// Backward broadcasts the (keepdim) gradient back to the input shape.
#include <algorithm>

#include "autograd/ops.h"
#include "autograd/ops_util.h"

namespace ctx {
using namespace detail;

Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor xd = x.data();
  CTX_CHECK(is_float(xd.dtype()), "sum: expected a float tensor, got ", xd.str());
  Shape keep = xd.shape();
  std::vector<bool> red(xd.dim(), false);
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, xd.dim(), "sum", xd.shape());
    CTX_CHECK(!red[w], "sum: dim ", d, " repeated");
    red[w] = true;
    keep[w] = 1;
  }
  Tensor out = Tensor::empty(keep, xd.dtype(), xd.device());
  backend_of(xd).reduce_sum(xd, out);
  Shape final_shape;
  for (int64_t i = 0; i < xd.dim(); ++i)
    if (!red[i] || keepdim) final_shape.push_back(keep[i]);
  Tensor res = out.view(final_shape);
  return make_result(res, "sum", {x}, [x, keep, xd](const Tensor& g) {
    acc(x, broadcast_to(g.view(keep), xd.shape()));
  });
}

Variable sum(const Variable& x) {
  std::vector<int64_t> all(x.dim());
  for (int64_t i = 0; i < x.dim(); ++i) all[i] = i;
  return sum(x, all, false);
}

Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim) {
  int64_t n = 1;
  for (int64_t d : dims) n *= x.size(wrap_dim(d, x.dim(), "mean", x.shape()));
  CTX_CHECK(n > 0, "mean: reducing over an empty dimension of ", x.data().str());
  return scale(sum(x, dims, keepdim), 1.0 / (double)n);
}

Variable mean(const Variable& x) {
  CTX_CHECK(x.data().numel() > 0, "mean: empty tensor ", x.data().str());
  return scale(sum(x), 1.0 / (double)x.data().numel());
}

}  // namespace ctx
