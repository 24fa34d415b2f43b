// core/cuda/reduce.cu — deterministic sums: reduce_sum over any set of dims (one block per
// output element, each thread a fixed strided share, a fixed tree per block), column sums of
// [R, C] in two passes (row chunks, then the chunks), and that second pass alone (norm weight
// gradients), both in lanes_column_sum's fixed order. No atomics: the same bits on every run.
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

// Block (32, kLanes): column c of rows [r0, r1) of x [., C] summed, lane y taking rows r0 + y,
// r0 + y + kLanes, ... in order (kBatch loads in flight: one at a time, a sum over 256 rows took
// ~0.13 us a row on an H200, latency-bound), then the lanes added in order through lanes
// [kLanes][32]; the result is in threadIdx.y == 0. A fixed order: the same bits on every run.
// Every thread of the block must call it (a barrier).
constexpr int kLanes = 8;
template <class T>
__device__ T lanes_column_sum(const T* x, int64_t C, int64_t c, int64_t r0, int64_t r1, T* lanes) {
  constexpr int kBatch = 8;
  T s = T(0);
  if (c < C) {
    int64_t n = r0 + threadIdx.y;
    for (; n + (kBatch - 1) * kLanes < r1; n += kBatch * kLanes) {
      T v[kBatch];
      CTX_UNROLL
      for (int j = 0; j < kBatch; ++j) v[j] = x[(n + j * kLanes) * C + c];
      CTX_UNROLL
      for (int j = 0; j < kBatch; ++j) s += v[j];
    }
    for (; n < r1; n += kLanes) s += x[n * C + c];
  }
  lanes[threadIdx.y * 32 + threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0)
    for (int y = 1; y < kLanes; ++y) s += lanes[y * 32 + threadIdx.x];
  return s;
}

// part is (K, C), out is (C): out[c] += the sum over k (lanes_column_sum's order); block (32, kLanes)
// for 32 columns
template <class T>
__global__ void column_sum_add_kernel(const T* part, T* out, int64_t K, int64_t C) {
  CTX_DYNAMIC_SHARED(T, lanes);  // [kLanes][32]
  const int64_t c = blockIdx.x * (int64_t)32 + threadIdx.x;
  const T s = lanes_column_sum(part, C, c, 0, K, lanes);
  if (threadIdx.y == 0 && c < C) out[c] += s;
}

// First pass of a column sum of x [R, C] (rows summed): part [K, C], chunk k's rows summed
// (lanes_column_sum): block (32, kLanes) for 32 columns of chunk blockIdx.y. reduce_sum_kernel's
// one block per column read a [R, C] tensor 4 bytes a row apart (linear's bias gradient: ~5 ms of
// GPT-2 small's step on an H200); here a warp reads 128 contiguous bytes a row.
template <class T>
__global__ void column_partial_kernel(const T* x, T* part, int64_t R, int64_t C, int64_t K) {
  CTX_DYNAMIC_SHARED(T, lanes);  // [kLanes][32]
  const int64_t rows = (R + K - 1) / K, k = blockIdx.y, c = blockIdx.x * (int64_t)32 + threadIdx.x;
  const T s = lanes_column_sum(x, C, c, k * rows, (k + 1) * rows < R ? (k + 1) * rows : R, lanes);
  if (threadIdx.y == 0 && c < C) part[k * C + c] = s;
}

}  // namespace

template <class T>
void column_sums(const T* x, T* part, T* out, int64_t R, int64_t C) {
  if (C == 0) return;
  const int64_t K = column_chunks(R);
  fill<T>(out, C, T(0));
  if (R == 0) return;
  CTX_LAUNCH(column_partial_kernel<T>, dim3((unsigned)((C + 31) / 32), (unsigned)K), dim3(32, kLanes),
             kLanes * 32 * sizeof(T), stream(), x, part, R, C, K);
  CTX_CUDA_LAUNCH_CHECK("column_partial_kernel");
  column_sum_add(part, out, K, C);
}

int64_t column_chunks(int64_t N) {
  // about 64 chunks: enough threads for C of a few hundred; each chunk ceil(N / K) rows
  return N < 64 ? (N > 0 ? N : 1) : 64;
}

template <class T>
void reduce_sum(const T* x, T* out, const NdStrides<1>& kept, int64_t no, const NdStrides<1>& red, int64_t L) {
  if (no == 0) return;
  const int threads = row_threads(L);
  CTX_LAUNCH(reduce_sum_kernel<T>, row_grid(no), threads, threads * sizeof(T), stream(), x, out, kept, no, red, L);
  CTX_CUDA_LAUNCH_CHECK("reduce_sum_kernel");
}

template <class T>
void column_sum_add(const T* part, T* out, int64_t K, int64_t C) {
  if (C == 0) return;
  CTX_LAUNCH(column_sum_add_kernel<T>, (unsigned)((C + 31) / 32), dim3(32, kLanes), kLanes * 32 * sizeof(T), stream(), part,
             out, K, C);
  CTX_CUDA_LAUNCH_CHECK("column_sum_add_kernel");
}

template void reduce_sum<float>(const float*, float*, const NdStrides<1>&, int64_t, const NdStrides<1>&, int64_t);
template void reduce_sum<double>(const double*, double*, const NdStrides<1>&, int64_t, const NdStrides<1>&, int64_t);
template void column_sum_add<float>(const float*, float*, int64_t, int64_t);
template void column_sums<float>(const float*, float*, float*, int64_t, int64_t);
template void column_sums<double>(const double*, double*, double*, int64_t, int64_t);
template void column_sum_add<double>(const double*, double*, int64_t, int64_t);

}  // namespace ctx::cuda
