// core/cuda/cuda_runtime.cu — device discovery, CTX_CUDA_CHECK, caching allocator, fill kernel
// (see cuda_runtime.h).
#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/compat.h"
#include "core/cuda/cuda_runtime.h"
#include "core/error.h"
#include "core/tensor.h"

#define CTX_CUDA_CHECK(call)                                                                \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess)                                                                  \
      throw ::ctx::Error(::ctx::str("CUDA error at ", __FILE__, ":", __LINE__, " in ", #call, \
                                    ": ", cudaGetErrorString(e_)));                         \
  } while (0)

namespace ctx::cuda {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string device_name() {
  if (device_count() == 0) return "";
  cudaDeviceProp p;
  CTX_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return p.name;
}

namespace {
// Size-class cache of device blocks (same classes as the host pool).
struct DevicePool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free;
};
DevicePool& pool() {
  static DevicePool* p = new DevicePool();
  return *p;
}
void* dev_alloc(size_t bytes) {
  size_t cls = BufferPool::size_class(bytes);
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    auto& v = pool().free[cls];
    if (!v.empty()) {
      void* p = v.back();
      v.pop_back();
      return p;
    }
  }
  CTX_CHECK(device_count() > 0, "CUDA: no GPU available for a CUDA tensor of ", bytes, " bytes");
  void* p = nullptr;
  CTX_CUDA_CHECK(cudaMalloc(&p, cls));
  return p;
}
void dev_free(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lk(pool().mu);
  pool().free[BufferPool::size_class(bytes)].push_back(p);
}

void dev_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  const cudaMemcpyKind kind = dst_dev == Device::CPU
                                  ? (src_dev == Device::CPU ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                                  : (src_dev == Device::CPU ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
  CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}

__global__ void fill_kernel(float* dst, size_t n, float v) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) dst[i] = v;
}
}  // namespace

void ensure_allocator() {
  static std::once_flag once;
  std::call_once(once, [] { register_device_allocator(Device::CUDA, DeviceAllocator{dev_alloc, dev_free, dev_copy}); });
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
  CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void fill_f32(float* dst, size_t n, float value) {
  if (n == 0) return;
  unsigned blocks = (unsigned)((n + 255) / 256);
  CTX_LAUNCH(fill_kernel, blocks, 256, 0, 0, dst, n, value);
  CTX_CUDA_CHECK(cudaGetLastError());
  CTX_CUDA_CHECK(cudaDeviceSynchronize());
}

}  // namespace ctx::cuda
