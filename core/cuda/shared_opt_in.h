// core/cuda/shared_opt_in.h — allow_shared(kernel, bytes): the opt-in a kernel needs before a
// launch with more than the default 48 KiB of dynamic shared memory (up to 227 KiB an H100 block;
// the emulator enforces the same limits).
#pragma once
#include <cstddef>

#include "core/cuda/check.h"  // CTX_CUDA_CHECK

namespace ctx::cuda {
template <class K>
void allow_shared(K* kernel, size_t bytes) {
  if (bytes > 48 * 1024)
    CTX_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
}
}  // namespace ctx::cuda
