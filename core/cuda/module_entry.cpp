// core/cuda/module_entry.cpp — the one C entry point of libctxlab_cuda.so: the table of functions
// ctxlab_lib calls after dlopen (core/cuda_module.h). Plain C++: no CUDA types.
#include "core/cuda/cuda_runtime.h"
#include "core/cuda_module.h"

namespace ctx {
Backend& cuda_backend_instance();  // core/cuda/cuda_backend.cu
}

extern "C" __attribute__((visibility("default"))) const ctx::CudaModule* ctxlab_cuda_entry() {
  static const ctx::CudaModule m = {
      ctx::kCudaModuleAbi,
      &ctx::cuda::ensure_allocator,
      &ctx::cuda_backend_instance,
  };
  return &m;
}
