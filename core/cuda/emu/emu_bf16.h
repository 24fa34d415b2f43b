// core/cuda/emu/emu_bf16.h — the part of cuda_bf16.h ctxlab's kernels use: the storage type
// __nv_bfloat16 (16 bits: the upper half of an fp32) and its conversions, with
// __float2bfloat16_rn exactly as cuda_bf16.hpp computes it: round to nearest, ties to even, on
// the 16 dropped bits (denormals included; overflow to inf), every NaN to the canonical 0x7FFF.
// (ctxlab's own reference, core/bf16.h, is tested equal to this one.) Arithmetic on bf16 values
// is not emulated: kernels convert to float.
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short x;  // the raw bits, as __nv_bfloat16_raw
};

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  __nv_bfloat16 r;
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    r.x = 0x7fff;
    return r;
  }
  const uint32_t remainder = u << 16;
  r.x = (unsigned short)(u >> 16);
  if (remainder > 0x80000000u || (remainder == 0x80000000u && (r.x & 1u))) ++r.x;
  return r;
}
inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = (uint32_t)h.x << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// The raw bits and back (cuda_bf16.h's reinterpretations).
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short x) { return __nv_bfloat16{x}; }
