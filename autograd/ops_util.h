// autograd/ops_util.h — small helpers shared by the op files: allocation like another tensor,
// broadcasting shapes, reducing a broadcast gradient back to an input's shape.
#pragma once
#include <vector>

#include "autograd/variable.h"
#include "core/backend.h"
#include "core/device_table.h"  // to_device_like, device_table, to_host, host_values, range_proven

namespace ctx::detail {

inline Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }
inline Tensor zeros_like(const Tensor& t) { return Tensor::zeros(t.shape(), t.dtype(), t.device()); }

// Accumulate g into v's gradient if v takes part in the graph.
inline void acc(const Variable& v, const Tensor& g) {
  if (v.requires_grad()) accumulate_grad(*v.impl(), g);
}

// The NumPy broadcast of two shapes (error names the op and both shapes).
Shape broadcast_shape(const Shape& a, const Shape& b, const char* op);
// Sum g (shape out) down to `shape` (which broadcasts to out).
Tensor sum_to(const Tensor& g, const Shape& shape);
// Materialise t broadcast to `shape`.
Tensor broadcast_to(const Tensor& t, const Shape& shape);
// Check that two tensors share dtype and device (error names the op and both tensors).
void check_compatible(const Tensor& a, const Tensor& b, const char* op);
// Normalise a possibly negative dim.
int64_t wrap_dim(int64_t d, int64_t ndim, const char* op, const Shape& shape);

}  // namespace ctx::detail
