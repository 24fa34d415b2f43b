// core/cuda/memory.cu — fill, set_values (a few values as kernel arguments), strided copy (permute,
// broadcast, slice, concat; optionally accumulating) and dtype conversion on the device.
#include <algorithm>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {

// x is (n)
template <class T>
__global__ void fill_kernel(T* x, int64_t n, T v) {
  CTX_GRID_STRIDE(i, n)
    x[i] = v;
}

// Up to kSetValues values, passed by value in the kernel's parameters.
constexpr int kSetValues = 32;
struct ValueBlock {
  int64_t v[kSetValues];
  int n;
};
__global__ void set_values_kernel(int64_t* dst, ValueBlock b) {
  if ((int)threadIdx.x < b.n) dst[threadIdx.x] = b.v[threadIdx.x];
}

// src, dst are strided views of nd's shape (n elements); operand 0 = src, 1 = dst
template <class T>
__global__ void copy_strided_kernel(const T* src, T* dst, NdStrides<2> nd, int64_t n, bool accumulate) {
  CTX_GRID_STRIDE(i, n) {
    int64_t off[2];
    nd.offsets(i, off);
    if (accumulate) dst[off[1]] += src[off[0]];
    else dst[off[1]] = src[off[0]];
  }
}

// src, dst are (n)
template <class S, class D>
__global__ void convert_kernel(const S* src, D* dst, int64_t n) {
  CTX_GRID_STRIDE(i, n)
    dst[i] = (D)src[i];
}

void set_values(int64_t* dst, const int64_t* v, int64_t n) {
  for (int64_t i0 = 0; i0 < n; i0 += kSetValues) {
    ValueBlock b{};
    b.n = (int)std::min<int64_t>(kSetValues, n - i0);
    for (int i = 0; i < b.n; ++i) b.v[i] = v[i0 + i];
    CTX_LAUNCH(set_values_kernel, 1, kSetValues, 0, stream(), dst + i0, b);
    CTX_CUDA_LAUNCH_CHECK("set_values_kernel");
  }
}

template <class T>
void fill(T* x, int64_t n, T v) {
  if (n == 0) return;
  CTX_LAUNCH(fill_kernel<T>, grid_for(n), kThreads, 0, stream(), x, n, v);
  CTX_CUDA_LAUNCH_CHECK("fill_kernel");
}

template <class T>
void copy_strided(const T* src, T* dst, const NdStrides<2>& nd, int64_t n, bool accumulate, bool serial) {
  if (n == 0) return;
  if (serial) CTX_LAUNCH(copy_strided_kernel<T>, 1, 1, 0, stream(), src, dst, nd, n, accumulate);
  else CTX_LAUNCH(copy_strided_kernel<T>, grid_for(n), kThreads, 0, stream(), src, dst, nd, n, accumulate);
  CTX_CUDA_LAUNCH_CHECK("copy_strided_kernel");
}

template <class S, class D>
void convert(const S* src, D* dst, int64_t n) {
  if (n == 0) return;
  CTX_LAUNCH((convert_kernel<S, D>), grid_for(n), kThreads, 0, stream(), src, dst, n);
  CTX_CUDA_LAUNCH_CHECK("convert_kernel");
}

#define CTX_INST_MEM(T)                                                                      \
  template void fill<T>(T*, int64_t, T);                                                     \
  template void copy_strided<T>(const T*, T*, const NdStrides<2>&, int64_t, bool, bool);     \
  template void convert<T, float>(const T*, float*, int64_t);                                \
  template void convert<T, double>(const T*, double*, int64_t);                              \
  template void convert<T, int32_t>(const T*, int32_t*, int64_t);                            \
  template void convert<T, int64_t>(const T*, int64_t*, int64_t);
CTX_INST_MEM(float)
CTX_INST_MEM(double)
CTX_INST_MEM(int32_t)
CTX_INST_MEM(int64_t)

}  // namespace ctx::cuda
