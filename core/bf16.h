// core/bf16.h — fp32 -> bf16 rounding, the reference every bf16 conversion is held to.
// bf16 is the upper half of an fp32 (sign, 8 exponent bits, 7 stored mantissa bits). The
// rounding is cuda_bf16.h's __float2bfloat16_rn, bit for bit: round to nearest, ties to even,
// on the 16 discarded bits (so denormals round like any other value, overflow goes to inf, inf
// stays inf), and every NaN becomes the canonical NaN 0x7FFF. The vectorised CPU kernel
// (core/cpu/bf16_convert.h) and the CUDA conversion kernel (core/cuda/gemm.cu) are tested equal
// to this function (tests/test_bf16.cpp).
#pragma once
#include <cstdint>
#include <cstring>

namespace ctx {

inline uint16_t float_to_bf16_rne(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN (cuda_bf16.hpp: canonical NaN)
  const uint32_t rest = x << 16;                        // the 16 bits that are dropped
  uint16_t r = (uint16_t)(x >> 16);
  if (rest > 0x80000000u || (rest == 0x80000000u && (r & 1u))) ++r;  // carries into the exponent
  return r;
}
inline float bf16_to_float(uint16_t h) {
  const uint32_t x = (uint32_t)h << 16;
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
// The fp32 value a bf16 GEMM multiplies in place of f.
inline float bf16_round(float f) { return bf16_to_float(float_to_bf16_rne(f)); }

}  // namespace ctx
