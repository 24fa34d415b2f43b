// core/cuda_module.h — the lazily loaded CUDA backend. In a CUDA build (real or emulated) the code
// of core/cuda/ (and train/dist/nccl/) is a separate shared library, libctxlab_cuda.so, next to the
// executable in the build tree (installed: in the prefix's lib/, found through the RUNPATH,
// core/cuda_module.cpp); it links cudart / cuBLAS / cuBLASLt / NCCL (or the emulator). ctxlab_lib dlopen()s
// it on the first use of Device::CUDA, so CPU-only runs never map the CUDA libraries. The library
// resolves ctx:: symbols from the executable (built with exported symbols and the whole of
// ctxlab_lib: CMake function ctxlab_link_lib), so there is one copy of every global (backend
// registry, host pool, settings); the Python module has its own link of the library, next to it,
// which resolves them from the module (python/CMakeLists.txt, docs/python.md "Devices"). Compiled
// only with CTXLAB_WITH_CUDA; docs/cuda.md.
#pragma once
#include <cstdint>

namespace ctx {

class Backend;

// What the library hands back through its one C entry point `ctxlab_cuda_entry`
// (core/cuda/module_entry.cpp). `abi` must equal kCudaModuleAbi (a stale .so is an error).
constexpr int kCudaModuleAbi = 3;  // 2: DeviceAllocator's arenas; 3: NCCL behind its own entry
struct CudaModule {
  int abi;
  void (*ensure_allocator)();  // registers the caching allocator for Device::CUDA tensors
  Backend& (*backend)();       // the CUDA Backend
};
using CudaModuleEntry = const CudaModule* (*)();

// Loads the library on the first call (thread-safe); throws ctx::Error
// "--device cuda: cannot load <path>: <dlerror>" when it cannot.
const CudaModule& cuda_module();
// True once cuda_module() has loaded the library (never loads it).
bool cuda_module_loaded();
// Another entry point of the same library (dlsym; loads the library first), nullptr when it has
// none: the layers above keep their own device code there behind their own entry (the NCCL
// allreduce of train/dist/nccl), so the CUDA module's table carries only the backend.
void* cuda_module_symbol(const char* name);

}  // namespace ctx
