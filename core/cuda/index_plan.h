// core/cuda/index_plan.h — the bucket plan of the CUDA backend's deterministic index_add
// (index_plan.cu has the layout and the device build): the host's counting sort and the device's
// build of the same int64 array. Plain C++: cuda_backend.cu uses both, the tests hold the device
// build to the host's bit for bit (they link libctxlab_cuda and call these directly).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ctx::cuda {

// Elements a plan of m indices may take: [U | rows U | starts U + 1 | pos m] with U <= m. The
// device plan is always this long (the same allocation every step, whatever U is).
constexpr int64_t plan_capacity(int64_t m) { return 3 * m + 2; }

// The plan of `idx` (values in [0, n), not checked here) on the host: 2U + 2 + m values.
std::vector<int64_t> index_add_plan_host(const std::vector<int64_t>& idx, int64_t n);

// The plan of a cuda index tensor (i32 or i64, values in [0, n): the caller proved it) built on
// the device, queued on the stream: an i64 cuda tensor of plan_capacity(m) values whose first
// 2U + 2 + m are index_add_plan_host's (the rest is unspecified). No host copy either way.
Tensor index_add_plan_device(const Tensor& idx, int64_t n);

}  // namespace ctx::cuda
