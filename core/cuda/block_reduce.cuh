// core/cuda/block_reduce.cuh — deterministic block-wide reductions for kernels whose blockDim.x
// is a power of two: each warp combines its lanes by a fixed xor butterfly (__shfl_xor_sync;
// a + b and b + a are the same bits, so every lane ends with the same value, lane 0's broadcast
// to be sure), the warps' results go through shared memory and warp 0 combines them the same way.
// Three barriers a call: the tree in shared memory this replaced took log2(blockDim) + 2 and left
// the row kernels (LayerNorm, softmax, cross-entropy) latency-bound on an H200.
// The same inputs give the same bits on every run and under every emulator schedule.
// `buf` is blockDim.x elements of shared memory; the call ends with a barrier, so the same buffer
// can be reused by the next reduction.
#pragma once
#include "core/cuda/compat.h"

namespace ctx::cuda {

struct SumOp {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};
struct MaxOp {  // std::max's rule: a NaN in b is dropped, as on the CPU
  template <class T>
  __device__ T operator()(T a, T b) const { return a < b ? b : a; }
};

// the xor butterfly over `width` (a power of two <= 32) lanes that `mask` names, then lane 0's value
template <class T, class Op>
__device__ T warp_reduce(T v, unsigned mask, int width, Op op) {
  for (int o = width / 2; o > 0; o /= 2) v = op(v, __shfl_xor_sync(mask, v, o));
  return __shfl_sync(mask, v, 0);
}

template <class T, class Op>
__device__ T block_reduce(T v, T* buf, Op op) {
  const int t = threadIdx.x, n = (int)blockDim.x;
  const int width = n < 32 ? n : 32, warps = n / width;
  v = warp_reduce(v, width == 32 ? 0xffffffffu : (1u << width) - 1u, width, op);
  if (warps > 1) {
    if (t % 32 == 0) buf[t / 32] = v;
    __syncthreads();
    if (t < warps) {
      v = warp_reduce(buf[t], warps == 32 ? 0xffffffffu : (1u << warps) - 1u, warps, op);
      if (t == 0) buf[0] = v;
    }
    __syncthreads();
    v = buf[0];
  }
  __syncthreads();
  return v;
}

}  // namespace ctx::cuda
