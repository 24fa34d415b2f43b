// core/cpu/flash_attention.cpp — the fused causal attention kernels of flash_attention.h.
//
// Layout: per (batch, head) the keys are packed once into zero-padded K^T tiles [Dp][BC] (the
// logits; V^T tiles likewise for dp in the backward); q, k, v and do are read as rows of Dp
// elements (the inputs themselves when Dh == Dp, else zero-padded copies), Dp = Dh rounded up
// to two SIMD vectors. Every product is one small register-blocked kernel (tile_mm: 6 rows of A
// broadcast x 2 vectors of B, written with GCC/Clang vector extensions so that the compiler
// emits AVX2 / AVX-512 FMAs) that skips what the causal / window mask hides in a tile. exp runs
// on whole vectors too (Cephes' expf for float; std::exp per lane for double).
// Measured (bench_attention shapes, one thread): these kernels beat oneDNN's GEMM called on the
// same tiles — forward about equal, backward ~15% faster (per-call overhead on 64x64 tiles).
//
// Forward, per (b, h, block of BR queries), keys in blocks of BC (online softmax):
//   s = scale * q k^T + bias (masked: -inf);  m' = max(m, rowmax s);  p = e^(s - m')
//   l = l e^(m - m') + rowsum p;  o = o e^(m - m') + p v;  at the end o /= l, lse = m + ln l
// Backward (recomputation), per (b, h), key blocks outer, query blocks inner:
//   D_i = do_i . o_i;  p = e^(s - lse_i);  dv += p^T do;  dp = do v^T;  ds = p (dp - D_i)
//   dq += scale ds k;  dk += scale ds^T q;  dbias[h] += ds (summed over the batch)
// Dropout (AttnDims::dropout, training): the forward multiplies p by the mask's factor z after the
// normaliser has summed it (o = (p z) v / l); the backward takes dv += (p z)^T do and
// ds = p (z dp - D_i), D_i = do_i . o_i unchanged (sum_j p_ij z_ij dp_ij = do_i . o_i).
// OpenMP: forward over (b, h, query block), longest blocks first; backward over (b, h) — dk, dv
// and dq of one (b, h) belong to one thread. A bias gradient is shared by the batch: then the
// work items are (h, group of batch rows) and each group adds into its own [H, T, S] buffer,
// with as few groups as keep every thread busy (one when H >= threads).
//
// Content-position terms (FlashRel): the logits gain scale * (qrel[i, qidx] + krel[j, kidx]),
// gathered per visible element before scaling (one scalar per row where qidx is constant on a
// tile: const_index_rows); the value term bins p_ij by qidx into prel [Rq]
// per row (rescaled with o by the online softmax) and adds prel vrel at the end. Backward:
// dp_ij += do_i . vrel[qidx] (precomputed per row), D_i = do_i . o_i still holds with o the full
// output, dqrel / dkrel gather scale * ds (owned by the (b, h) item), dvrel = sum prel^T do.
#include "core/cpu/flash_attention.h"

#include "core/allocator.h"
#include "core/cpu/dropout_simd.h"
#include "core/cpu/hsum.h"
#include "core/cpu/parallel.h"
#include "core/cpu/scratch_arena.h"
#include "core/cpu/simd.h"
#include "core/precision.h"
#include "core/fast_paths.h"

#include <immintrin.h>

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#include <type_traits>

namespace ctx {
Backend& cpu_backend_instance();  // core/cpu/cpu_backend.cpp (FastPath::Bf16Attention's backend)
}

namespace ctx::cpu {
namespace {

template <class F>
inline F hsum(Vec<F> v) {
  F s = 0;
  for (int64_t i = 0; i < kW<F>; ++i) s += v[i];
  return s;
}

// ---- the tile product ----
// C[R rows, NV vectors] (+)= sum_k A(r, k) B[k, :], A(r, k) = A[r * sar + k * sak].
template <class F, int R, int NV, bool Acc>
inline __attribute__((always_inline)) void micro(int64_t K, const F* A, int64_t sar, int64_t sak,
                                                 const F* Bm, int64_t ldb, F* C, int64_t ldc) {
  constexpr int64_t W = kW<F>;
  Vec<F> c[R][NV];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) c[r][n] = Acc ? vload(C + r * ldc + n * W) : Vec<F>{};
  for (int64_t k = 0; k < K; ++k) {
    const F* b = Bm + k * ldb;
    Vec<F> bv[NV];
    for (int n = 0; n < NV; ++n) bv[n] = vload(b + n * W);
    for (int r = 0; r < R; ++r) {
      const Vec<F> a = splat(A[r * sar + k * sak]);
      for (int n = 0; n < NV; ++n) c[r][n] += a * bv[n];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < NV; ++n) vstore(C + r * ldc + n * W, c[r][n]);
}

// The part of a tile product a block of rows [m0, m1) of C needs: columns [n0, n1) of C and the
// reduction range [k0, k1) (the rest is masked: zero in A, or never read from C).
struct Span {
  int64_t n0, n1, k0, k1;
};
struct FullSpan {
  Span operator()(int64_t, int64_t) const {
    return {0, std::numeric_limits<int64_t>::max(), 0, std::numeric_limits<int64_t>::max()};
  }
};

// C[M, N] (+)= A B: A(r, k) at A[r * sar + k * sak] (a row-major or a transposed operand), B
// row-major [K, N] with leading dim ldb, C row-major with ldc. N: a multiple of 2 vectors.
// Blocks of 6 rows x 2 vectors (12 accumulators), then 2- and 1-row remainders; each block
// computes only the columns and reduces only over the k that span(m0, m1) names (columns
// rounded out to whole vector pairs; C outside them is left as it was). Without `Acc` the
// columns computed over an empty k range are zero.
template <class F, bool Acc, class SpanFn = FullSpan>
void tile_mm(int64_t M, int64_t N, int64_t K, const F* A, int64_t sar, int64_t sak, const F* Bm,
             int64_t ldb, F* C, int64_t ldc, const SpanFn& span = SpanFn()) {
  constexpr int64_t NB = 2 * kW<F>;
  auto rows = [&](auto rc, int64_t i) {
    constexpr int R = decltype(rc)::value;
    const Span sp = span(i, i + R);
    const int64_t k0 = std::max<int64_t>(0, sp.k0), k1 = std::min(K, sp.k1);
    const int64_t n0 = std::max<int64_t>(0, sp.n0) / NB * NB;
    const int64_t n1 = std::min(N, (std::min(N, sp.n1) + NB - 1) / NB * NB);
    const F* a = A + i * sar + k0 * sak;
    for (int64_t j = n0; j < n1; j += NB)
      micro<F, R, 2, Acc>(std::max<int64_t>(0, k1 - k0), a, sar, sak, Bm + k0 * ldb + j, ldb, C + i * ldc + j, ldc);
  };
  int64_t i = 0;
  for (; i + 6 <= M; i += 6) rows(std::integral_constant<int, 6>(), i);
  for (; i + 2 <= M; i += 2) rows(std::integral_constant<int, 2>(), i);
  for (; i < M; ++i) rows(std::integral_constant<int, 1>(), i);
}

// a . b over n elements (the scores of a few queries read straight from row-major keys), the
// lanes summed by halving (hsum adds them one by one)
template <class F>
inline F dot_n(const F* a, const F* b, int64_t n) {
  Vec<F> acc{};
  int64_t i = 0;
  for (; i + kW<F> <= n; i += kW<F>) acc += vload(a + i) * vload(b + i);
  F s = hsum_tree<F, kVecBytes>(&acc);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// ---- the bf16 tile product (--precision bf16: the attention products take bf16 inputs) ----
// tile_mm's contract for float (C (+)= A B over span's columns and k range, N a multiple of 32),
// with A and B rounded to bf16 and the products summed in fp32 by VDPBF16PS, which multiplies
// pairs of adjacent k: B is packed per call as [ceil(K/2)][N][2] (the two rows of a pair
// interleaved per column), A as one u32 pair (k even, k odd) per (row, k pair). Each row block
// reduces over the pairs that cover span's k range: an edge pair's other element is masked, so
// zero in A by tile_mm's contract, times a finite row of B. Rounding: VCVTNE2PS2BF16 (nearest
// even; a denormal input counts as zero).
#if defined(__AVX512F__)
#define CTX_FA_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// (lo[i], hi[i]) interleaved: the bf16 of lo in even lanes, of hi in odd lanes (32 x u16)
CTX_FA_BF16 inline __m512i pairs_bf16(__m512 lo, __m512 hi) {
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}
CTX_FA_BF16 inline __m512 load_n(const float* p, int64_t n) {  // n <= 16 floats, zeros after
  return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1), p);
}

// C[R rows, 2 vectors] (+)= sum over np pairs; pair (r, p) at Ap[r * spr + p * spk]; Bp [np][N][2]
template <int R, bool Acc>
CTX_FA_BF16 inline void micro_bf16(int64_t np, const uint32_t* Ap, int64_t spr, int64_t spk, const uint16_t* Bp,
                                   int64_t N, float* C, int64_t ldc) {
  __m512 c[R][2];
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < 2; ++n) c[r][n] = Acc ? _mm512_loadu_ps(C + r * ldc + 16 * n) : _mm512_setzero_ps();
  for (int64_t p = 0; p < np; ++p) {
    const uint16_t* b = Bp + p * N * 2;
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b), b1 = (__m512bh)_mm512_loadu_si512(b + 32);
    for (int r = 0; r < R; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32((int)Ap[r * spr + p * spk]);
      c[r][0] = _mm512_dpbf16_ps(c[r][0], a, b0);
      c[r][1] = _mm512_dpbf16_ps(c[r][1], a, b1);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int n = 0; n < 2; ++n) _mm512_storeu_ps(C + r * ldc + 16 * n, c[r][n]);
}

