// core/cpu/bf16_convert.h — fp32 -> bf16 conversion of a buffer on the CPU (the inputs of the
// bf16 GEMMs), bit-exact with float_to_bf16_rne (core/bf16.h): a portable loop, and an AVX-512
// kernel (VCVTNE2PS2BF16, 32 values per instruction) chosen at run time on CPUs with
// avx512_bf16. OpenMP-parallel above a size where it pays.
#pragma once
#include <cstdint>

namespace ctx::cpu {

// dst[i] = float_to_bf16_rne(src[i]) for i < n: the fastest kernel this CPU has.
void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
// The portable loop (the reference the fast kernel is tested against).
void convert_f32_to_bf16_portable(const float* src, uint16_t* dst, int64_t n);
// The AVX-512 kernel; false (nothing written) when this CPU has no avx512_bf16.
bool convert_f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n);

}  // namespace ctx::cpu
