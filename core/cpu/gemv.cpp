// core/cpu/gemv.cpp — the M = 1 Linear kernels (core/cpu/gemv.h): reference loops first, then the
// AVX-512 kernels (fp32 FMA; bf16 VDPBF16PS on bf16 pairs), each reading four rows of W against
// one x held in registers as it streams, with masked loads for a K that is not a multiple of
// the vector.
#include "core/cpu/gemv.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/hsum.h"
#include "core/cpu/parallel.h"
#include "core/precision.h"

namespace ctx::cpu {

void gemv_reference(const float* W, const uint16_t* Wb, const float* X, const float* b, float* Y, int64_t N,
                    int64_t K, int64_t M) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float s = 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const float x = X[m * K + k];
        if (Wb) s += bf16_to_float(Wb[n * K + k]) * bf16_to_float(float_to_bf16_rne(x));
        else s += W[n * K + k] * x;
      }
      Y[m * N + n] = s + (b ? b[n] : 0.f);
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

// y[r] = the lane sum of a[r] + (b ? b[r] : 0) for r < 4 (hsum_tree_x4: each row's tree as
// hsum_tree adds it, the four together; the same bits as the rows one by one).
inline void sums4(const __m512* a, const float* b, float* y) {
  float s[4];
  hsum_tree_x4(a, s);
  for (int r = 0; r < 4; ++r) y[r] = s[r] + (b ? b[r] : 0.f);
}

// Where the kernels find a row of W: row-major [N, K] (a Linear's weight as stored: row n's k-th
// vector at W + n K + k) or the decoder's panels of four rows (gemv_pack_panels: the four rows'
// vectors side by side, a 4-row pass one stream). kStep: how far a row's next vector lies;
// kGroup: the rows a pass should start on a multiple of (a panel's first row).
template <class T, int V>
struct RowMajor {
  T* W;
  int64_t K;
  static constexpr int64_t kStep = V, kGroup = 1;
  T* row(int64_t n) const { return W + n * K; }
};
template <class T, int V>
struct Panels {
  T* P;
  int64_t K;  // (each row padded to whole vectors: Kv = K rounded up to V)
  static constexpr int64_t kStep = 4 * V, kGroup = 4;
  T* row(int64_t n) const { return P + (n / 4) * 4 * ((K + V - 1) / V * V) + (n % 4) * V; }
};

#if defined(__AVX512F__)
// fp32: 16 floats per vector; R rows of W at a time against the M rows of X (stride K), each row of
// W loaded once for all M: R M accumulators (each one row of W . one row of X, in k order: the
// same sums whatever M is, and whatever the layout).
template <int R, int M, class L>
inline void rows_f32(const L& w, const float* X, const float* b, float* Y, int64_t ldy, int64_t n, int64_t K) {
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  const float* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = w.row(n + r);
  int64_t k = 0, at = 0;
  for (; k + 16 <= K; k += 16, at += L::kStep) {
    __m512 xv[M];
    for (int m = 0; m < M; ++m) xv[m] = _mm512_loadu_ps(X + m * K + k);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = _mm512_loadu_ps(wr[r] + at);
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
    }
  }
  if (k < K) {
    const __mmask16 mk = (__mmask16)((1u << (K - k)) - 1);
    __m512 xv[M];
    for (int m = 0; m < M; ++m) xv[m] = _mm512_maskz_loadu_ps(mk, X + m * K + k);
    for (int r = 0; r < R; ++r) {
      const __m512 wv = _mm512_maskz_loadu_ps(mk, wr[r] + at);
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_fmadd_ps(wv, xv[m], acc[r][m]);
    }
  }
  if constexpr (R == 4) {  // (M <= 4: R is 4)
    for (int m = 0; m < M; ++m) {
      const __m512 a[4] = {acc[0][m], acc[1][m], acc[2][m], acc[3][m]};
      sums4(a, b ? b + n : nullptr, Y + m * ldy + n);
    }
    return;
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum_tree<float, 64>(&acc[r][m]) + (b ? b[n + r] : 0.f);
}

// Rows [n0, n1) of Y [M, N] (row stride ldy): R = 4 rows of W a pass up to M = 4 rows of X, 2 past
// that (at most 16 accumulators + M x vectors of the 32 registers). In panels, a pass starts on a
// panel's first row where it can (the rows before the first whole panel one by one).
template <int M, class L>
void rows_range_f32(const L& w, const float* X, const float* b, float* Y, int64_t ldy, int64_t n0, int64_t n1,
                    int64_t K) {
  constexpr int R = M <= 4 ? 4 : 2;
  int64_t n = n0;
  for (; n % L::kGroup != 0 && n < n1; ++n) rows_f32<1, M>(w, X, b, Y, ldy, n, K);
  for (; n + R <= n1; n += R) rows_f32<R, M>(w, X, b, Y, ldy, n, K);
  for (; n < n1; ++n) rows_f32<1, M>(w, X, b, Y, ldy, n, K);
}
#endif

