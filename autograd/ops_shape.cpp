// autograd/ops_shape.cpp — reshape (a free view), permute / transpose, slice, concat and
// expand (materialising through Backend::copy_strided), each with its backward.
#include <numeric>

#include "autograd/ops.h"
#include "autograd/ops_util.h"

namespace ctx {
using namespace detail;

Variable reshape(const Variable& x, const Shape& shape) {
  Tensor xd = x.data();
  Tensor out = xd.view(shape);
  Shape in_shape = xd.shape();
  return make_result(out, "reshape", {x}, [x, in_shape](const Tensor& g) { acc(x, g.view(in_shape)); });
}

static Tensor permute_tensor(const Tensor& t, const std::vector<int64_t>& perm) {
  Shape os(perm.size());
  Strided s, d;
  Shape cs = contiguous_strides(t.shape());
  s.strides.resize(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    os[i] = t.shape()[perm[i]];
    s.strides[i] = cs[perm[i]];
  }
  d.strides = contiguous_strides(os);
  Tensor out = Tensor::empty(os, t.dtype(), t.device());
  backend_of(t).copy_strided(t, s, out, d, os, false);
  return out;
}

Variable permute(const Variable& x, const std::vector<int64_t>& perm) {
  const Tensor& xd = x.data();
  CTX_CHECK((int64_t)perm.size() == xd.dim(), "permute: ", perm.size(), " dims given for ", xd.str());
  std::vector<int64_t> p(perm.size()), inv(perm.size());
  std::vector<bool> used(perm.size(), false);
  for (size_t i = 0; i < perm.size(); ++i) {
    p[i] = wrap_dim(perm[i], xd.dim(), "permute", xd.shape());
    CTX_CHECK(!used[p[i]], "permute: dim ", perm[i], " repeated for ", xd.str());
    used[p[i]] = true;
    inv[p[i]] = (int64_t)i;
  }
  Tensor out = permute_tensor(xd, p);
  return make_result(out, "permute", {x}, [x, inv](const Tensor& g) { acc(x, permute_tensor(g, inv)); });
}

Variable transpose(const Variable& x, int64_t d0, int64_t d1) {
  std::vector<int64_t> p(x.dim());
  std::iota(p.begin(), p.end(), 0);
  int64_t a = wrap_dim(d0, x.dim(), "transpose", x.shape());
  int64_t b = wrap_dim(d1, x.dim(), "transpose", x.shape());
  std::swap(p[a], p[b]);
  return permute(x, p);
}

// Copy `src` (shape `shape`) into the window [begin, begin+shape[dim]) of dst along dim.
static void copy_window(const Tensor& src, Tensor& dst, int64_t dim, int64_t begin, bool to_dst,
                        bool accumulate) {
  // window shape = src shape when to_dst, else dst shape
  const Tensor& small = to_dst ? src : dst;
  const Tensor& big = to_dst ? dst : src;
  Shape cs_small = contiguous_strides(small.shape());
  Shape cs_big = contiguous_strides(big.shape());
  Strided sw, bw;
  sw.strides = cs_small;
  bw.strides = cs_big;
  bw.offset = begin * cs_big[dim];
  if (to_dst) backend_of(src).copy_strided(src, sw, dst, bw, small.shape(), accumulate);
  else backend_of(src).copy_strided(src, bw, dst, sw, small.shape(), accumulate);
}

Variable slice(const Variable& x, int64_t dim, int64_t begin, int64_t end) {
  const Tensor xd = x.data();
  int64_t d = wrap_dim(dim, xd.dim(), "slice", xd.shape());
  CTX_CHECK(0 <= begin && begin <= end && end <= xd.size(d), "slice: range [", begin, ", ", end,
            ") out of bounds for dim ", d, " of ", xd.str());
  Shape os = xd.shape();
  os[d] = end - begin;
  Tensor out;
  bool leading = true;
  for (int64_t i = 0; i < d; ++i) leading = leading && xd.size(i) == 1;
  if (leading) {  // free view: all dims before d are 1
    out = xd.view({-1}).slice0(begin * contiguous_strides(xd.shape())[d],
                               begin * contiguous_strides(xd.shape())[d] + shape_numel(os)).view(os);
  } else {
    out = Tensor::empty(os, xd.dtype(), xd.device());
    copy_window(xd, out, d, begin, false, false);
  }
  return make_result(out, "slice", {x}, [x, xd, d, begin](const Tensor& g) {
    Tensor dx = zeros_like(xd);
    copy_window(g, dx, d, begin, true, false);
    acc(x, dx);
  });
}

Variable concat(const std::vector<Variable>& xs, int64_t dim) {
  CTX_CHECK(!xs.empty(), "concat: no inputs");
  const Tensor& x0 = xs[0].data();
  int64_t d = wrap_dim(dim, x0.dim(), "concat", x0.shape());
  Shape os = x0.shape();
  os[d] = 0;
  for (auto& v : xs) {
    const Tensor& t = v.data();
    check_compatible(x0, t, "concat");
    CTX_CHECK(t.dim() == x0.dim(), "concat: rank mismatch ", x0.str(), " vs ", t.str());
    for (int64_t i = 0; i < t.dim(); ++i)
      CTX_CHECK(i == d || t.size(i) == x0.size(i), "concat: shape mismatch along dim ", i, ": ",
                x0.str(), " vs ", t.str());
    os[d] += t.size(d);
  }
  Tensor out = Tensor::empty(os, x0.dtype(), x0.device());
  std::vector<int64_t> begins;
  int64_t at = 0;
  for (auto& v : xs) {
    begins.push_back(at);
    copy_window(v.data(), out, d, at, true, false);
    at += v.size(d);
  }
  return make_result(out, "concat", xs, [xs, d, begins](const Tensor& g) {
    for (size_t i = 0; i < xs.size(); ++i) {
      if (!xs[i].requires_grad()) continue;
      Tensor gi = Tensor::empty(xs[i].shape(), g.dtype(), g.device());
      copy_window(g, gi, d, begins[i], false, false);
      acc(xs[i], gi);
    }
  });
}

Variable expand(const Variable& x, const Shape& shape) {
  Tensor out = broadcast_to(x.data(), shape);
  Shape in_shape = x.shape();
  return make_result(out, "expand", {x}, [x, in_shape](const Tensor& g) { acc(x, sum_to(g, in_shape)); });
}

}  // namespace ctx
