// core/cpu/gemv.h — Y = X W^T + b for one row x, or a few (M <= 8): the Linear of a decode step
// (batch 1, or --num-samples rows; docs/sampling.md), which streams the weight matrix once per
// token and is bound by that stream.
// W [N, K] row-major (a Linear's weight as stored), fp32 or its bf16 copy (bf16_copy,
// core/cpu/bf16_convert.h: half the bytes to stream). Four rows of W per pass over x, fp32
// accumulators; the rows split over the OpenMP threads when the matrix is large (N K >= 2^20).
// gemv_reference is the ground truth the kernels are tested against (tests/test_gemv.cpp).
#pragma once
#include <cstdint>

namespace ctx::cpu {

// The most rows of X the kernels take (a few sequences decoded together: --num-samples); more is a
// GEMM's work.
constexpr int64_t kGemvMaxRows = 8;

// Y[m, n] = sum_k W[n, k] X[m, k] + (b ? b[n] : 0) for m < M <= kGemvMaxRows, n < N (X [M, K],
// Y [M, N] row-major), in fp32: each row of W is read once for all M rows of X, and each output is
// the same sum in the same order whatever M is. false (nothing written) when this build has no
// AVX-512F kernel or M is out of range; the caller then uses a GEMM.
bool gemv_f32(const float* W, const float* X, const float* b, float* Y, int64_t N, int64_t K, int64_t M = 1);

// The same with W given as bf16 bits and X rounded to bf16 (nearest even), the products summed
// in fp32 (VDPBF16PS; as oneDNN's bf16 matmul, bf16 denormals count as zero). false (nothing
// written) when this CPU has no avx512_bf16 or M is out of range.
bool gemv_bf16(const uint16_t* W, const float* X, const float* b, float* Y, int64_t N, int64_t K, int64_t M = 1);

// The decoder's whole step (core/cpu/decode_step.cpp) streams its own pack of the weights, in
// panels of four rows: a panel holds its four rows' first vectors side by side (16 floats, or 32
// bf16 values, each), then their next ones, each row zero-padded to whole vectors. A four-row pass
// then reads one stream instead of four (on the Zen 4 of docs/performance.md, 1.5x the rate from
// L3). gemv_panel_elems: the elements of the panels of W [N, K]; gemv_pack_panels: W into them,
// as fp32 into P16 or (P32 not null) rounded to bf16 as bf16_copy rounds it.
int64_t gemv_panel_elems(int64_t N, int64_t K, bool bf16);
void gemv_pack_panels(const float* W, float* P16, uint16_t* P32, int64_t N, int64_t K);

// A team thread's part of the same products, from the panels P: rows [n0, n1) of W into columns
// n0..n1 of Y [M, ldy], on the calling thread. The bf16 one takes X already rounded by gemv_x_bf16
// into XB [M, gemv_bf16_padded(K)] (zero-padded), so that a thread converts an input once for all
// the matrices it meets. Each output is the sum gemv_f32 / gemv_bf16 give it from W, bit for bit,
// whatever the rows and the split. Call only where gemv_available(bf16) (else they do nothing).
bool gemv_available(bool bf16);
void gemv_rows_f32(const float* P, const float* X, const float* b, float* Y, int64_t ldy, int64_t n0, int64_t n1,
                   int64_t K, int64_t M);
int64_t gemv_bf16_padded(int64_t K);
void gemv_x_bf16(const float* X, uint16_t* XB, int64_t K, int64_t M);
void gemv_rows_bf16(const uint16_t* P, const uint16_t* XB, const float* b, float* Y, int64_t ldy, int64_t n0,
                    int64_t n1, int64_t K, int64_t M);

// Plain loops: fp32 (Wb null) or the bf16 semantics above (W null, Wb the bits; X rounded to bf16,
// each product exact in fp32, summed in fp32 in k order).
void gemv_reference(const float* W, const uint16_t* Wb, const float* X, const float* b, float* Y, int64_t N,
                    int64_t K, int64_t M = 1);

}  // namespace ctx::cpu
