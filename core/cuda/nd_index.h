// core/cuda/nd_index.h — N-d strided index arithmetic for kernels: a shape and K stride lists
// (one per operand) passed to a kernel by value; element i of the shape maps to one offset per
// operand. Built on the host with dims of size 1 dropped and mergeable neighbours merged, so
// most views reach the kernel as 1-3 dims.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "core/cuda/compat.h"  // __host__ __device__
#include "core/error.h"

namespace ctx::cuda {

constexpr int kMaxDims = 8;  // after merging; more throws naming the op

template <int K>
struct NdStrides {
  int nd = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[K][kMaxDims] = {};
  int64_t offset[K] = {};

  // offsets of element i (row-major over shape) for each operand
  __host__ __device__ void offsets(int64_t i, int64_t (&off)[K]) const {
    for (int k = 0; k < K; ++k) off[k] = offset[k];
    for (int d = nd - 1; d >= 0; --d) {
      const int64_t idx = i % shape[d];
      i /= shape[d];
      for (int k = 0; k < K; ++k) off[k] += idx * stride[k][d];
    }
  }
};

// shape + one stride list and base offset per operand -> merged NdStrides (throws naming `op`
// when more than kMaxDims dims remain).
template <int K>
NdStrides<K> make_nd(const char* op, const std::vector<int64_t>& shape,
                     const std::array<const std::vector<int64_t>*, K>& strides,
                     const std::array<int64_t, K>& offsets) {
  NdStrides<K> r;
  for (int k = 0; k < K; ++k) r.offset[k] = offsets[k];
  std::vector<int64_t> sh;
  std::vector<std::array<int64_t, K>> st;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    std::array<int64_t, K> s;
    for (int k = 0; k < K; ++k) s[k] = (*strides[k])[d];
    if (!sh.empty()) {  // merge with the previous dim when every operand walks them as one
      bool merge = true;
      for (int k = 0; k < K; ++k) merge = merge && st.back()[k] == s[k] * shape[d];
      if (merge) {
        sh.back() *= shape[d];
        st.back() = s;
        continue;
      }
    }
    sh.push_back(shape[d]);
    st.push_back(s);
  }
  CTX_CHECK(sh.size() <= (size_t)kMaxDims, op, ": the CUDA backend supports views of at most ",
            kMaxDims, " dims after merging, got ", sh.size());
  r.nd = (int)sh.size();
  for (int d = 0; d < r.nd; ++d) {
    r.shape[d] = sh[d];
    for (int k = 0; k < K; ++k) r.stride[k][d] = st[d][k];
  }
  return r;
}

}  // namespace ctx::cuda