template <bool Acc, class SpanFn>
CTX_FA_BF16 void tile_mm_bf16(int64_t M, int64_t N, int64_t K, const float* A, int64_t sar, int64_t sak,
                              const float* Bm, int64_t ldb, float* C, int64_t ldc, const SpanFn& span) {
  const int64_t np = (K + 1) / 2;
  thread_local std::vector<uint16_t> bbuf;
  thread_local std::vector<uint32_t> abuf;
  if ((int64_t)bbuf.size() < np * N * 2) bbuf.resize((size_t)(np * N * 2));
  if ((int64_t)abuf.size() < np * M) abuf.resize((size_t)(np * M));
  uint16_t* Bp = bbuf.data();
  uint32_t* Ap = abuf.data();
  for (int64_t p = 0; p < np; ++p) {  // B's rows 2p, 2p + 1 interleaved
    const float* r0 = Bm + 2 * p * ldb;
    const float* r1 = 2 * p + 1 < K ? r0 + ldb : nullptr;
    for (int64_t n = 0; n < N; n += 16)
      _mm512_storeu_si512(Bp + (p * N + n) * 2,
                          pairs_bf16(_mm512_loadu_ps(r0 + n), r1 ? _mm512_loadu_ps(r1 + n) : _mm512_setzero_ps()));
  }
  // A's pairs: rows contiguous in k (sak == 1): [M][np], a row's bf16 in order; else (columns
  // contiguous, sar == 1): [np][M], two columns interleaved
  int64_t spr, spk;
  if (sak == 1) {
    spr = np, spk = 1;
    for (int64_t r = 0; r < M; ++r) {
      const float* a = A + r * sar;
      uint16_t* out = reinterpret_cast<uint16_t*>(Ap + r * np);
      for (int64_t k = 0; k < 2 * np; k += 32) {
        const __m512 lo = load_n(a + k, std::max<int64_t>(0, std::min<int64_t>(16, K - k)));
        const __m512 hi = load_n(a + k + 16, std::max<int64_t>(0, std::min<int64_t>(16, K - k - 16)));
        const __m512i v = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
        const int64_t left = std::min<int64_t>(32, 2 * np - k);
        _mm512_mask_storeu_epi16(out + k, (__mmask32)(left >= 32 ? ~0u : ((1u << left) - 1)), v);
      }
    }
  } else {
    spr = 1, spk = M;
    for (int64_t p = 0; p < np; ++p) {
      const float* c0 = A + 2 * p * sak;
      const float* c1 = 2 * p + 1 < K ? c0 + sak : nullptr;
      for (int64_t r = 0; r < M; r += 16) {
        const int64_t n = std::min<int64_t>(16, M - r);
        const __m512i v = pairs_bf16(load_n(c0 + r * sar, n), c1 ? load_n(c1 + r * sar, n) : _mm512_setzero_ps());
        _mm512_mask_storeu_epi32(Ap + p * M + r, (__mmask16)(n >= 16 ? 0xFFFF : ((1u << n) - 1)), v);
      }
    }
  }
  constexpr int64_t NB = 32;
  auto rows = [&](auto rc, int64_t i) {
    constexpr int R = decltype(rc)::value;
    const Span sp = span(i, i + R);
    const int64_t k0 = std::max<int64_t>(0, sp.k0), k1 = std::min(K, sp.k1);
    const int64_t p0 = k0 / 2, p1 = k1 > k0 ? (k1 + 1) / 2 : p0;
    const int64_t n0 = std::max<int64_t>(0, sp.n0) / NB * NB;
    const int64_t n1 = std::min(N, (std::min(N, sp.n1) + NB - 1) / NB * NB);
    const uint32_t* a = Ap + i * spr + p0 * spk;
    for (int64_t j = n0; j < n1; j += NB)
      micro_bf16<R, Acc>(p1 - p0, a, spr, spk, Bp + (p0 * N + j) * 2, N, C + i * ldc + j, ldc);
  };
  int64_t i = 0;
  for (; i + 6 <= M; i += 6) rows(std::integral_constant<int, 6>(), i);
  for (; i + 2 <= M; i += 2) rows(std::integral_constant<int, 2>(), i);
  for (; i < M; ++i) rows(std::integral_constant<int, 1>(), i);
}
#endif

// tile_mm in fp32, or with bf16 inputs when `bf16` (float on an AVX-512 build; the caller checks
// the CPU: attention_bf16()).
template <class F, bool Acc, class SpanFn = FullSpan>
void tile_mm_p(bool bf16, int64_t M, int64_t N, int64_t K, const F* A, int64_t sar, int64_t sak, const F* Bm,
               int64_t ldb, F* C, int64_t ldc, const SpanFn& span = SpanFn()) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<F, float>) {
    if (bf16) return tile_mm_bf16<Acc>(M, N, K, A, sar, sak, Bm, ldb, C, ldc, span);
  }