#define CTX_GEMV_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// bf16: 32 values (16 pairs) per vector; XB is X in bf16, each row zero-padded to Kp (a multiple
// of 32). As rows_f32: R rows of W against M rows of X.
template <int R, int M, class L>
CTX_GEMV_BF16_TARGET inline void rows_bf16(const L& w, const uint16_t* XB, int64_t Kp, const float* b, float* Y,
                                           int64_t ldy, int64_t n, int64_t K) {
  __m512 acc[R][M];
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) acc[r][m] = _mm512_setzero_ps();
  const uint16_t* wr[R];
  for (int r = 0; r < R; ++r) wr[r] = w.row(n + r);
  int64_t k = 0, at = 0;
  for (; k + 32 <= K; k += 32, at += L::kStep) {
    __m512bh xv[M];
    for (int m = 0; m < M; ++m) xv[m] = (__m512bh)_mm512_loadu_si512(XB + m * Kp + k);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = (__m512bh)_mm512_loadu_si512(wr[r] + at);
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], wv, xv[m]);
    }
  }
  if (k < K) {  // the tail of W's row masked to zero (XB is zero there too)
    const __mmask32 mk = (__mmask32)((1ull << (K - k)) - 1);
    __m512bh xv[M];
    for (int m = 0; m < M; ++m) xv[m] = (__m512bh)_mm512_loadu_si512(XB + m * Kp + k);
    for (int r = 0; r < R; ++r) {
      const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mk, wr[r] + at);
      for (int m = 0; m < M; ++m) acc[r][m] = _mm512_dpbf16_ps(acc[r][m], wv, xv[m]);
    }
  }
  if constexpr (R == 4) {  // (M <= 4: R is 4)
    for (int m = 0; m < M; ++m) {
      const __m512 a[4] = {acc[0][m], acc[1][m], acc[2][m], acc[3][m]};
      sums4(a, b ? b + n : nullptr, Y + m * ldy + n);
    }
    return;
  }
  for (int r = 0; r < R; ++r)
    for (int m = 0; m < M; ++m) Y[m * ldy + n + r] = hsum_tree<float, 64>(&acc[r][m]) + (b ? b[n + r] : 0.f);
}

template <int M, class L>
CTX_GEMV_BF16_TARGET void rows_range_bf16(const L& w, const uint16_t* XB, int64_t Kp, const float* b, float* Y,
                                          int64_t ldy, int64_t n0, int64_t n1, int64_t K) {
  constexpr int R = M <= 4 ? 4 : 2;
  int64_t n = n0;
  for (; n % L::kGroup != 0 && n < n1; ++n) rows_bf16<1, M>(w, XB, Kp, b, Y, ldy, n, K);
  for (; n + R <= n1; n += R) rows_bf16<R, M>(w, XB, Kp, b, Y, ldy, n, K);
  for (; n < n1; ++n) rows_bf16<1, M>(w, XB, Kp, b, Y, ldy, n, K);
}

