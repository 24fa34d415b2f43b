// core/backend_checks.h — the argument checks that every backend runs before its kernels, written
// once so that the CPU and CUDA backends throw the same message for the same mistake (the CUDA
// backend's contract: tests/test_backend_ops.cpp BadIndicesThrowTheCpuMessage and the table's
// error cases). Each throws ctx::Error naming the op, the argument and what was expected.
#pragma once
#include <cstdint>
#include <vector>

#include "core/backend.h"
#include "core/causal_rows.h"
#include "core/error.h"

namespace ctx::checks {

// t is defined and on `dev` ("op: what <t> is on cpu, expected cuda")
void on(Device dev, const Tensor& t, const char* op, const char* what);
// the same shape and dtype / the same dtype
void same(const Tensor& a, const Tensor& b, const char* op);
void same_dtype(const Tensor& a, const Tensor& b, const char* op);

// Strides of `s` (rank r) broadcast to `out` (rank R >= r): 0 where broadcast; `other` is the
// other operand, for the message.
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out, const char* op, const Shape& other);

// copy_strided: both tensors on dev, one dtype, strides of shape's rank, every offset the views
// reach inside their tensors. False when there is nothing to copy.
bool copy_strided(Device dev, const Tensor& src, const Strided& s, const Tensor& dst, const Strided& d,
                  const Shape& shape);

// unary_backward: dy on dev; dx, and x / y where given, the shape and dtype of dy
void unary_backward(Device dev, const char* op, const Tensor& x, const Tensor& y, const Tensor& dy,
                    const Tensor& dx);

// layer_norm / rms_norm: x [..., C] on dev, weight [C] (and bias [C] when defined) of x's dtype
void norm(Device dev, const char* op, const Tensor& x, const Tensor& w, const Tensor& b);

// causal_softmax (x, y) and its backward (y, dy, dx; c defined): a [..., T, S] on dev, b and c of
// its shape and dtype, window >= 0; returns the mask's rows (core/causal_rows.h)
CausalRows causal_rows(Device dev, const char* op, const Tensor& a, const Tensor& b, const Tensor& c, int64_t diag,
                       int64_t window);

// cross_entropy: logits [N, V] and targets [N] on dev (the values: targets_in_range)
void targets(Device dev, const char* op, const Tensor& logits, const Tensor& targets);
// every target t[i] in [0, V) or -1 (ignored); t: the n target values as read on the host
template <class I>
void targets_in_range(const char* op, const I* t, int64_t n, const Tensor& logits, const Tensor& targets) {
  const int64_t V = logits.size(1);
  for (int64_t i = 0; i < n; ++i)
    CTX_CHECK(t[i] >= -1 && t[i] < V, op, ": target ", (int64_t)t[i], " at row ", i, " out of range [0, ", V,
              ") for logits ", logits.str(), " (targets ", targets.str(), ")");
}

// index_select / index_add: x viewed as [outer, n, inner] around dim (dim in range, else throws)
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};
DimSplit split_at(const char* op, const Tensor& x, int64_t dim);
// every index ip[i] in [0, n); ip: the m index values as read on the host
template <class I>
void indices_in_range(const char* op, const I* ip, int64_t m, int64_t n, const Tensor& x, const Tensor& idx) {
  for (int64_t i = 0; i < m; ++i)
    CTX_CHECK(ip[i] >= 0 && ip[i] < n, op, ": index ", (int64_t)ip[i], " at position ", i, " out of range [0, ", n,
              ") for ", x.str(), " (indices ", idx.str(), ")");
}

// adamw: p, g, m, v on dev, of one shape and dtype; step >= 1
void adamw(Device dev, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, int64_t step);

}  // namespace ctx::checks
