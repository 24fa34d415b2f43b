// core/cuda/mma.cuh — the tensor-core device intrinsics the CUDA kernels use (sm_80 and newer),
// one spelling, two implementations:
//   nvcc:      inline PTX (mma.sync, ldmatrix, cp.async), compiled by ptxas for sm_80 / sm_90
//   emulator:  exact emulations of the PTX ISA (core/cuda/emu/emu_mma.h, tensor_core.cpp):
//              warp-collective where the instruction is, fragments lane by lane as the ISA lays
//              them out, cp.async copies performed late with the destination poisoned until then.
// Fragments (the PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"; g = lane
// / 4, t = lane % 4; a register holds two bf16, the lower-indexed element in the low half):
//   A [16, 16] row-major  a[0]: (g, 2t..2t+1)   a[1]: (g+8, 2t..)   a[2]: (g, 2t+8..)  a[3]: (g+8, 2t+8..)
//   B [16, 8] (k, n)      b[0]: (2t..2t+1, g)   b[1]: (2t+8..2t+9, g)
//   C, D [16, 8] f32      c[0], c[1]: (g, 2t..2t+1)   c[2], c[3]: (g+8, 2t..2t+1)
// ldmatrix x4 from row-major [rows, cols] b16 tiles in shared memory (rows 16-byte aligned):
//   lane l supplies the row of matrix l / 8; matrix m lands in r[m]. Without .trans it gives A
//   fragments (matrices (rows 0-7, 8-15) x (cols 0-7, 8-15) in order r0 (0,0) r1 (8,0) r2 (0,8)
//   r3 (8,8)) and B fragments of X^T for X stored [n, k]; with .trans B fragments of X stored [k, n].
#pragma once
#include <cstdint>

#include "core/cuda/compat.h"
#if defined(CTXLAB_CUDA_EMULATOR)
#include "core/cuda/emu/emu_mma.h"
#endif

namespace ctx::cuda::tc {

// Two floats as a bf16 pair (round to nearest even): lo in the low half.
__device__ inline uint32_t pack_bf16(float lo, float hi) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(lo)) |
         ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(hi)) << 16);
}

#if defined(CTXLAB_CUDA_EMULATOR)

// d = a b + c (d may alias c)
__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cuemu::mma_bf16_16816(d, a, b, c, file, line);
}
template <int N, bool Trans>
__device__ inline void ldmatrix(uint32_t (&r)[N], const void* row, const char* file = __builtin_FILE(),
                                int line = __builtin_LINE()) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix .x1, .x2 or .x4");
  cuemu::ldmatrix(r, N, Trans, row, file, line);
}
// One thread's cp.async copies: copy<Bytes>(), commit(), wait<N>(), wait_all().
class AsyncCopies {
 public:
  template <int Bytes, bool Cg = false>
  __device__ void copy(void* smem_dst, const void* gmem_src, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
    static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
    static_assert(!Cg || Bytes == 16, "cp.async.cg copies 16 bytes");
    q_.copy(smem_dst, gmem_src, Bytes, Cg, file, line);
  }
  __device__ void commit() { q_.commit(); }
  template <int N>
  __device__ void wait() { q_.wait(N); }
  __device__ void wait_all() { q_.wait_all(); }

 private:
  cuemu::AsyncCopies q_;
};

#else  // nvcc

__device__ inline void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
#else
  (void)d, (void)a, (void)b, (void)c;
  __trap();  // the host never dispatches here below sm_80 (tc_attention_supported)
#endif
}

__device__ inline uint32_t shared_address(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

template <int N, bool Trans>
__device__ inline void ldmatrix(uint32_t (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix .x1, .x2 or .x4");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const uint32_t a = shared_address(row);
  if constexpr (N == 1 && !Trans) asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  if constexpr (N == 1 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  if constexpr (N == 2 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  if constexpr (N == 2 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  if constexpr (N == 4 && !Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  if constexpr (N == 4 && Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
  (void)r, (void)row;
  __trap();
#endif
}

// One thread's cp.async copies (the hardware tracks them; the class is empty).
class AsyncCopies {
 public:
  template <int Bytes, bool Cg = false>
  __device__ void copy(void* smem_dst, const void* gmem_src) {
    static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
    static_assert(!Cg || Bytes == 16, "cp.async.cg copies 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    if constexpr (Cg)
      asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared_address(smem_dst)), "l"(gmem_src)
                   : "memory");
    else
      asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(shared_address(smem_dst)), "l"(gmem_src),
                   "n"(Bytes)
                   : "memory");
#else
    (void)smem_dst, (void)gmem_src;
    __trap();
#endif
  }
  __device__ void commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
  }
  template <int N>
  __device__ void wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
  }
  __device__ void wait_all() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
  }
};

#endif

}  // namespace ctx::cuda::tc