#endif
  (void)bf16;
  tile_mm<F, Acc>(M, N, K, A, sar, sak, Bm, ldb, C, ldc, span);
}

// Whether float attention products take bf16 inputs: --precision bf16 with CTXLAB_BF16_ATTENTION=1
// (FastPath::Bf16Attention, opt-in: docs/performance.md, "Attention") on a CPU with avx512_bf16,
// in an AVX-512 build.
template <class F>
bool attention_bf16() {
#if defined(__AVX512F__)
  static const bool cpu = cpu_has_avx512_bf16() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return std::is_same_v<F, float> && cpu && gemm_precision() == Precision::BF16 &&
         use_fused(FastPath::Bf16Attention, cpu_backend_instance());
#else
  return false;
#endif
}

// ---- tiles and packing ----
constexpr int64_t BR = 64;  // queries per block
// At most this many queries (a decode step: one), the forward reads the keys in place, one dot
// product per visible (query, key), instead of packing K^T tiles: packing costs as much as the
// products themselves when each key is used by one query.
constexpr int64_t kDirectRows = 4;
constexpr int64_t BC = 64;  // keys per block (a multiple of 2 vectors of any width here)

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Scratch memory: core/cpu/scratch_arena.h (per thread, reused from call to call, no lock).

struct Geom {
  int64_t BH, off, Dp, nqb, nkb, Tp, Sp;
  int64_t work;  // the forward's work in core/cpu/parallel.h units: per score 2 Dh / 16 FMAs + ~4 (exp)
  explicit Geom(const FlashAttnDims& d)
      : BH(d.B * d.H), off(d.S - d.T), Dp(ceil_div(d.Dh, 2 * kW<float>) * 2 * kW<float>),
        nqb(ceil_div(d.T, BR)), nkb(ceil_div(d.S, BC)), Tp(nqb * BR), Sp(nkb * BC),
        work(BH * d.T * d.S * (d.Dh / 8 + 4)) {}
};

// x [n, Dh] as rows of Dp elements: x itself when Dh == Dp, else x copied into out [n, Dp] with
// zero columns. Only rows < n are ever read.
template <class F>
const F* rows_dp(const F* x, int64_t n, int64_t Dh, int64_t Dp, F* out) {
  if (Dh == Dp) return x;
  for (int64_t r = 0; r < n; ++r) {
    F* o = out + r * Dp;
    int64_t c = 0;
    for (; c < Dh; ++c) o[c] = x[r * Dh + c];
    for (; c < Dp; ++c) o[c] = F(0);
  }
  return out;
}

// x [S, Dh] -> out [nkb][Dp][BC]: tile kb holds x[kb*BC + c][dd] at [dd][c], zero padded
template <class F>
void pack_tiles_t(const F* x, int64_t S, int64_t Dh, int64_t nkb, int64_t Dp, F* out) {
  std::fill(out, out + nkb * Dp * BC, F(0));
  for (int64_t j = 0; j < S; ++j) {
    F* t = out + (j / BC) * Dp * BC + j % BC;
    for (int64_t dd = 0; dd < Dh; ++dd) t[dd * BC] = x[j * Dh + dd];
  }
}

// The mask within tiles: the columns [cl, ch) of the key tile starting at j0 (nb keys) that
// query rows [i0 + m0, i0 + m1) see (query i sees keys (i + off - window, i + off]), and the rows
// [cl, ch) of the query tile starting at i0 (`rows` queries) that see keys [j0 + m0, j0 + m1).
struct ColRange {
  int64_t cl, ch;
};
inline ColRange cols_seen(int64_t i0, int64_t m0, int64_t m1, int64_t j0, int64_t nb, const Geom& g,
                          int64_t window) {
  const int64_t lo = window > 0 ? i0 + m0 + g.off - window + 1 - j0 : 0;
  return {std::max<int64_t>(0, lo), std::min(nb, i0 + m1 + g.off - j0)};
}
inline ColRange rows_seeing(int64_t j0, int64_t m0, int64_t m1, int64_t i0, int64_t rows,
                            const Geom& g, int64_t window) {
  const int64_t hi = window > 0 ? j0 + m1 - 1 - g.off + window - i0 : rows;
  return {std::max<int64_t>(0, j0 + m0 - g.off - i0), std::min(rows, hi)};
}
constexpr int64_t kAll = std::numeric_limits<int64_t>::max();

// row[c] = scale * row[c] + bias[c] for c in [cl, ch), -inf elsewhere in [0, BC); returns the max.
// Whole vectors (the compiler does not vectorise a float max reduction by itself); the bias is
// read only where visible (a row's last tile may end before BC).
template <class F>
F logits_row(F* row, const F* brow, F sc, ColRange cr) {
  constexpr int64_t W = kW<F>;
  const F ninf = -std::numeric_limits<F>::infinity();
  const Vec<F> scv = splat(sc), ni = splat(ninf);
  Vec<F> mxv = ni;
  for (int64_t c = 0; c < BC; c += W) {
    if (c + W <= cr.cl || c >= cr.ch) {
      vstore(row + c, ni);
      continue;
    }
    Vec<F> x = vload(row + c) * scv;
    if (c >= cr.cl && c + W <= cr.ch) {
      if (brow) x += vload(brow + c);
    } else {  // partly visible
      for (int64_t l = 0; l < W; ++l) {
        const int64_t col = c + l;
        x[l] = col >= cr.cl && col < cr.ch ? (brow ? x[l] + brow[col] : x[l]) : ninf;
      }
    }
    vstore(row + c, x);
    mxv = mxv < x ? x : mxv;  // std::max(mx, x) per lane
  }
  F mx = ninf;
  for (int64_t l = 0; l < W; ++l) mx = std::max(mx, mxv[l]);
  return mx;
}

// p[c] = e^(p[c] - m) on the vectors that hold the visible columns [cl, ch) (the masked lanes
// there are -inf: 0), p = 0 on the others (no exp where a tile is masked whole: half of a
// diagonal tile); returns the sum.
template <class F>
F exp_sub_row(F* p, ColRange cr, F m) {
  constexpr int64_t W = kW<F>;
  const int64_t lo = cr.cl / W * W, hi = std::min<int64_t>(BC, (cr.ch + W - 1) / W * W);
  std::fill(p, p + lo, F(0));
  std::fill(p + std::max(lo, hi), p + BC, F(0));
  const Vec<F> mv = splat(m);
  Vec<F> acc{};
  for (int64_t c = lo; c < hi; c += W) {
    const Vec<F> e = exp_vec(vload(p + c) - mv);
    vstore(p + c, e);
    acc += e;
  }
  return hsum<F>(acc);
}

// p[c] *= z(base + c) on the visible columns [cl, ch): the dropout factor of element (i, j0 + c)
// of p [B, H, T, S] (AttnDims::dropout); the others are 0 already.
template <class F>
void drop_row(F* p, ColRange cr, const DropoutMask& m, uint64_t base) {
  if (cr.ch > cr.cl) dropout_apply(p + cr.cl, p + cr.cl, cr.ch - cr.cl, m, base + (uint64_t)cr.cl);
}

