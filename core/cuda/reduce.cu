// core/cuda/reduce.cu — deterministic sums: reduce_sum over any set of dims (one block per
// output element, each thread a fixed strided share, a fixed tree per block) and the second pass
// of two-pass column sums (norm weight gradients). No atomics: the same bits on every run.
#include <cstdint>

#include "core/cuda/block_reduce.cuh"
#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// out is (no); x strided: output o starts at kept.off(o), its L summands at + red.off(r)
template <class T>
__global__ void reduce_sum_kernel(const T* x, T* out, NdStrides<1> kept, int64_t no, NdStrides<1> red,
                                  int64_t L) {
  CTX_DYNAMIC_SHARED(T, buf);  // blockDim.x
  for (int64_t o = blockIdx.x; o < no; o += gridDim.x) {
    int64_t base[1];
    kept.offsets(o, base);
    T s = T(0);
    for (int64_t r = threadIdx.x; r < L; r += blockDim.x) {
      int64_t off[1];
      red.offsets(r, off);
      s += x[base[0] + off[0]];
    }
    s = block_reduce(s, buf, SumOp());
    if (threadIdx.x == 0) out[o] = s;
  }
}

// part is (K, C), out is (C): out[c] += sum over k in order
template <class T>
__global__ void column_sum_add_kernel(const T* part, T* out, int64_t K, int64_t C) {
  CTX_GRID_STRIDE(c, C) {
    T s = T(0);
    for (int64_t k = 0; k < K; ++k) s += part[k * C + c];
    out[c] += s;
  }
}

}  // namespace

int64_t column_chunks(int64_t N) {
  // about 64 chunks: enough threads for C of a few hundred; each chunk ceil(N / K) rows
  return N < 64 ? (N > 0 ? N : 1) : 64;
}

template <class T>
void reduce_sum(const T* x, T* out, const NdStrides<1>& kept, int64_t no, const NdStrides<1>& red, int64_t L) {
  if (no == 0) return;
  const int threads = row_threads(L);
  CTX_LAUNCH(reduce_sum_kernel<T>, row_grid(no), threads, threads * sizeof(T), 0, x, out, kept, no, red, L);
  CTX_CUDA_LAUNCH_CHECK("reduce_sum_kernel");
}

template <class T>
void column_sum_add(const T* part, T* out, int64_t K, int64_t C) {
  if (C == 0) return;
  CTX_LAUNCH(column_sum_add_kernel<T>, grid_for(C), kThreads, 0, 0, part, out, K, C);
  CTX_CUDA_LAUNCH_CHECK("column_sum_add_kernel");
}

template void reduce_sum<float>(const float*, float*, const NdStrides<1>&, int64_t, const NdStrides<1>&, int64_t);
template void reduce_sum<double>(const double*, double*, const NdStrides<1>&, int64_t, const NdStrides<1>&, int64_t);
template void column_sum_add<float>(const float*, float*, int64_t, int64_t);
template void column_sum_add<double>(const double*, double*, int64_t, int64_t);

}  // namespace ctx::cuda
