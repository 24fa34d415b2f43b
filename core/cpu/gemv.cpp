// core/cpu/gemv.cpp — the M = 1 Linear kernels (core/cpu/gemv.h): reference loops first, then the
// AVX-512 kernels (fp32 FMA; bf16 VDPBF16PS on bf16 pairs), each reading four rows of W against
// one x held in registers as it streams, with masked loads for a K that is not a multiple of
// the vector.
#include "core/cpu/gemv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <vector>

#include "core/bf16.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/hsum.h"
#include "core/cpu/parallel.h"
#include "core/precision.h"

namespace ctx::cpu {

void gemv_reference(const float* W, const uint16_t* Wb, const float* x, const float* b, float* y, int64_t N,
                    int64_t K) {
  for (int64_t n = 0; n < N; ++n) {
    float s = 0.f;
    for (int64_t k = 0; k < K; ++k) {
      if (Wb) s += bf16_to_float(Wb[n * K + k]) * bf16_to_float(float_to_bf16_rne(x[k]));
      else s += W[n * K + k] * x[k];
    }
    y[n] = s + (b ? b[n] : 0.f);
  }
}

namespace {

// Rows [n0, n1) of y from `rows(n0, n1)`, split over the threads when the matrix is large enough
// for a fork to pay (the same threshold as the GEMMs: ~10 us of work), in blocks of 4 rows.
template <class Rows>
void split_rows(int64_t N, int64_t K, const Rows& rows) {
  const int threads = threads_for(N * K / 16);  // 16 f32 lanes per FMA
  if (threads <= 1 || N < 8) {
    rows(0, N);
    return;
  }
  const int64_t per = ((N + threads - 1) / threads + 3) / 4 * 4;
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int t = 0; t < threads; ++t) {
    const int64_t n0 = std::min<int64_t>(N, t * per), n1 = std::min<int64_t>(N, n0 + per);
    if (n0 < n1) rows(n0, n1);
  }
}

#if defined(__AVX512F__)
// fp32: 16 floats per vector; R rows of W at a time.
template <int R>
inline void rows_f32(const float* W, const float* x, const float* b, float* y, int64_t n, int64_t K) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    const __m512 xv = _mm512_loadu_ps(x + k);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(W + (n + r) * K + k), xv, acc[r]);
  }
  if (k < K) {
    const __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + k);
    for (int r = 0; r < R; ++r) acc[r] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, W + (n + r) * K + k), xv, acc[r]);
  }
  for (int r = 0; r < R; ++r) y[n + r] = hsum_tree<float, 64>(&acc[r]) + (b ? b[n + r] : 0.f);
}
#endif

#define CTX_GEMV_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// bf16: 32 values (16 pairs) per vector; xb is x in bf16, zero-padded to a multiple of 32.
template <int R>
CTX_GEMV_BF16_TARGET inline void rows_bf16(const uint16_t* W, const uint16_t* xb, const float* b, float* y,
                                           int64_t n, int64_t K) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + k);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_loadu_si512(W + (n + r) * K + k), xv);
  }
  if (k < K) {  // the tail of W's row masked to zero (xb is zero there too)
    const __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
    const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + k);
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_dpbf16_ps(acc[r], (__m512bh)_mm512_maskz_loadu_epi16(m, W + (n + r) * K + k), xv);
  }
  for (int r = 0; r < R; ++r) y[n + r] = hsum_tree<float, 64>(&acc[r]) + (b ? b[n + r] : 0.f);
}

CTX_GEMV_BF16_TARGET void gemv_bf16_rows(const uint16_t* W, const uint16_t* xb, const float* b, float* y,
                                         int64_t n0, int64_t n1, int64_t K) {
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) rows_bf16<4>(W, xb, b, y, n, K);
  for (; n < n1; ++n) rows_bf16<1>(W, xb, b, y, n, K);
}

}  // namespace

bool gemv_f32(const float* W, const float* x, const float* b, float* y, int64_t N, int64_t K) {
#if defined(__AVX512F__)
  split_rows(N, K, [&](int64_t n0, int64_t n1) {
    int64_t n = n0;
    for (; n + 4 <= n1; n += 4) rows_f32<4>(W, x, b, y, n, K);
    for (; n < n1; ++n) rows_f32<1>(W, x, b, y, n, K);
  });
  return true;
#else
  (void)W, (void)x, (void)b, (void)y, (void)N, (void)K;
  return false;
#endif
}

bool gemv_bf16(const uint16_t* W, const float* x, const float* b, float* y, int64_t N, int64_t K) {
  static const bool ok = cpu_has_avx512_bf16() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  if (!ok) return false;
  // x in bf16, zero-padded to whole vectors; kept per thread (no allocation once grown)
  thread_local std::vector<uint16_t> xb;
  const int64_t Kp = (K + 31) / 32 * 32;
  if ((int64_t)xb.size() < Kp) xb.resize((size_t)Kp);
  convert_f32_to_bf16(x, xb.data(), K);
  std::fill(xb.begin() + K, xb.begin() + Kp, (uint16_t)0);
  const uint16_t* xp = xb.data();
  split_rows(N, K, [&](int64_t n0, int64_t n1) { gemv_bf16_rows(W, xp, b, y, n0, n1, K); });
  return true;
}

}  // namespace ctx::cpu