// Relative logit terms of query i on the key tile starting at j0: row[c] += qrel[i, qidx[i, j]]
// + krel[j, kidx[i, j]] (j = j0 + c) for the visible columns [cl, ch), before scaling.
// qrel_bh, krel_bh: the (b, h) slices of qrel [T, Rq] and krel [S, Rk].
// qc: the row's constant qidx on this tile (const_index_rows), or -1.
template <class F>
void add_rel_row(F* row, const FlashRel<F>& rel, const F* qrel_bh, const F* krel_bh, int64_t S,
                 int64_t i, int64_t j0, ColRange cr, int32_t qc) {
  if (rel.qrel) {
    const F* qr = qrel_bh + i * rel.Rq;
    if (qc >= 0) {
      const F a = qr[qc];
#pragma omp simd
      for (int64_t c = cr.cl; c < cr.ch; ++c) row[c] += a;
    } else {
      const int32_t* ix = rel.qidx + i * S + j0;
      for (int64_t c = cr.cl; c < cr.ch; ++c) row[c] += qr[ix[c]];
    }
  }
  if (rel.krel) {
    const F* kr = krel_bh + j0 * rel.Rk;
    const int32_t* ix = rel.kidx + i * S + j0;
    for (int64_t c = cr.cl; c < cr.ch; ++c) row[c] += kr[c * rel.Rk + ix[c]];
  }
}

// bins[qidx[i, j0 + c]] += p[c] for the visible columns [cl, ch) (the value term's weights);
// with a constant index qc >= 0, one bin gets the row's sum.
template <class F>
void bin_row(F* bins, const F* p, const int32_t* ix, ColRange cr, int32_t qc) {
  if (qc >= 0) {
    F sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t c = cr.cl; c < cr.ch; ++c) sum += p[c];
    bins[qc] += sum;
    return;
  }
  for (int64_t c = cr.cl; c < cr.ch; ++c) bins[ix[c]] += p[c];
}

// out[i * nkb + kb] = the value qidx[i, j] takes on every key j of tile kb that query i sees,
// when that is one value, else -1 (also when it sees none there). Shaw's clipped index is
// constant beyond the clip distance, DeBERTa's where its log buckets saturate: there the kernels
// add and bin one scalar per row instead of gathering per element.
inline void const_index_rows(const int32_t* idx, const Geom& g, int64_t T, int64_t S, int64_t window,
                             int32_t* out) {
  CTX_OMP_IF(parallel_pays(T * S), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < T; ++i)
    for (int64_t kb = 0; kb < g.nkb; ++kb) {
      const int64_t j0 = kb * BC, nb = std::min(BC, S - j0);
      const ColRange cr = cols_seen(i, 0, 1, j0, nb, g, window);
      int32_t v = -1;
      if (cr.cl < cr.ch) {
        const int32_t* ix = idx + i * S + j0;
        v = ix[cr.cl];
        for (int64_t c = cr.cl + 1; c < cr.ch && v >= 0; ++c)
          if (ix[c] != v) v = -1;
      }
      out[i * g.nkb + kb] = v;
    });
}

// The row statistics' accumulation over one key tile (FlashStats): e = p[c] = e^(logit[c] - mnew)
// on the visible columns [cl, ch) (before dropout), logit the row before the exponential. The
// sums so far, relative to the old max (mnew - shift), move to mnew first: e scales by alpha, and
// e log e gains e * shift (skipped before the first visible tile, where l is 0 and the old max
// -inf). log e = logit - mnew: no log per element (a masked column, e = 0 and logit -inf, adds 0).
// dist0: the distance of column 0 (i + S - T - j0); sink_end: the sink keys are the columns < it.
template <class F>
void stats_row(const F* p, const F* logit, ColRange cr, F mnew, F alpha, F shift, F l, int64_t dist0,
               int64_t sink_end, F& ent, F& dist, F& sink) {
  if (l > F(0)) {
    ent = alpha * (ent + shift * l);
    dist *= alpha;
    sink *= alpha;
  }
  F a = 0, b = 0, s = 0;
#pragma omp simd reduction(+ : a, b, s)
  for (int64_t c = cr.cl; c < cr.ch; ++c) {
    const F e = p[c];
    a += e > F(0) ? e * (logit[c] - mnew) : F(0);
    b += e * (F)(dist0 - c);
    s += c < sink_end ? e : F(0);
  }
  ent += a, dist += b, sink += s;
}

// ---- one query per (b, h): a decode step ----
// The scores s[j] = q . k_j of keys [jlo, jhi) (rows of Dh in place), four keys a pass: their
// four lane sums share one tree of adds (hsum_tree_x4) where F is float in 16 lanes and Dh a
// multiple of 16, else dot_n per key.
template <class F>
void one_query_scores(const F* q, const F* k, int64_t Dh, int64_t jlo, int64_t jhi, F* s) {
  int64_t j = jlo;
  if constexpr (std::is_same_v<F, float> && kW<F> == 16) {
    if (Dh % 16 == 0)
      for (; j + 4 <= jhi; j += 4) {
        Vec<F> a[4] = {};
        const F* kj = k + j * Dh;
        for (int64_t c = 0; c < Dh; c += 16) {
          const Vec<F> x = vload(q + c);
          for (int r = 0; r < 4; ++r) a[r] += x * vload(kj + r * Dh + c);
        }
        hsum_tree_x4(a, s + j);
      }
  }
  for (; j < jhi; ++j) s[j] = dot_n(q, k + j * Dh, Dh);
}

// s[j] = e^(s[j] - m) on [jlo, jhi) (a last part-vector computed whole with its extra lanes at
// -inf: 0, stored only where in range); returns the sum.
template <class F>
F one_query_exp(F* s, int64_t jlo, int64_t jhi, F m) {
  constexpr int64_t W = kW<F>;
  const Vec<F> mv = splat(m);
  Vec<F> acc{};
  int64_t j = jlo;
  for (; j + W <= jhi; j += W) {
    const Vec<F> e = exp_vec(vload(s + j) - mv);
    vstore(s + j, e);
    acc += e;
  }
  if (j < jhi) {
    Vec<F> x = splat(-std::numeric_limits<F>::infinity());
    for (int64_t l = 0; l < jhi - j; ++l) x[l] = s[j + l];
    const Vec<F> e = exp_vec(x - mv);
    for (int64_t l = 0; l < jhi - j; ++l) s[j + l] = e[l];
    acc += e;
  }
  return hsum_tree<F, kVecBytes>(&acc);
}

// acc[c0, c0 + NV W) = sum_j p[j] v[j, c0..] over keys [jlo, jhi): NV vectors of columns kept in
// registers over every key, four keys' products in four separate sums (no chain of one add a key
// through memory).
template <class F, int NV>
void one_query_pv(const F* p, const F* v, int64_t Dh, int64_t c0, int64_t jlo, int64_t jhi, F* acc) {
  constexpr int64_t W = kW<F>;
  Vec<F> a[4][NV] = {};
  int64_t j = jlo;
  for (; j + 4 <= jhi; j += 4)
    for (int u = 0; u < 4; ++u) {
      const Vec<F> pu = splat(p[j + u]);
      const F* vj = v + (j + u) * Dh + c0;
      for (int n = 0; n < NV; ++n) a[u][n] += pu * vload(vj + n * W);
    }
  for (; j < jhi; ++j) {
    const Vec<F> pj = splat(p[j]);
    for (int n = 0; n < NV; ++n) a[0][n] += pj * vload(v + j * Dh + c0 + n * W);
  }
  for (int n = 0; n < NV; ++n) vstore(acc + c0 + n * W, (a[0][n] + a[1][n]) + (a[2][n] + a[3][n]));
}

