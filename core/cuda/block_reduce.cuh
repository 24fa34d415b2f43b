// core/cuda/block_reduce.cuh — deterministic block-wide reductions for kernels whose blockDim.x
// is a power of two: every thread passes its partial, a fixed-shape tree in shared memory
// combines them (thread t with t + s, s = blockDim/2, /4, ...), every thread gets the result.
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

template <class T, class Op>
__device__ T block_reduce(T v, T* buf, Op op) {
  const int t = threadIdx.x;
  buf[t] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if (t < s) buf[t] = op(buf[t], buf[t + s]);
    __syncthreads();
  }
  const T r = buf[0];
  __syncthreads();
  return r;
}

}  // namespace ctx::cuda
