// core/cuda/compat.h — the one include of every CUDA source in core/cuda/: the same kernel text
// compiles two ways.
//   * nvcc (the real build, CTXLAB_WITH_CUDA): CUDA's own runtime, cuBLAS and cuBLASLt headers.
//   * the host compiler with CTXLAB_CUDA_EMULATOR defined: the emulator of the CUDA execution
//     model in core/cuda/emu/ (fibers for threads, counting barriers, warp intrinsics, shared
//     memory, atomics, launch limits, a cuBLAS/cuBLASLt stand-in), which provides the same names.
// Only two constructs differ between the two and go through macros:
//   CTX_LAUNCH(kernel, grid, block, smem_bytes, stream, args...)   // kernel<<<g, b, s, st>>>(args)
//   CTX_DYNAMIC_SHARED(T, name);                                   // extern __shared__ T name[]
// Everything else (__global__, __device__, __shared__, threadIdx, __syncthreads, __shfl_*_sync,
// atomics, cudaMalloc, cublasSgemm...) is spelled as in CUDA.
#pragma once

#if defined(CTXLAB_CUDA_EMULATOR)

#include "core/cuda/emu/cuda_emu.h"  // runtime API subset, device built-ins, launch()
#include "core/cuda/emu/cublas_emu.h"  // cuBLAS / cuBLASLt stand-in (column-major semantics)

#define CTX_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::cuemu::launch(#kernel, __FILE__, __LINE__, kernel, (grid), (block), (smem), (stream), ##__VA_ARGS__)
#define CTX_DYNAMIC_SHARED(T, name) T* name = ::cuemu::dynamic_shared<T>()

#else

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#define CTX_LAUNCH(kernel, grid, block, smem, stream, ...) \
  kernel<<<(grid), (block), (smem), (stream)>>>(__VA_ARGS__)
// One untyped extern array for every kernel (nvcc rejects the same extern name with two types).
#define CTX_DYNAMIC_SHARED(T, name)                          \
  extern __shared__ __align__(16) unsigned char ctx_smem_[]; \
  T* name = reinterpret_cast<T*>(ctx_smem_)

#endif

// The stream every kernel, copy and cuBLAS call of the library is queued on (cuda_runtime.cu):
// created once, blocking (the legacy default stream's synchronous copies still wait for it), one
// stream for everything so that the kernels keep their order and a warm training step can be
// captured into a CUDA Graph (stream capture does not work on the legacy default stream).
namespace ctx::cuda {
cudaStream_t stream();
}

// CTX_UNROLL before a loop of fixed trip count over fragment arrays: fully unrolled, so that the
// arrays live in registers (nvcc puts an array indexed by a loop it keeps in local memory:
// attention_tc.cu's forward had a 272-byte stack frame without it). The emulator's GCC: its own spelling.
#if defined(CTXLAB_CUDA_EMULATOR)
#define CTX_UNROLL _Pragma("GCC unroll 16")
#else
#define CTX_UNROLL _Pragma("unroll")
#endif