// f(std::integral_constant<int, M>{}) for the runtime M in 1..kGemvMaxRows
template <class F>
void with_rows(int64_t M, const F& f) {
  switch (M) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 3: f(std::integral_constant<int, 3>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 5: f(std::integral_constant<int, 5>{}); break;
    case 6: f(std::integral_constant<int, 6>{}); break;
    case 7: f(std::integral_constant<int, 7>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

}  // namespace

bool gemv_available(bool bf16) {
  // (the bf16 kernels carry their own target attributes: a build without -mavx512f has them too)
  static const bool ok16 = cpu_has_avx512_bf16() && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl");
#if defined(__AVX512F__)
  constexpr bool ok32 = true;
#else
  constexpr bool ok32 = false;
#endif
  return bf16 ? ok16 : ok32;
}

int64_t gemv_panel_elems(int64_t N, int64_t K, bool bf16) {
  const int64_t V = bf16 ? 32 : 16;
  return (N + 3) / 4 * 4 * ((K + V - 1) / V * V);
}

namespace {
// W's rows into the panels (bf16: each row rounded whole first, as bf16_copy rounds), a vector's
// worth at a time, zeros past each row's end (and in the rows past N of the last panel). The panels
// are independent: the threads pack them in parallel, each zeroed first only where it has padding
// (docs/sampling.md, "The pack kept").
template <class T, int V>
void pack_panels(const float* W, T* P, int64_t N, int64_t K) {
  const Panels<T, V> pan{P, K};
  const int64_t panels = (N + 3) / 4, elems = gemv_panel_elems(4, K, V == 32);  // elements a panel
  CTX_OMP_IF(parallel_pays(N * K), "omp parallel for schedule(static)",
  for (int64_t p = 0; p < panels; ++p) {
    if (K % V != 0 || 4 * p + 4 > N) std::fill(P + p * elems, P + (p + 1) * elems, T(0));
    const int64_t rows = std::min<int64_t>(4, N - 4 * p);
    const T* src[4];
    thread_local std::vector<uint16_t> rounded;  // (bf16) the panel's rows, rounded
    for (int64_t r = 0; r < rows; ++r) {
      const float* w = W + (4 * p + r) * K;
      if constexpr (std::is_same_v<T, float>) {
        src[r] = w;
      } else {
        rounded.resize((size_t)(4 * K));
        convert_f32_to_bf16(w, rounded.data() + r * K, K);
        src[r] = rounded.data() + r * K;
      }
    }
    // the panel written in order: each vector position, the rows' vectors side by side
    for (int64_t k0 = 0, at = 0; k0 < K; k0 += V, at += pan.kStep)
      for (int64_t r = 0; r < rows; ++r) {
        T* d = pan.row(4 * p + r) + at;
        if (k0 + V <= K) std::memcpy(d, src[r] + k0, V * sizeof(T));
        else std::memcpy(d, src[r] + k0, (size_t)(K - k0) * sizeof(T));
      }
  });
}
}  // namespace

void gemv_pack_panels(const float* W, float* P16, uint16_t* P32, int64_t N, int64_t K) {
  if (P32) pack_panels<uint16_t, 32>(W, P32, N, K);
  else pack_panels<float, 16>(W, P16, N, K);
}

void gemv_rows_f32(const float* P, const float* X, const float* b, float* Y, int64_t ldy, int64_t n0, int64_t n1,
                   int64_t K, int64_t M) {
#if defined(__AVX512F__)
  const Panels<const float, 16> w{P, K};
  with_rows(M, [&](auto m) { rows_range_f32<decltype(m)::value>(w, X, b, Y, ldy, n0, n1, K); });
#else
  (void)P, (void)X, (void)b, (void)Y, (void)ldy, (void)n0, (void)n1, (void)K, (void)M;
#endif
}

int64_t gemv_bf16_padded(int64_t K) { return (K + 31) / 32 * 32; }

void gemv_x_bf16(const float* X, uint16_t* XB, int64_t K, int64_t M) {
  const int64_t Kp = gemv_bf16_padded(K);
  for (int64_t m = 0; m < M; ++m) {
    convert_f32_to_bf16(X + m * K, XB + m * Kp, K);
    std::fill(XB + m * Kp + K, XB + (m + 1) * Kp, (uint16_t)0);
  }
}

void gemv_rows_bf16(const uint16_t* P, const uint16_t* XB, const float* b, float* Y, int64_t ldy, int64_t n0,
                    int64_t n1, int64_t K, int64_t M) {
  if (!gemv_available(true)) return;
  const int64_t Kp = gemv_bf16_padded(K);
  const Panels<const uint16_t, 32> w{P, K};
  with_rows(M, [&](auto m) { rows_range_bf16<decltype(m)::value>(w, XB, Kp, b, Y, ldy, n0, n1, K); });
}

bool gemv_f32(const float* W, const float* X, const float* b, float* Y, int64_t N, int64_t K, int64_t M) {
  if (!gemv_available(false) || M < 1 || M > kGemvMaxRows) return false;
#if defined(__AVX512F__)
  const RowMajor<const float, 16> w{W, K};
  split_rows(N, K * M, [&](int64_t n0, int64_t n1) {
    with_rows(M, [&](auto m) { rows_range_f32<decltype(m)::value>(w, X, b, Y, N, n0, n1, K); });
  });
#endif
  return true;
}

bool gemv_bf16(const uint16_t* W, const float* X, const float* b, float* Y, int64_t N, int64_t K, int64_t M) {
  if (!gemv_available(true) || M < 1 || M > kGemvMaxRows) return false;
  // X in bf16, each row zero-padded to whole vectors; kept per thread (no allocation once grown)
  thread_local std::vector<uint16_t> xb;
  const int64_t Kp = gemv_bf16_padded(K);
  if ((int64_t)xb.size() < M * Kp) xb.resize((size_t)(M * Kp));
  gemv_x_bf16(X, xb.data(), K, M);
  const uint16_t* xp = xb.data();
  const RowMajor<const uint16_t, 32> w{W, K};
  split_rows(N, K * M, [&](int64_t n0, int64_t n1) {
    with_rows(M, [&](auto m) { rows_range_bf16<decltype(m)::value>(w, xp, Kp, b, Y, N, n0, n1, K); });
  });
  return true;
}

}  // namespace ctx::cpu
