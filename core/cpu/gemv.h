// core/cpu/gemv.h — y = W x + b for a single row x: the Linear of a batch-1 decode step (M = 1,
// docs/sampling.md), which streams the weight matrix once per token and is bound by that stream.
// W [N, K] row-major (a Linear's weight as stored), fp32 or its bf16 copy (bf16_copy,
// core/cpu/bf16_convert.h: half the bytes to stream). Four rows of W per pass over x, fp32
// accumulators; the rows split over the OpenMP threads when the matrix is large (N K >= 2^20).
// gemv_reference is the ground truth the kernels are tested against (tests/test_gemv.cpp).
#pragma once
#include <cstdint>

namespace ctx::cpu {

// y[n] = sum_k W[n, k] x[k] + (b ? b[n] : 0) for n < N, in fp32. false (nothing written) when this
// build has no AVX-512F kernel; the caller then uses a GEMM.
bool gemv_f32(const float* W, const float* x, const float* b, float* y, int64_t N, int64_t K);

// The same with W given as bf16 bits and x rounded to bf16 (nearest even), the products summed
// in fp32 (VDPBF16PS; as oneDNN's bf16 matmul, bf16 denormals count as zero). false (nothing
// written) when this CPU has no avx512_bf16.
bool gemv_bf16(const uint16_t* W, const float* x, const float* b, float* y, int64_t N, int64_t K);

// Plain loops: fp32 (Wb null) or the bf16 semantics above (W null, Wb the bits; x rounded to bf16,
// each product exact in fp32, summed in fp32 in k order).
void gemv_reference(const float* W, const uint16_t* Wb, const float* x, const float* b, float* y, int64_t N,
                    int64_t K);

}  // namespace ctx::cpu