// One query row against the keys [jlo, jhi) of its (b, h), as a decode step has (T = 1): the
// whole row's logits first (scale, bias row brow or null), their max, one exponential each, then
// o = p v / l: no key tiles and no rescaling by a running max, which is what costs most per key
// in the tiled loop when a tile has one query (docs/sampling.md, "The decode step's attention").
// q [Dh], k, v rows of Dh; s: scratch of jhi elements; acc: scratch of Dh. Writes o [Dh] and lse.
template <class F>
void one_query(const F* q, const F* k, const F* v, const F* brow, int64_t Dh, int64_t jlo, int64_t jhi, F sc,
               F* s, F* acc, F* o, F* lse) {
  constexpr int64_t W = kW<F>;
  const F ninf = -std::numeric_limits<F>::infinity();
  one_query_scores(q, k, Dh, jlo, jhi, s);
  const Vec<F> scv = splat(sc);
  Vec<F> mxv = splat(ninf);
  int64_t j = jlo;
  for (; j + W <= jhi; j += W) {
    Vec<F> x = vload(s + j) * scv;
    if (brow) x += vload(brow + j);
    vstore(s + j, x);
    mxv = mxv < x ? x : mxv;
  }
  F mx = ninf;
  for (int64_t l = 0; l < W; ++l) mx = std::max(mx, mxv[l]);
  for (; j < jhi; ++j) {
    s[j] = s[j] * sc + (brow ? brow[j] : F(0));
    mx = std::max(mx, s[j]);
  }
  if (!(mx > ninf)) {  // no key, or only -inf logits: o = 0, lse = +inf (as the tiled loop)
    std::fill(o, o + Dh, F(0));
    *lse = std::numeric_limits<F>::infinity();
    return;
  }
  const F l = one_query_exp(s, jlo, jhi, mx);
  int64_t c = 0;  // acc = p v: up to four vectors of columns at a time in registers, the rest one by one
  for (; c + 4 * W <= Dh; c += 4 * W) one_query_pv<F, 4>(s, v, Dh, c, jlo, jhi, acc);
  if (Dh - c >= 3 * W) one_query_pv<F, 3>(s, v, Dh, c, jlo, jhi, acc), c += 3 * W;
  if (Dh - c >= 2 * W) one_query_pv<F, 2>(s, v, Dh, c, jlo, jhi, acc), c += 2 * W;
  if (Dh - c >= W) one_query_pv<F, 1>(s, v, Dh, c, jlo, jhi, acc), c += W;
  for (; c < Dh; ++c) {
    F x = 0;
    for (j = jlo; j < jhi; ++j) x += s[j] * v[j * Dh + c];
    acc[c] = x;
  }
  const F inv = F(1) / l;
  for (c = 0; c < Dh; ++c) o[c] = acc[c] * inv;
  *lse = mx + std::log(l);
}

}  // namespace

