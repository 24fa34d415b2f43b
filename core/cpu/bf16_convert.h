// core/cpu/bf16_convert.h — fp32 -> bf16 conversion of a buffer on the CPU (the inputs of the
// bf16 GEMMs), bit-exact with float_to_bf16_rne (core/bf16.h): a portable loop, and an AVX-512
// kernel (VCVTNE2PS2BF16, 32 values per instruction) chosen at run time on CPUs with
// avx512_bf16. OpenMP-parallel above a size where it pays.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace ctx::cpu {

// dst[i] = float_to_bf16_rne(src[i]) for i < n: the fastest kernel this CPU has (counted:
// bf16_values_converted).
void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n);
// The portable loop (the reference the fast kernel is tested against).
void convert_f32_to_bf16_portable(const float* src, uint16_t* dst, int64_t n);
// The AVX-512 kernel; false (nothing written) when this CPU has no avx512_bf16.
bool convert_f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n);

// The bf16 rounding of a weight, converted once: the bits of f32 CPU tensor `t`'s elements in
// the bf16 copy of its whole storage (Storage::bf16_copy), made on the first call and kept until
// the storage is next written (a mutable Tensor::raw(): the optimizer's update, a load). So a
// Linear's weight is converted once per optimizer step, not once per GEMM, and a decode converts
// its weights once for all its tokens. For tensors read by many GEMMs between writes (weights);
// an activation read once gains nothing from it.
const uint16_t* bf16_copy(const Tensor& t);
// bf16_copy for an activation or an output gradient read by more than one GEMM (a Linear's
// input: its forward and its dw; a Linear's dy: its dx and its dw), when `t` spans its whole
// storage; null (nothing converted) for a part of a larger storage, whose rest would be waste.
const uint16_t* bf16_copy_whole(const Tensor& t);
// The kept copy of `t`'s storage when one exists (no conversion), else null.
const uint16_t* bf16_copy_if_kept(const Tensor& t);
// Copies made so far in this process by bf16_copy (the weights': for the tests that count
// conversions; bf16_copy_whole's copies are not counted here).
size_t bf16_copies_made();
// Values converted so far by convert_f32_to_bf16, by every path (kept copies and the GEMMs'
// per-call conversions): the tests that check each operand is converted once per use.
size_t bf16_values_converted();

}  // namespace ctx::cpu
