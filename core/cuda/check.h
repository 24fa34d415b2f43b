// core/cuda/check.h — error checking for CUDA runtime and cuBLAS calls: every failure becomes a
// ctx::Error naming the source location and the call, e.g.
//   "CUDA error at core/cuda/gemm.cu:71 in cublasSgemmStridedBatched(...): CUBLAS_STATUS_..."
// Kernel launches are checked with CTX_CUDA_LAUNCH_CHECK(kernel name) right after CTX_LAUNCH
// (launch configuration errors); errors raised while a kernel runs surface at the next
// synchronising call (a cudaMemcpy), which names itself.
#pragma once
#include "core/cuda/compat.h"  // cudaError_t, cublasStatus_t
#include "core/error.h"

namespace ctx::cuda {
const char* cublas_status_name(cublasStatus_t s);  // "CUBLAS_STATUS_NOT_INITIALIZED", ...
}  // namespace ctx::cuda

#define CTX_CUDA_CHECK(call)                                                                    \
  do {                                                                                          \
    cudaError_t e_ = (call);                                                                    \
    if (e_ != cudaSuccess) {                                                                    \
      cudaGetLastError(); /* clear a non-sticky error so later calls report their own */       \
      throw ::ctx::Error(::ctx::str("CUDA error at ", __FILE__, ":", __LINE__, " in ", #call,   \
                                    ": ", cudaGetErrorString(e_)));                             \
    }                                                                                           \
  } while (0)

#define CTX_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                          \
    cublasStatus_t s_ = (call);                                                                 \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                            \
      throw ::ctx::Error(::ctx::str("cuBLAS error at ", __FILE__, ":", __LINE__, " in ", #call, \
                                    ": ", ::ctx::cuda::cublas_status_name(s_)));                \
  } while (0)

// After CTX_LAUNCH: a bad configuration (grid, block, shared memory) fails here, naming the kernel.
#define CTX_CUDA_LAUNCH_CHECK(kernel_name)                                                     \
  do {                                                                                          \
    cudaError_t e_ = cudaGetLastError();                                                        \
    if (e_ != cudaSuccess)                                                                      \
      throw ::ctx::Error(::ctx::str("CUDA error at ", __FILE__, ":", __LINE__, " launching ",   \
                                    kernel_name, ": ", cudaGetErrorString(e_)));                \
  } while (0)