// ------------------------------------------------------------------------------- forward ----
template <class F>
void flash_attention_forward(const FlashAttnDims& d, const F* q, const F* k, const F* v,
                             const F* bias, F* o, F* lse, const FlashRel<F>& rel,
                             const FlashStats<F>& stats) {
  const Geom g(d);
  const int64_t T = d.T, S = d.S, Dh = d.Dh, H = d.H, Dp = g.Dp, nkb = g.nkb;
  const int64_t KS = d.kv_stride();  // rows per (b, h) in k, v
  if (g.BH == 0 || T == 0) return;
  const F sc = (F)d.scale;
  const F ninf = -std::numeric_limits<F>::infinity();
  const bool dropping = d.dropout.active();
  if (T == 1 && !rel.logit_terms() && !rel.vrel && !stats.rows && !dropping) {  // a decode step's query
    const int64_t jlo = d.window > 0 ? std::max<int64_t>(0, g.off - d.window + 1) : 0;
    CTX_OMP_IF(g.BH > 1 && parallel_pays(g.work), "omp parallel for schedule(static)",
    for (int64_t bh = 0; bh < g.BH; ++bh) {
      Scratch<F> s(S), acc(Dh);
      one_query(q + bh * Dh, k + bh * KS * Dh, v + bh * KS * Dh, bias ? bias + (bh % H) * S : nullptr, Dh, jlo, S,
                sc, s.data(), acc.data(), o + bh * Dh, lse + bh);
    });
    return;
  }
  // keys of (b, h): K^T tiles [nkb][Dp][BC]; V as rows of Dp ([S, Dp]: v itself when Dh == Dp)
  const bool direct = T <= kDirectRows;  // scores from k in place, no K^T tiles
  // bf16 products (--precision bf16); not for a decode step's few queries, where packing the
  // tiles per call would cost more than the products
  const bool bf16 = !direct && attention_bf16<F>();
  Scratch<F> kt(direct ? 0 : g.BH * g.Sp * Dp), vp(Dh == Dp ? 0 : g.BH * S * Dp);
  const int64_t ntask = g.BH * g.nqb;
  Scratch<int32_t> qconst(rel.qidx ? T * nkb : 0);  // constant qidx per (row, key tile), or -1
  if (rel.qidx) const_index_rows(rel.qidx, g, T, S, d.window, qconst.data());
  const bool par = ntask > 1 && parallel_pays(g.work);
  // the region body; its worksharing loops run plainly when the region does not fork
  auto region = [&] {
    CTX_OMP_IF(par, "omp for schedule(static)",
    for (int64_t bh = 0; bh < g.BH; ++bh) {
      if (!direct) pack_tiles_t(k + bh * KS * Dh, S, Dh, nkb, Dp, kt.data() + bh * g.Sp * Dp);
      rows_dp(v + bh * KS * Dh, S, Dh, Dp, vp.data() + bh * S * Dp);
    });
    // prel: the value term's weights of each query row, sum_j p_ij over qidx[i, j] = r [BR, Rq]
    Scratch<F> qbuf(BR * Dp), st(BR * BC), ot(BR * Dp), m(BR), l(BR), prel(rel.vrel ? BR * rel.Rq : 0);
    // row statistics (FlashStats), relative to the running max m like l: sum e log e, sum e * distance,
    // sum e over the sink keys (e = e^(logit - m))
    Scratch<F> s_ent(stats.rows ? BR : 0), s_dist(stats.rows ? BR : 0), s_sink(stats.rows ? BR : 0),
        s_logit(stats.rows ? BC : 0);  // the row's logits, before exp_sub_row overwrites them
    CTX_OMP_IF(par, "omp for schedule(dynamic, 1)",
    for (int64_t t = 0; t < ntask; ++t) {
      const int64_t qb = g.nqb - 1 - t / g.BH, bh = t % g.BH;  // longest blocks first
      const int64_t h = bh % H, i0 = qb * BR, rows = std::min(BR, T - i0);
      const F* qt = rows_dp(q + (bh * T + i0) * Dh, rows, Dh, Dp, qbuf.data());  // [rows, Dp]
      std::fill(ot.data(), ot.data() + rows * Dp, F(0));
      std::fill(m.data(), m.data() + rows, ninf);
      std::fill(l.data(), l.data() + rows, F(0));
      if (rel.vrel) std::fill(prel.data(), prel.data() + rows * rel.Rq, F(0));
      if (stats.rows)
        for (Scratch<F>* x : {&s_ent, &s_dist, &s_sink}) std::fill(x->data(), x->data() + rows, F(0));
      const F* qrel_bh = rel.qrel ? rel.qrel + bh * T * rel.Rq : nullptr;
      const F* krel_bh = rel.krel ? rel.krel + bh * S * rel.Rk : nullptr;
      const int64_t jlo = d.window > 0 ? std::max<int64_t>(0, i0 + g.off - d.window + 1) : 0;
      const int64_t jhi = std::min(S, i0 + rows + g.off);  // exclusive
      for (int64_t kb = jlo / BC; kb * BC < jhi; ++kb) {
        const int64_t j0 = kb * BC, nb = std::min(BC, S - j0);
        const F* vtile = Dh == Dp ? v + (bh * KS + j0) * Dp : vp.data() + (bh * S + j0) * Dp;  // [nb, Dp]
        auto seen = [&](int64_t m0, int64_t m1) { return cols_seen(i0, m0, m1, j0, nb, g, d.window); };
        if (direct) {  // s = q k^T over the visible columns, keys read in place ([nb, Dh] rows)
          const F* krows = k + (bh * KS + j0) * Dh;
          for (int64_t r = 0; r < rows; ++r) {
            const ColRange c = seen(r, r + 1);
            for (int64_t col = c.cl; col < c.ch; ++col) st[r * BC + col] = dot_n(qt + r * Dp, krows + col * Dh, Dh);
          }
        } else {
          const F* ktile = kt.data() + (bh * nkb + kb) * Dp * BC;  // [Dp, BC]
          tile_mm_p<F, false>(bf16, rows, BC, Dp, qt, Dp, 1, ktile, BC, st.data(), BC, [&](int64_t m0, int64_t m1) {
            const ColRange c = seen(m0, m1);
            return Span{c.cl, c.ch, 0, kAll};
          });  // s = q k^T
        }
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t i = i0 + r;
          F* srow = st.data() + r * BC;
          const ColRange cr = cols_seen(i0, r, r + 1, j0, nb, g, d.window);
          F mx = ninf;
          if (cr.cl < cr.ch) {
            if (rel.logit_terms())
              add_rel_row(srow, rel, qrel_bh, krel_bh, S, i, j0, cr, rel.qidx ? qconst[i * nkb + kb] : -1);
            mx = logits_row(srow, bias ? bias + (h * T + i) * S + j0 : nullptr, sc, cr);
          }
          if (!(mx > ninf)) {  // nothing visible here (or only -inf logits): p = 0
            std::fill(srow, srow + BC, F(0));
            continue;
          }
          const F mnew = std::max(m[r], mx);
          const F alpha = std::exp(m[r] - mnew);  // 0 on the first visible tile (m = -inf)
          if (stats.rows) std::copy(srow + cr.cl, srow + cr.ch, s_logit.data() + cr.cl);
          const F sum = exp_sub_row(srow, cr, mnew);
          if (stats.rows)
            stats_row(srow, s_logit.data(), cr, mnew, alpha, m[r] - mnew, l[r], i + g.off - j0, stats.sink_keys - j0,
                      s_ent[r], s_dist[r], s_sink[r]);
          l[r] = l[r] * alpha + sum;  // the normaliser sums the undropped p
          if (dropping) drop_row(srow, cr, d.dropout, (uint64_t)((bh * T + i) * S + j0));
          if (alpha != F(1)) {
            F* orow = ot.data() + r * Dp;
            const Vec<F> av = splat(alpha);
            for (int64_t c = 0; c < Dp; c += kW<F>) vstore(orow + c, vload(orow + c) * av);
            if (rel.vrel)
              for (int64_t x = 0; x < rel.Rq; ++x) prel[r * rel.Rq + x] *= alpha;
          }
          if (rel.vrel) bin_row(prel.data() + r * rel.Rq, srow, rel.qidx + i * S + j0, cr, qconst[i * nkb + kb]);
          m[r] = mnew;
        }
        tile_mm_p<F, true>(bf16, rows, Dp, nb, st.data(), BC, 1, vtile, Dp, ot.data(), Dp, [&](int64_t m0, int64_t m1) {
          const ColRange c = seen(m0, m1);
          return Span{0, kAll, c.cl, c.ch};
        });  // o += p v
      }
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = bh * T + i0 + r;
        F* orow = o + row * Dh;
        if (l[r] > F(0)) {
          const F inv = F(1) / l[r];
          if (rel.vrel) {  // o += prel vrel (unnormalised, like ot)
            F* orow_t = ot.data() + r * Dp;
            for (int64_t x = 0; x < rel.Rq; ++x) {
              const F w = prel[r * rel.Rq + x];
              if (w == F(0)) continue;
              const F* vr = rel.vrel + x * Dh;
              for (int64_t c = 0; c < Dh; ++c) orow_t[c] += w * vr[c];
            }
          }
          for (int64_t c = 0; c < Dh; ++c) orow[c] = ot[r * Dp + c] * inv;
          lse[row] = m[r] + std::log(l[r]);
          if (stats.rows) {  // -sum p log p = log l - (sum e log e) / l, with p = e / l
            F* sr = stats.rows + row * 3;
            sr[0] = std::log(l[r]) - s_ent[r] * inv, sr[1] = s_sink[r] * inv, sr[2] = s_dist[r] * inv;
          }
        } else {  // no visible key with a finite logit (cannot happen with the diagonal key)
          for (int64_t c = 0; c < Dh; ++c) orow[c] = F(0);
          lse[row] = std::numeric_limits<F>::infinity();
          if (stats.rows) std::fill(stats.rows + row * 3, stats.rows + row * 3 + 3, F(0));
        }
      }
    });
  };
  if (par) {
#pragma omp parallel
    region();
  } else {
    region();
  }
}

