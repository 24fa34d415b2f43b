// core/cuda/cuda_runtime.h — the CUDA device layer: device discovery, error checking that
// names the call site, and a caching device allocator (no cudaMalloc inside a warm step).
// Compiled only with CTXLAB_WITH_CUDA; the kernels of the CUDA backend build on it.
#pragma once
#include <cstddef>
#include <string>

namespace ctx::cuda {

int device_count();          // 0 when no driver / no GPU (never throws)
std::string device_name();   // of device 0, "" if none
void ensure_allocator();     // registers the caching allocator for Device::CUDA tensors
// Host <-> device copies (bytes), synchronous.
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
// Fills `n` floats at `dst` with `value` on the device (a kernel: proves the toolchain works).
void fill_f32(float* dst, size_t n, float value);

}  // namespace ctx::cuda
