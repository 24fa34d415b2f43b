// core/cuda/bf16_out.cuh — the bf16 roundings a kernel writes beside its f32 output (the kept
// copies of cuda_backend.cu's kept_bf16_slot: the next GEMM or attention reads them instead of
// converting the output in a pass of its own). Round to nearest even, as f32_to_bf16 (gemm.cu),
// so a written copy is bit for bit the converted one. f64 outputs have no bf16 twin (the backend
// passes no destination for them); the templates compile for both.
#pragma once
#include <cstdint>
#include <type_traits>

#include "core/cuda/compat.h"
#include "core/cuda/launch.h"  // Pack

namespace ctx::cuda {

template <class T>
__device__ inline uint16_t bf16_bits(T x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn((float)x));
}

// the V elements of `val` at d16
template <class T, int V>
__device__ inline void store_bf16(uint16_t* d16, const Pack<T, V>& val) {
  if constexpr (std::is_same_v<T, float>) {
CTX_UNROLL
    for (int e = 0; e < V; ++e) d16[e] = bf16_bits(val.x[e]);
  }
}

}  // namespace ctx::cuda
