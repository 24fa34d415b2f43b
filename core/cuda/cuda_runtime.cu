// core/cuda/cuda_runtime.cu — device discovery, the caching device allocator and the copy hook
// that Tensor::to uses (see cuda_runtime.h).
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/cuda_runtime.h"
#include "core/cuda/kernels.h"
#include "core/tensor.h"

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

bool emulated() {
#if defined(CTXLAB_CUDA_EMULATOR)
  return true;
#else
  return false;
#endif
}

namespace {
std::atomic<uint64_t> g_to_host{0}, g_to_device{0};  // host_copy_stats()

// Size-class cache of device blocks (same classes as the host pool). Blocks are never given
// back to the driver: a training step asks for the same sizes every step.
struct DevicePool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free;
  DeviceAllocStats stats;
};
DevicePool& pool() {
  static DevicePool* p = new DevicePool();  // never destroyed: tensors may outlive statics
  return *p;
}
void* dev_alloc(size_t bytes) {
  size_t cls = BufferPool::size_class(bytes);
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    pool().stats.requests++;
    auto& v = pool().free[cls];
    if (!v.empty()) {
      void* p = v.back();
      v.pop_back();
      pool().stats.bytes_cached -= cls;
      return p;
    }
  }
  CTX_CHECK(device_count() > 0, "no CUDA GPU available (cudaGetDeviceCount found none): cannot allocate a "
            "CUDA tensor of ", bytes, " bytes; use the cpu device");
  void* p = nullptr;
  CTX_CUDA_CHECK(cudaMalloc(&p, cls));
  std::lock_guard<std::mutex> lk(pool().mu);
  pool().stats.device_mallocs++;
  return p;
}
void dev_free(void* p, size_t bytes) {
  const size_t cls = BufferPool::size_class(bytes);
  std::lock_guard<std::mutex> lk(pool().mu);
  pool().free[cls].push_back(p);
  pool().stats.bytes_cached += cls;
}

void dev_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  const cudaMemcpyKind kind = dst_dev == Device::CPU
                                  ? (src_dev == Device::CPU ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                                  : (src_dev == Device::CPU ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToDevice);
  if (kind == cudaMemcpyDeviceToHost) g_to_host++;
  if (kind == cudaMemcpyHostToDevice) g_to_device++;
  CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}
}  // namespace

DeviceAllocStats device_alloc_stats() {
  std::lock_guard<std::mutex> lk(pool().mu);
  return pool().stats;
}

void ensure_allocator() {
  static std::once_flag once;
  std::call_once(once, [] { register_device_allocator(Device::CUDA, DeviceAllocator{dev_alloc, dev_free, dev_copy}); });
}

HostCopyStats host_copy_stats() { return {g_to_host.load(), g_to_device.load()}; }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  g_to_device++;
  CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  g_to_host++;
  CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void synchronize() { CTX_CUDA_CHECK(cudaDeviceSynchronize()); }

void fill_f32(float* dst, size_t n, float value) {
  fill<float>(dst, (int64_t)n, value);
  synchronize();
}

}  // namespace ctx::cuda