// ------------------------------------------------------------------------------ backward ----
template <class F>
void flash_attention_backward(const FlashAttnDims& d, const F* q, const F* k, const F* v,
                              const F* bias, const F* o, const F* lse, const F* dout, F* dq, F* dk,
                              F* dv, F* dbias, const FlashRel<F>& rel) {
  const Geom g(d);
  const bool bf16 = attention_bf16<F>();  // bf16 products (--precision bf16)
  const int64_t B = d.B, H = d.H, T = d.T, S = d.S, Dh = d.Dh, Dp = g.Dp, nkb = g.nkb;
  const int64_t KS = d.kv_stride();  // rows per (b, h) in k, v, dk, dv
  const int64_t HTS = H * T * S;
  if (dbias) std::fill(dbias, dbias + HTS, F(0));
  if (rel.vrel && rel.dvrel) std::fill(rel.dvrel, rel.dvrel + rel.Rq * Dh, F(0));
  if (g.BH == 0) return;
  if (T == 0) {
    if (rel.krel && rel.dkrel) std::fill(rel.dkrel, rel.dkrel + g.BH * S * rel.Rk, F(0));
    std::fill(dk, dk + g.BH * KS * Dh, F(0));
    std::fill(dv, dv + g.BH * KS * Dh, F(0));
    return;
  }
  if (KS != S) {  // rows S.. of each (b, h) are not keys: their gradient is 0
    std::fill(dk, dk + g.BH * KS * Dh, F(0));
    std::fill(dv, dv + g.BH * KS * Dh, F(0));
  }
  const F sc = (F)d.scale;
  const bool dropping = d.dropout.active();
  const int nt = threads_for(2 * g.work);  // the backward: about twice the forward's products
  const int64_t G = dbias ? std::min<int64_t>(B, ceil_div(nt, H)) : B;  // batch groups
  Scratch<F> extra(dbias && G > 1 ? (G - 1) * HTS : 0);
  if (dbias && G > 1) std::fill(extra.data(), extra.data() + (G - 1) * HTS, F(0));
  const int64_t nitems = H * G;
  const int64_t Rq = rel.Rq, Rk = rel.Rk;
  // dvrel: each work item sums prel^T do into its own [Rq, Dh] part, added up in item order
  // afterwards (deterministic whatever thread ran the item)
  const bool want_dvrel = rel.vrel && rel.dvrel;
  Scratch<F> dvrel_parts(want_dvrel ? nitems * Rq * Dh : 0);
  Scratch<int32_t> qconst(rel.qidx ? T * nkb : 0);  // as in the forward
  if (rel.qidx) const_index_rows(rel.qidx, g, T, S, d.window, qconst.data());
  const bool par = nitems > 1 && nt > 1;
  // the region body; its worksharing loops run plainly when the region does not fork
  auto region = [&] {
    Scratch<F> qp(g.Tp * Dp), dop(g.Tp * Dp), kp(g.Sp * Dp), ktt(g.Sp * Dp), vtt(g.Sp * Dp),
        dqa(g.Tp * Dp), dka(BC * Dp), dva(BC * Dp), p(BR * BC), ds(BR * BC), D(T);
    // the value term: G[i, r] = do_i . vrel[r] (its part of dp) and prel[i, r] = sum_j p_ij
    // over qidx[i, j] = r, recomputed here (both [T, Rq])
    Scratch<F> Gv(rel.vrel ? T * Rq : 0), prel(want_dvrel ? T * Rq : 0);
    CTX_OMP_IF(par, "omp for schedule(dynamic, 1)",
    for (int64_t it = 0; it < nitems; ++it) {
      const int64_t h = it / G, grp = it % G;
      F* db = !dbias ? nullptr : (grp == 0 ? dbias : extra.data() + (grp - 1) * HTS) + h * T * S;
      for (int64_t b = grp; b < B; b += G) {
        const int64_t bh = b * H + h;
        const F* qb_ = q + bh * T * Dh;
        const F* ob = o + bh * T * Dh;
        const F* gb = dout + bh * T * Dh;
        const F* lb = lse + bh * T;
        const F* qrel_bh = rel.qrel ? rel.qrel + bh * T * Rq : nullptr;
        const F* krel_bh = rel.krel ? rel.krel + bh * S * Rk : nullptr;
        F* dqrel_bh = rel.qrel && rel.dqrel ? rel.dqrel + bh * T * Rq : nullptr;
        F* dkrel_bh = rel.krel && rel.dkrel ? rel.dkrel + bh * S * Rk : nullptr;
        if (dqrel_bh) std::fill(dqrel_bh, dqrel_bh + T * Rq, F(0));
        if (dkrel_bh) std::fill(dkrel_bh, dkrel_bh + S * Rk, F(0));
        if (rel.vrel) {
          for (int64_t i = 0; i < T; ++i)
            for (int64_t x = 0; x < Rq; ++x) {
              F s = 0;
              for (int64_t c = 0; c < Dh; ++c) s += gb[i * Dh + c] * rel.vrel[x * Dh + c];
              Gv[i * Rq + x] = s;
            }
          if (want_dvrel) std::fill(prel.data(), prel.data() + T * Rq, F(0));
        }
        const F* qr = rows_dp(qb_, T, Dh, Dp, qp.data());              // [T, Dp]
        const F* gr = rows_dp(gb, T, Dh, Dp, dop.data());              // [T, Dp]
        const F* kr = rows_dp(k + bh * KS * Dh, S, Dh, Dp, kp.data());  // [S, Dp]
        pack_tiles_t(k + bh * KS * Dh, S, Dh, nkb, Dp, ktt.data());
        pack_tiles_t(v + bh * KS * Dh, S, Dh, nkb, Dp, vtt.data());
        for (int64_t i = 0; i < T; ++i) {  // D_i = do_i . o_i
          F s = 0;
          for (int64_t c = 0; c < Dh; ++c) s += gb[i * Dh + c] * ob[i * Dh + c];
          D[i] = s;
        }
        std::fill(dqa.data(), dqa.data() + g.Tp * Dp, F(0));
        for (int64_t kb = 0; kb < nkb; ++kb) {
          const int64_t j0 = kb * BC, nb = std::min(BC, S - j0);
          std::fill(dka.data(), dka.data() + BC * Dp, F(0));
          std::fill(dva.data(), dva.data() + BC * Dp, F(0));
          // queries that see a key of this tile: i + off >= j0, and i + off - window < j0 + nb - 1
          const int64_t ilo = std::max<int64_t>(0, j0 - g.off);
          const int64_t ihi = d.window > 0 ? std::min<int64_t>(T, j0 + nb - 1 - g.off + d.window) : T;
          const F* ktile = ktt.data() + kb * Dp * BC;
          const F* vtile = vtt.data() + kb * Dp * BC;
          for (int64_t qb = ilo / BR; qb * BR < ihi; ++qb) {
            const int64_t i0 = qb * BR, rows = std::min(BR, T - i0);
            const F* qt = qr + i0 * Dp;
            const F* gt = gr + i0 * Dp;
            // spans: C rows = queries (s, dp, dq) or keys (dv, dk); masked parts are skipped
            auto by_query = [&](bool cols_are_n) {
              return [&, cols_are_n](int64_t m0, int64_t m1) {
                const ColRange c = cols_seen(i0, m0, m1, j0, nb, g, d.window);
                return cols_are_n ? Span{c.cl, c.ch, 0, kAll} : Span{0, kAll, c.cl, c.ch};
              };
            };
            auto by_key = [&](int64_t m0, int64_t m1) {
              const ColRange r = rows_seeing(j0, m0, m1, i0, rows, g, d.window);
              return Span{0, kAll, r.cl, r.ch};
            };
            tile_mm_p<F, false>(bf16, rows, BC, Dp, qt, Dp, 1, ktile, BC, p.data(), BC, by_query(true));   // q k^T
            tile_mm_p<F, false>(bf16, rows, BC, Dp, gt, Dp, 1, vtile, BC, ds.data(), BC, by_query(true));  // dp = do v^T
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t i = i0 + r;
              F* prow = p.data() + r * BC;
              F* drow = ds.data() + r * BC;
              const ColRange cr = cols_seen(i0, r, r + 1, j0, nb, g, d.window);
              const F L = lb[i];
              if (cr.cl >= cr.ch || !std::isfinite(L)) {
                std::fill(prow, prow + BC, F(0));
                std::fill(drow, drow + BC, F(0));
                continue;
              }
              const F* brow = bias ? bias + (h * T + i) * S + j0 : nullptr;
              const int32_t qc = rel.qidx ? qconst[i * nkb + kb] : -1;
              if (rel.logit_terms()) add_rel_row(prow, rel, qrel_bh, krel_bh, S, i, j0, cr, qc);
              logits_row(prow, brow, sc, cr);
              exp_sub_row(prow, cr, L);  // p = e^(s - lse)
              if (rel.vrel) {  // dp_ij += do_i . vrel[qidx[i, j]]
                const int32_t* ix = rel.qidx + i * S + j0;
                const F* gv = Gv.data() + i * Rq;
                if (qc >= 0) {
                  const F a = gv[qc];
                  _Pragma("omp simd")
                  for (int64_t c = cr.cl; c < cr.ch; ++c) drow[c] += a;
                } else {
                  for (int64_t c = cr.cl; c < cr.ch; ++c) drow[c] += gv[ix[c]];
                }
              }
              const F Di = D[i];  // ds = p (dp - D) where visible, else 0 (dp is not computed there)
              std::fill(drow, drow + cr.cl, F(0));
              if (dropping) {  // dp above is d/d(p z): ds = p (z dp - D); dv and prel take p z
                const uint64_t base = (uint64_t)((bh * T + i) * S + j0);
                uint32_t u[BC];  // the draws of columns [cl, ch)
                if (cr.ch > cr.cl) dropout_draws(d.dropout, base + (uint64_t)cr.cl, cr.ch - cr.cl, u);
                const F zs = (F)d.dropout.scale;
                const uint32_t thr = d.dropout.threshold;
                _Pragma("omp simd")
                for (int64_t c = cr.cl; c < cr.ch; ++c) {
                  const F z = u[c - cr.cl] >= thr ? zs : F(0);
                  drow[c] = prow[c] * (z * drow[c] - Di);
                  prow[c] *= z;
                }
              } else {
                _Pragma("omp simd")
                for (int64_t c = cr.cl; c < cr.ch; ++c) drow[c] = prow[c] * (drow[c] - Di);
              }
              std::fill(drow + cr.ch, drow + BC, F(0));
              if (want_dvrel) bin_row(prel.data() + i * Rq, prow, rel.qidx + i * S + j0, cr, qc);
              if (dqrel_bh) {  // dqrel[i, qidx[i, j]] += scale ds_ij
                const int32_t* ix = rel.qidx + i * S + j0;
                F* dqr = dqrel_bh + i * Rq;
                if (qc >= 0) {
                  F sum = 0;
                  _Pragma("omp simd reduction(+ : sum)")
                  for (int64_t c = cr.cl; c < cr.ch; ++c) sum += drow[c];
                  dqr[qc] += sc * sum;
                } else {
                  for (int64_t c = cr.cl; c < cr.ch; ++c) dqr[ix[c]] += sc * drow[c];
                }
              }
              if (dkrel_bh) {  // dkrel[j, kidx[i, j]] += scale ds_ij
                const int32_t* ix = rel.kidx + i * S + j0;
                F* dkr = dkrel_bh + j0 * Rk;
                for (int64_t c = cr.cl; c < cr.ch; ++c) dkr[c * Rk + ix[c]] += sc * drow[c];
              }
              if (db) {
                F* dbr = db + i * S + j0;
                _Pragma("omp simd")
                for (int64_t c = cr.cl; c < cr.ch; ++c) dbr[c] += drow[c];
              }
            }
            tile_mm_p<F, true>(bf16, nb, Dp, rows, p.data(), 1, BC, gt, Dp, dva.data(), Dp, by_key);   // dv += p^T do
            tile_mm_p<F, true>(bf16, nb, Dp, rows, ds.data(), 1, BC, qt, Dp, dka.data(), Dp, by_key);  // dk += ds^T q
            tile_mm_p<F, true>(bf16, rows, Dp, nb, ds.data(), BC, 1, kr + j0 * Dp, Dp, dqa.data() + i0 * Dp, Dp,
                               by_query(false));                                                   // dq += ds k
          }
          F* dkb = dk + (bh * KS + j0) * Dh;
          F* dvb = dv + (bh * KS + j0) * Dh;
          for (int64_t r = 0; r < nb; ++r)
            for (int64_t c = 0; c < Dh; ++c) {
              dkb[r * Dh + c] = sc * dka[r * Dp + c];
              dvb[r * Dh + c] = dva[r * Dp + c];
            }
        }
        F* dqb = dq + bh * T * Dh;
        for (int64_t i = 0; i < T; ++i)
          for (int64_t c = 0; c < Dh; ++c) dqb[i * Dh + c] = sc * dqa[i * Dp + c];
        if (want_dvrel) {  // dvrel += prel^T do
          F* part = dvrel_parts.data() + it * Rq * Dh;
          if (b == grp) std::fill(part, part + Rq * Dh, F(0));
          for (int64_t i = 0; i < T; ++i)
            for (int64_t x = 0; x < Rq; ++x) {
              const F w = prel[i * Rq + x];
              if (w == F(0)) continue;
              for (int64_t c = 0; c < Dh; ++c) part[x * Dh + c] += w * gb[i * Dh + c];
            }
        }
      }
    });
  };
  if (par) {
#pragma omp parallel
    region();
  } else {
    region();
  }
  if (want_dvrel) {
    std::fill(rel.dvrel, rel.dvrel + Rq * Dh, F(0));
    for (int64_t it = 0; it < nitems; ++it)
      for (int64_t x = 0; x < Rq * Dh; ++x) rel.dvrel[x] += dvrel_parts[it * Rq * Dh + x];
  }
  if (G > 1 && dbias) {
    CTX_OMP_IF(parallel_pays(HTS), "omp parallel for schedule(static)",
    for (int64_t x = 0; x < HTS; ++x)
      for (int64_t grp = 1; grp < G; ++grp) dbias[x] += extra[(grp - 1) * HTS + x];);
  }
}

template void flash_attention_forward<float>(const FlashAttnDims&, const float*, const float*,
                                             const float*, const float*, float*, float*,
                                             const FlashRel<float>&, const FlashStats<float>&);
template void flash_attention_forward<double>(const FlashAttnDims&, const double*, const double*,
                                              const double*, const double*, double*, double*,
                                              const FlashRel<double>&, const FlashStats<double>&);
template void flash_attention_backward<float>(const FlashAttnDims&, const float*, const float*,
                                              const float*, const float*, const float*,
                                              const float*, const float*, float*, float*, float*,
                                              float*, const FlashRel<float>&);
template void flash_attention_backward<double>(const FlashAttnDims&, const double*, const double*,
                                               const double*, const double*, const double*,
                                               const double*, const double*, double*, double*,
                                               double*, double*, const FlashRel<double>&);

}  // namespace ctx::cpu
