// core/cuda/launch.h — launch geometry shared by the kernels: 1-d grid-stride launches (the grid
// is capped; each thread loops), block sizes for row kernels (a power of two for the tree
// reductions of block_reduce.cuh). Grid shapes depend only on the problem size, never on the
// device, so results are the same on every GPU and under the emulator.
#pragma once
#include <algorithm>
#include <cstdint>
#include <initializer_list>

namespace ctx::cuda {

constexpr int kThreads = 256;          // elementwise kernels
constexpr int64_t kMaxBlocks = 4096;   // grid-stride beyond this

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  return (unsigned)std::max<int64_t>(1, std::min<int64_t>((n + threads - 1) / threads, kMaxBlocks));
}
// Rows of length n, one block each: the smallest power of two >= n, in [32, 256].
inline int row_threads(int64_t n) {
  int t = 32;
  while (t < 256 && t < n) t *= 2;
  return t;
}
inline unsigned row_grid(int64_t rows) {
  return (unsigned)std::max<int64_t>(1, std::min<int64_t>(rows, 65535));
}

// V consecutive elements of T moved by one access: kPack<T> of them make 16 bytes (one vector
// load / store), V = 1 is the plain element. The data-movement kernels (heads.cu, the flat binary
// kernel, cross-entropy's backward) take the 16-byte form where packs() says it applies.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T x[V];
};
template <class T>
constexpr int kPack = 16 / (int)sizeof(T);
// whether n (a row's or a run's length in elements) is a multiple of kPack<T> and every pointer
// (null ones aside) 16-byte aligned
template <class T>
bool packs(int64_t n, std::initializer_list<const void*> ptrs) {
  if (n % kPack<T> != 0) return false;
  for (const void* p : ptrs)
    if (p && reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

}  // namespace ctx::cuda

// Inside a kernel: each thread takes i = its global index, then steps by the grid's size.
#define CTX_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)
