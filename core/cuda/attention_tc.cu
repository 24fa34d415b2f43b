// core/cuda/attention_tc.cu — tensor-core FlashAttention-2 (Dao, 2023) for the CUDA backend:
// bf16 products on mma.sync m16n8k16 with fp32 accumulation, operands staged by cp.async (double
// buffered) and read by ldmatrix (core/cuda/mma.cuh). Per (b, h):
//   forward   a block = 64 queries (4 warps x 16 rows; or 128 = 4 x 32 for D <= 64 with
//             CTXLAB_TC_FORWARD_ROWS=128; Q fragments in registers); key tiles of 64
//             stream through shared memory, the next one in flight while the current is used;
//             S = Q K^T (16 x 64 per warp), online softmax (running max m, the lane's partial row
//             sums l; the 4 lanes of a row combine by xor shuffles), O = O e^(m - m') + P V with P
//             rounded to bf16 in registers (the S accumulator is P's A fragment); out = O / l,
//             lse = m + ln l (+inf and out 0 for a query that sees no key)
//   backward  by recomputation, without atomics: D_i = dO_i . O_i (attention_row_dot), then
//             dK/dV   a block = 64 keys (4 warps x 16 keys); query tiles stream: S^T = K Q^T,
//                     P^T = e^(scale S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D),
//                     dV += P^T dO, dK += dS^T Q; dK scaled at the end
//             dQ      a block = 64 queries; key tiles stream: S, P, dP = dO V^T, dS, dQ += dS K
//             The separate dQ pass recomputes S and P (7 tile products instead of FlashAttention-2's
//             5) so that dQ needs no atomicAdd: each dQ row is owned by one warp, every sum has a
//             fixed order, results are bitwise the same run to run and under every thread schedule.
//             Opt-in (CTXLAB_TC_BACKWARD_ROWS=128): blocks of 128 keys / queries, 32 a warp, the
//             other side in tiles of 32, the warp's K / V (Q / dO) fragments read from shared memory
//             each k-step (tc_dkdv_wide_kernel for D <= 64, tc_dq_wide_kernel); the same sums in
//             the same order, the same bits.
// Distance-table bias (AttnRel::dist_bias, template BIAS): logit += tab[h, i + off - j] read per
// element in the tile loop (global / L1); its gradient from the dQ pass's dS tiles summed along
// their diagonals (DiagSums) into per-block partials, then summed over the batch and the blocks in
// a fixed order (dist_grad_kernel): no atomics either.
// Masks by tile skipping: a block visits only the tiles its rows can see (causal: keys up to the
// block's last query; window: from the block's first query's oldest key), elements outside
// masked to -inf (P = 0). Shared tiles are [64, D + 8] b16: rows 16-byte aligned for cp.async and
// ldmatrix, and an ldmatrix's 8 rows 16 bytes apart modulo 128 (distinct bank groups).
// Inputs in bf16: the copies the caller keeps with the tensors (TcBf16Inputs: written by the kernels
// that produce q, k, v and dout, or converted once and kept from the forward to the backward),
// else one conversion pass each (f32_to_bf16). Fragment layouts: core/cuda/mma.cuh.
// Exact arithmetic (CTX_CUDA_EXACT_FP in CMakeLists.txt: -fmad=false, -ffp-contract=off): the block
// shapes are held bit-equal, so no a*b+c is left for the compiler to fuse in one instantiation and
// not another; every fma is written __fmaf_rn (docs/cuda.md, scripts/check_fp_contract.sh).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/cuda/attention.h"  // attention_row_dot
#include "core/cuda/attention_tc.h"
#include "core/cuda/check.h"
#include "core/cuda/cuda_runtime.h"  // f32_to_bf16
#include "core/cuda/kernels.h"       // fill
#include "core/cuda/launch.h"
#include "core/cuda/shared_opt_in.h"  // allow_shared
#include "core/cuda/mma.cuh"
#include "core/error.h"
#include "core/settings.h"

namespace ctx::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kBlockRows = 16 * kWarps;  // queries (forward, dQ) or keys (dK/dV) per block
constexpr int kTileRows = 64;            // rows of a streamed tile (keys, or queries)
constexpr int kBlock = 32 * kWarps;
constexpr unsigned kFull = 0xffffffffu;
std::atomic<uint64_t> g_tc_wide_dkdv{0}, g_tc_wide_dq{0};  // launches of the wide backward kernels

using bf16 = uint16_t;  // bf16 bits

// a shared tile [64, D + 8] b16
template <int D>
struct Tile {
  static constexpr int ld = D + 8;
  static constexpr int elems = kTileRows * ld;
};

struct Geo {
  int64_t T, S, off, window;  // off = S - T: query i sits at key position i + off
  float scale;
  // the distance table (AttnRel::dist_bias) [H, dist_n] f32, or null; per (b, h) its row h = bh % H
  const float* dist;
  int64_t dist_n, H;
};

__host__ __device__ inline int64_t lmin(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t lmax(int64_t a, int64_t b) { return a < b ? b : a; }

__device__ inline bool sees(const Geo& g, int64_t i, int64_t j) {
  return i < g.T && j < g.S && j <= i + g.off && (g.window <= 0 || j > i + g.off - g.window);
}
// whether every query of [i_lo, i_hi] sees every key of [j_lo, j_hi]: such a tile needs no mask.
// j_hi <= i_lo + off implies j_hi < S for a real query; rows past T are never written (forward)
// or have lse = +inf, so p = 0 (backward), whatever the mask.
__device__ inline bool sees_all(const Geo& g, int64_t i_lo, int64_t i_hi, int64_t j_lo, int64_t j_hi) {
  return j_hi <= i_lo + g.off && (g.window <= 0 || j_lo > i_hi + g.off - g.window);
}
constexpr float kLog2e = 1.4426950408889634f;  // e^x = 2^(x log2 e): ex2 is the hardware's exponential
constexpr float kLn2 = 0.6931471805599453f;

// The head's row of the distance table (BIAS kernels), else null.
template <bool BIAS>
__device__ inline const float* dist_row(const Geo& g, int64_t bh) {
  return BIAS ? g.dist + (bh % g.H) * g.dist_n : nullptr;
}
// The distance-table bias of query i and key j in log2 units: log2e tab[i + off - j] (0 without
// BIAS). Read where the query sees the key, or anywhere in a tile seen in full, where a row past
// T would reach past the table (its result is unused): the distance is clamped into the table.
template <bool BIAS>
__device__ inline float bias2(const Geo& g, const float* tab, int64_t i, int64_t j) {
  if constexpr (BIAS) return kLog2e * tab[lmax(0, lmin(i + g.off - j, g.dist_n - 1))];
  else return 0.0f;
}
// the tiles [*t0, *t1) of `tile` keys that queries [i0, i0 + rows) can see
__device__ inline void key_tiles(const Geo& g, int64_t i0, int64_t* t0, int64_t* t1, int rows = kBlockRows,
                                 int tile = kTileRows) {
  const int64_t hi = lmin(g.S, lmin(i0 + rows, g.T) - 1 + g.off + 1);
  const int64_t lo = g.window > 0 ? lmax(0, i0 + g.off - g.window + 1) : 0;
  *t0 = lo / tile;
  *t1 = hi > lo ? (hi + tile - 1) / tile : *t0;
}
// the tiles of `tile` queries that see a key of [j0, j0 + rows)
__device__ inline void query_tiles(const Geo& g, int64_t j0, int64_t* t0, int64_t* t1, int rows = kBlockRows,
                                   int tile = kTileRows) {
  const int64_t jl = lmin(g.S, j0 + rows) - 1;
  const int64_t lo = lmax(0, j0 - g.off);
  const int64_t hi = g.window > 0 ? lmin(g.T, jl - g.off + g.window) : g.T;
  *t0 = lo / tile;
  *t1 = hi > lo ? (hi + tile - 1) / tile : *t0;
}

// A query block's first row, the last blocks first: under the causal mask a block's work grows with
// its rows, and the blocks launched last should be the short ones (no long tail at the end of the
// grid). Only the order changes: each block's result is its own.
__device__ inline int64_t heavy_first_rows(int rows = kBlockRows) {
  return (int64_t)(gridDim.x - 1 - blockIdx.x) * rows;
}

__device__ inline float group_max(float x) {  // over the 4 lanes of a fragment row (same bits in each)
  x = fmaxf(x, __shfl_xor_sync(kFull, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFull, x, 2));
}
__device__ inline float group_sum(float x) {
  x += __shfl_xor_sync(kFull, x, 1);
  return x + __shfl_xor_sync(kFull, x, 2);
}

// rows [r0, r0 + ROWS) of x [.., D] into the tile sm by cp.async; rows from `valid` on are zeros
template <int D, int ROWS = kTileRows>
__device__ void load_tile(tc::AsyncCopies& cp, const bf16* x, int64_t r0, int64_t valid, bf16* sm) {
  constexpr int chunks = D / 8;  // 16-byte pieces of a row
CTX_UNROLL
  for (int e = threadIdx.x; e < ROWS * chunks; e += kBlock) {
    const int r = e / chunks, c = e % chunks;
    bf16* dst = sm + r * Tile<D>::ld + c * 8;
    if (r < valid)
      cp.copy<16, true>(dst, x + (r0 + r) * D + c * 8);
    else
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
  }
}

// A fragments of rows [r0, r0 + 16) x [0, D) of a tile: a[kk] covers columns 16 kk.. (ldmatrix x4:
// matrices rows +0 / +8 x columns +0 / +8 in the order a0..a3 of the mma)
template <int D>
__device__ void load_a(uint32_t (&a)[D / 16][4], const bf16* sm, int r0) {
  const int l = threadIdx.x % 32, m = l / 8;
  const bf16* row = sm + (r0 + l % 8 + 8 * (m % 2)) * Tile<D>::ld + 8 * (m / 2);
CTX_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) tc::ldmatrix<4, false>(a[kk], row + 16 * kk);
}

// acc[mt] [16, 64] = A[mt] [16, D] X^T for the tile X [64, D], mt < MT m-tiles of 16 rows (B = X^T:
// ldmatrix without .trans; x4 = two 8-row n-blocks of one 16-column k-step; each B fragment
// loaded once feeds the MT m-tiles: 2 MT mma an ldmatrix)
template <int D, int MT>
__device__ void mma_abt(float (&acc)[MT][8][4], const uint32_t (&a)[MT][D / 16][4], const bf16* sm) {
  const int l = threadIdx.x % 32, m = l / 8;
CTX_UNROLL
  for (int mt = 0; mt < MT; ++mt)
CTX_UNROLL
    for (int nb = 0; nb < 8; ++nb)
CTX_UNROLL
      for (int e = 0; e < 4; ++e) acc[mt][nb][e] = 0.0f;
CTX_UNROLL
  for (int np = 0; np < 4; ++np) {
    const bf16* row = sm + (16 * np + 8 * (m / 2) + l % 8) * Tile<D>::ld + 8 * (m % 2);
CTX_UNROLL
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t b[4];
      tc::ldmatrix<4, false>(b, row + 16 * kk);
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
CTX_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        tc::mma_16816(acc[mt][2 * np], a[mt][kk], b0, acc[mt][2 * np]);
        tc::mma_16816(acc[mt][2 * np + 1], a[mt][kk], b1, acc[mt][2 * np + 1]);
      }
    }
  }
}

// acc[mt] [16, 8 NB] = A[mt] [16, D] X^T for the tile X [8 NB, D], with the A fragments read from
// shared memory at each k-step (rows a0 + 16 mt of the tile As) instead of held in registers: the
// backward's 32-row warps have no registers to keep them (each A fragment feeds NB mma, each B
// fragment 2 MT)
template <int D, int MT, int NB>
__device__ void mma_abt_sm(float (&acc)[MT][NB][4], const bf16* As, int a0, const bf16* sm) {
  const int l = threadIdx.x % 32, m = l / 8;
CTX_UNROLL
  for (int mt = 0; mt < MT; ++mt)
CTX_UNROLL
    for (int nb = 0; nb < NB; ++nb)
CTX_UNROLL
      for (int e = 0; e < 4; ++e) acc[mt][nb][e] = 0.0f;
  const bf16* arow = As + (a0 + l % 8 + 8 * (m % 2)) * Tile<D>::ld + 8 * (m / 2);  // as load_a
CTX_UNROLL
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[MT][4];
CTX_UNROLL
    for (int mt = 0; mt < MT; ++mt) tc::ldmatrix<4, false>(a[mt], arow + 16 * mt * Tile<D>::ld + 16 * kk);
CTX_UNROLL
    for (int np = 0; np < NB / 2; ++np) {
      uint32_t b[4];
      tc::ldmatrix<4, false>(b, sm + (16 * np + 8 * (m / 2) + l % 8) * Tile<D>::ld + 8 * (m % 2) + 16 * kk);
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
CTX_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        tc::mma_16816(acc[mt][2 * np], a[mt], b0, acc[mt][2 * np]);
        tc::mma_16816(acc[mt][2 * np + 1], a[mt], b1, acc[mt][2 * np + 1]);
      }
    }
  }
}

// acc[mt] [16, D] += P[mt] [16, 8 NB] Y for the tile Y [8 NB, D] (NB = 8: 64 rows, 4: 32): P from a
// [16, 8 NB] accumulator rounded to bf16 (its C layout is the A layout of NB / 2 k-steps), B = Y by
// ldmatrix .trans, each B fragment feeding the MT m-tiles (2 MT mma an ldmatrix)
template <int D, int MT, int NB = 8>
__device__ void mma_py(float (&acc)[MT][D / 8][4], const float (&p)[MT][NB][4], const bf16* sm) {
  const int l = threadIdx.x % 32, m = l / 8;
CTX_UNROLL
  for (int kt = 0; kt < NB / 2; ++kt) {
    uint32_t a[MT][4];
CTX_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      const float(&q)[NB][4] = p[mt];
      a[mt][0] = tc::pack_bf16(q[2 * kt][0], q[2 * kt][1]), a[mt][1] = tc::pack_bf16(q[2 * kt][2], q[2 * kt][3]);
      a[mt][2] = tc::pack_bf16(q[2 * kt + 1][0], q[2 * kt + 1][1]);
      a[mt][3] = tc::pack_bf16(q[2 * kt + 1][2], q[2 * kt + 1][3]);
    }
    const bf16* row = sm + (16 * kt + 8 * (m % 2) + l % 8) * Tile<D>::ld + 8 * (m / 2);
CTX_UNROLL
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];
      tc::ldmatrix<4, true>(b, row + 16 * dp);
      const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
CTX_UNROLL
      for (int mt = 0; mt < MT; ++mt) {
        tc::mma_16816(acc[mt][2 * dp], a[mt], b0, acc[mt][2 * dp]);
        tc::mma_16816(acc[mt][2 * dp + 1], a[mt], b1, acc[mt][2 * dp + 1]);
      }
    }
  }
}

// Element (nb, e) of a warp's [16, 64] accumulator: row r0 + g + 8 (e / 2), column c0 + 8 nb + 2t + e % 2.
__device__ inline int64_t acc_row(int64_t r0, int e) { return r0 + (threadIdx.x % 32) / 4 + 8 * (e / 2); }
__device__ inline int64_t acc_col(int64_t c0, int nb, int e) { return c0 + 8 * nb + 2 * (threadIdx.x % 4) + e % 2; }

// One key tile of the forward's online softmax for the warp's rows from i0: s (scores against keys
// from j0) becomes p = 2^(scale log2e s - m') (0 where masked; m is kept in log2 units); m, the
// partial sums l and o rescaled. `full`: the warp's rows see every key of the tile (no mask).
template <int D, bool BIAS>
__device__ void softmax_tile(const Geo& g, const float* tab, int64_t i0, int64_t j0, bool full, float (&s)[8][4],
                             float (&m)[2], float (&l)[2], float (&o)[D / 8][4]) {
  const float c = g.scale * kLog2e;
CTX_UNROLL
  for (int h = 0; h < 2; ++h) {
    float mx = m[h];
CTX_UNROLL
    for (int nb = 0; nb < 8; ++nb)
CTX_UNROLL
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        const int64_t i = acc_row(i0, e), j = acc_col(j0, nb, e);
        s[nb][e] = full || sees(g, i, j) ? __fmaf_rn(c, s[nb][e], bias2<BIAS>(g, tab, i, j)) : -INFINITY;
        mx = fmaxf(mx, s[nb][e]);
      }
    mx = group_max(mx);
    const bool none = mx == -INFINITY;  // no key seen yet: p = 0, nothing to rescale
    const float alpha = none ? 1.0f : exp2f(m[h] - mx);
    float sum = 0.0f;
CTX_UNROLL
    for (int nb = 0; nb < 8; ++nb)
CTX_UNROLL
      for (int e = 2 * h; e < 2 * h + 2; ++e) {
        s[nb][e] = none ? 0.0f : exp2f(s[nb][e] - mx);
        sum += s[nb][e];
      }
    l[h] = __fmaf_rn(l[h], alpha, sum);
CTX_UNROLL
    for (int nb = 0; nb < D / 8; ++nb) o[nb][2 * h] *= alpha, o[nb][2 * h + 1] *= alpha;
    m[h] = mx;
  }
}

// ------------------------------------------------------------------------------- forward ----
// A block = 4 warps of MT m-tiles (16 MT query rows each). MT = 1 is what ran on an H200 (the
// default); MT = 2 (32 rows a warp, as FlashAttention-2 has it for head dims up to 64: each K / V
// fragment read from shared memory feeds twice the mma, at 255 registers with a few spilled for
// D = 64 against 160) waits for a GPU to time it (CTXLAB_TC_FORWARD_ROWS=128, tc_forward_rows);
// D = 128 always takes MT = 1 (its accumulators would not fit twice).
// grid (ceil(T / R), B H) with R = 64 MT queries a block; block 128; shared Q [R, D + 8] + 2 K + 2 V
// tiles. q [B, H, T, D], k, v [B, H, S, D] bf16; out [B, H, T, D], lse [B, H, T] f32.
template <int D, int MT, bool BIAS>
__global__ void __launch_bounds__(kBlock) tc_forward_kernel(Geo g, const bf16* q, const bf16* k, const bf16* v,
                                                           float* out, float* lse) {
  constexpr int R = kWarps * 16 * MT;
  CTX_DYNAMIC_SHARED(bf16, sm);
  constexpr int E = Tile<D>::elems, EQ = R * Tile<D>::ld;
  bf16 *Qs = sm, *Ks = sm + EQ, *Vs = sm + EQ + 2 * E;  // K, V: two buffers each
  const int w = threadIdx.x / 32;
  const int64_t bh = blockIdx.y, i0 = heavy_first_rows(R), r0 = i0 + 16 * MT * w;  // the warp's rows from r0
  const bf16 *kb = k + bh * g.S * D, *vb = v + bh * g.S * D;
  const float* tab = dist_row<BIAS>(g, bh);
  int64_t t0, t1;
  key_tiles(g, i0, &t0, &t1, R);
  tc::AsyncCopies cp;
  load_tile<D, R>(cp, q + bh * g.T * D, i0, g.T - i0, Qs);
  if (t0 < t1) {
    load_tile<D>(cp, kb, t0 * kTileRows, g.S - t0 * kTileRows, Ks);
    load_tile<D>(cp, vb, t0 * kTileRows, g.S - t0 * kTileRows, Vs);
  }
  cp.commit();
  float o[MT][D / 8][4] = {}, m[MT][2], l[MT][2];
CTX_UNROLL
  for (int mt = 0; mt < MT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;
  uint32_t qa[MT][D / 16][4];
  for (int64_t tt = t0; tt < t1; ++tt) {
    const int buf = (int)((tt - t0) & 1);
    if (tt + 1 < t1) {  // the next tile into the other buffer (free since the last barrier)
      const int64_t j1 = (tt + 1) * kTileRows;
      load_tile<D>(cp, kb, j1, g.S - j1, Ks + (buf ^ 1) * E);
      load_tile<D>(cp, vb, j1, g.S - j1, Vs + (buf ^ 1) * E);
      cp.commit();
      cp.wait<1>();
    } else {
      cp.wait<0>();
    }
    __syncthreads();  // every thread's copies of this tile have landed
    if (tt == t0)
CTX_UNROLL
      for (int mt = 0; mt < MT; ++mt) load_a<D>(qa[mt], Qs, 16 * (MT * w + mt));
    float s[MT][8][4];
    mma_abt<D, MT>(s, qa, Ks + buf * E);
    const int64_t j0 = tt * kTileRows;
CTX_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      const int64_t rm = r0 + 16 * mt;
      softmax_tile<D, BIAS>(g, tab, rm, j0, sees_all(g, rm, rm + 15, j0, j0 + kTileRows - 1), s[mt], m[mt], l[mt],
                            o[mt]);
    }
    mma_py<D, MT>(o, s, Vs + buf * E);
    __syncthreads();  // the buffer is read by every warp before it is refilled
  }
  cp.wait_all();  // (no key tile: the Q copies)
CTX_UNROLL
  for (int mt = 0; mt < MT; ++mt)
CTX_UNROLL
    for (int h = 0; h < 2; ++h) {
      const float sum = group_sum(l[mt][h]);
      const int64_t i = acc_row(r0 + 16 * mt, 2 * h);
      if (i >= g.T) continue;
      const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
CTX_UNROLL
      for (int nb = 0; nb < D / 8; ++nb) {
        const int64_t c = acc_col(0, nb, 0);
        out[(bh * g.T + i) * D + c] = o[mt][nb][2 * h] * inv;
        out[(bh * g.T + i) * D + c + 1] = o[mt][nb][2 * h + 1] * inv;
      }
      if (threadIdx.x % 4 == 0) lse[bh * g.T + i] = sum > 0.0f ? __fmaf_rn(m[mt][h], kLn2, logf(sum)) : INFINITY;
    }
}

// ------------------------------------------------------------------------------ backward ----
// p = e^(scale s - lse) = 2^(scale log2e s - lse log2e) where the query sees the key (else 0),
// then ds = p (dp - D); s becomes p, dp becomes ds. Element (nb, e): query, key and the row
// statistics given by `at`. `full`: every element of the tile is seen (no mask).
template <bool BIAS, int NB = 8, class At>
__device__ void grad_tile(const Geo& g, const float* tab, bool full, float (&s)[NB][4], float (&dp)[NB][4], At at) {
  const float c = g.scale * kLog2e;
CTX_UNROLL
  for (int nb = 0; nb < NB; ++nb)
CTX_UNROLL
    for (int e = 0; e < 4; ++e) {
      int64_t i, j;
      float L, Di;
      at(nb, e, &i, &j, &L, &Di);
      const float nl = L * -kLog2e;  // -lse in log2 units (a negated product: no 0 - x to compute)
      const float x = BIAS ? bias2<BIAS>(g, tab, i, j) + nl : nl;
      const float p = full || sees(g, i, j) ? exp2f(__fmaf_rn(c, s[nb][e], x)) : 0.0f;
      s[nb][e] = p;
      dp[nb][e] = p * (dp[nb][e] - Di);
    }
}

// The distance-table gradient of a dQ block (BIAS): its [64, 64] dS tiles (dS = dL/dlogit) summed
// along their diagonals, one distance r = i + off - j each, into the block's row of partial sums.
// Thread u < 64 owns two diagonals of every tile: the low one, a - c = u - 63 (local query row a,
// key column c), at r = base - 63 + u, and the high one, a - c = u + 1, at r = base + 1 + u
// (base = i0 + off - j0). Tiles stream with j0 up by 64, so the high diagonal of a tile has the
// distance of the previous tile's low one: the thread adds the two (previous first) and writes
// the sum once. Every distance a block reaches is written exactly once, by one thread, in a fixed
// order: no atomics, the same bits under every schedule.
struct DiagSums {
  float pend = 0.0f;  // the last tile's low diagonal, not yet written
  int64_t pend_r = -1;
  // the tile from key j0 whose dS is in Ps [64, 65] (after a barrier); `first`: the block's first
  // tile; u: the thread's diagonals (threads from 64 on have none)
  __device__ void tile(const Geo& g, const float* Ps, int64_t i0, int64_t j0, bool first, float* part, int u) {
    if (u >= kTileRows) return;
    float lo = 0.0f, hi = 0.0f;
    constexpr int ld = kTileRows + 1, top = kTileRows - 1;  // Ps row stride; the lowest diagonal is a - c = -top
    for (int a = 0; a <= u; ++a) lo += Ps[a * ld + a + top - u];
    for (int a = u + 1; a < kTileRows; ++a) hi += Ps[a * ld + a - u - 1];
    const int64_t base = i0 + g.off - j0;
    put(g, base + 1 + u, first ? hi : pend + hi, part);
    pend = lo, pend_r = base - top + u;
  }
  __device__ void finish(const Geo& g, float* part, int u) {
    if (u < kTileRows && pend_r >= 0) put(g, pend_r, pend, part);
  }
  __device__ static void put(const Geo& g, int64_t r, float x, float* part) {
    if (r >= 0 && r < g.S) part[r] = x;
  }
};

// A dQ block's row of the distance partials (DiagSums) for queries from i0 and its 64-key tiles
// [t0, t1): zeros where those tiles reach no distance, beyond the first tile's (window) or below
// the last's; DiagSums writes the rest. Every thread of the block takes part.
__device__ inline void zero_unreached(const Geo& g, int64_t i0, int64_t t0, int64_t t1, float* part) {
  const int64_t hi = i0 + g.off - t0 * kTileRows + kTileRows, lo = i0 + g.off - t1 * kTileRows + 1;
  for (int64_t r = threadIdx.x; r < g.S; r += kBlock)
    if (t0 >= t1 || r > hi || r < lo) part[r] = 0.0f;
}

// dq [B, H, T, D] f32. grid (ceil(T / 64), B H); shared Q, dO + 2 K + 2 V tiles (BIAS: then dS
// [64, 65] f32). BIAS with part (null: the table's gradient is not wanted): also part
// [B H, ceil(T / 64), S] f32, the block's per-distance sums of dS (DiagSums; the distances the
// block does not reach are written 0), reduced by dist_grad_kernel.
template <int D, bool BIAS>
__global__ void __launch_bounds__(kBlock) tc_dq_kernel(Geo g, const bf16* q, const bf16* k, const bf16* v,
                                                      const bf16* dout, const float* lse, const float* Dd,
                                                      float* dq, float* part) {
  CTX_DYNAMIC_SHARED(bf16, sm);
  constexpr int E = Tile<D>::elems;
  bf16 *Qs = sm, *Gs = sm + E, *Ks = sm + 2 * E, *Vs = sm + 4 * E;
  float* Ps = reinterpret_cast<float*>(sm + 6 * E);  // BIAS: dS [64, 65]
  const int w = threadIdx.x / 32;
  const int64_t bh = blockIdx.y, i0 = heavy_first_rows(), r0 = i0 + 16 * w;
  const bf16 *kb = k + bh * g.S * D, *vb = v + bh * g.S * D;
  const float* tab = dist_row<BIAS>(g, bh);
  int64_t t0, t1;
  key_tiles(g, i0, &t0, &t1);
  DiagSums diag;
  const bool sums = BIAS && part;  // the table's gradient is wanted
  if (sums) {
    part += (bh * gridDim.x + i0 / kBlockRows) * g.S;
    zero_unreached(g, i0, t0, t1, part);
  }
  tc::AsyncCopies cp;
  load_tile<D>(cp, q + bh * g.T * D, i0, g.T - i0, Qs);
  load_tile<D>(cp, dout + bh * g.T * D, i0, g.T - i0, Gs);
  if (t0 < t1) {
    load_tile<D>(cp, kb, t0 * kTileRows, g.S - t0 * kTileRows, Ks);
    load_tile<D>(cp, vb, t0 * kTileRows, g.S - t0 * kTileRows, Vs);
  }
  cp.commit();
  float L[2], Di[2];  // lse and D of the lane's two rows
CTX_UNROLL
  for (int h = 0; h < 2; ++h) {
    const int64_t i = acc_row(r0, 2 * h);
    L[h] = i < g.T ? lse[bh * g.T + i] : INFINITY;
    Di[h] = i < g.T ? Dd[bh * g.T + i] : 0.0f;
  }
  float acc[1][D / 8][4] = {};
  uint32_t qa[1][D / 16][4], ga[1][D / 16][4];
  for (int64_t tt = t0; tt < t1; ++tt) {
    const int buf = (int)((tt - t0) & 1);
    if (tt + 1 < t1) {
      const int64_t j1 = (tt + 1) * kTileRows;
      load_tile<D>(cp, kb, j1, g.S - j1, Ks + (buf ^ 1) * E);
      load_tile<D>(cp, vb, j1, g.S - j1, Vs + (buf ^ 1) * E);
      cp.commit();
      cp.wait<1>();
    } else {
      cp.wait<0>();
    }
    __syncthreads();
    if (tt == t0) load_a<D>(qa[0], Qs, 16 * w), load_a<D>(ga[0], Gs, 16 * w);
    float s[1][8][4], dp[1][8][4];
    mma_abt<D, 1>(s, qa, Ks + buf * E);   // S = Q K^T
    mma_abt<D, 1>(dp, ga, Vs + buf * E);  // dP = dO V^T
    const int64_t j0 = tt * kTileRows;
    grad_tile<BIAS>(g, tab, sees_all(g, r0, r0 + 15, j0, j0 + kTileRows - 1), s[0], dp[0],
                    [&](int nb, int e, int64_t* i, int64_t* j, float* Le, float* De) {
      *i = acc_row(r0, e), *j = acc_col(j0, nb, e), *Le = L[e / 2], *De = Di[e / 2];
    });
    if (sums)
CTX_UNROLL
      for (int nb = 0; nb < 8; ++nb)
CTX_UNROLL
        for (int e = 0; e < 4; ++e) Ps[(acc_row(16 * w, e)) * (kTileRows + 1) + acc_col(0, nb, e)] = dp[0][nb][e];
    mma_py<D, 1>(acc, dp, Ks + buf * E);  // dQ += dS K
    __syncthreads();
    if (sums) diag.tile(g, Ps, i0, j0, tt == t0, part, threadIdx.x);  // Ps is rewritten after the next barrier
  }
  if (sums) diag.finish(g, part, threadIdx.x);
  cp.wait_all();
CTX_UNROLL
  for (int e = 0; e < 4; ++e) {
    const int64_t i = acc_row(r0, e);
    if (i >= g.T) continue;
CTX_UNROLL
    for (int nb = 0; nb < D / 8; ++nb) dq[(bh * g.T + i) * D + acc_col(0, nb, e)] = g.scale * acc[0][nb][e];
  }
}

// dk, dv [B, H, S, D] f32. grid (ceil(S / 64), B H); shared K, V + 2 Q + 2 dO tiles, then
// 2 x 64 lse and 2 x 64 D values (f32).
template <int D, bool BIAS>
__global__ void __launch_bounds__(kBlock) tc_dkdv_kernel(Geo g, const bf16* q, const bf16* k, const bf16* v,
                                                        const bf16* dout, const float* lse, const float* Dd,
                                                        float* dk, float* dv) {
  CTX_DYNAMIC_SHARED(bf16, sm);
  constexpr int E = Tile<D>::elems;
  bf16 *Ks = sm, *Vs = sm + E, *Qs = sm + 2 * E, *Gs = sm + 4 * E;
  float* Ls = reinterpret_cast<float*>(sm + 6 * E);  // [2, 64]
  float* Ds = Ls + 2 * kTileRows;                    // [2, 64]
  const int w = threadIdx.x / 32;
  const int64_t bh = blockIdx.y, j0 = (int64_t)blockIdx.x * kBlockRows, r0 = j0 + 16 * w;
  const bf16 *qb = q + bh * g.T * D, *gb = dout + bh * g.T * D;
  const float* tab = dist_row<BIAS>(g, bh);
  int64_t t0, t1;
  query_tiles(g, j0, &t0, &t1);
  // the query tile from row i1 into buffer b: Q, dO by cp.async, lse and D by plain stores
  auto stage = [&](tc::AsyncCopies& cp, int64_t i1, int b) {
    load_tile<D>(cp, qb, i1, g.T - i1, Qs + b * E);
    load_tile<D>(cp, gb, i1, g.T - i1, Gs + b * E);
    for (int r = threadIdx.x; r < kTileRows; r += kBlock) {
      const bool in = i1 + r < g.T;
      Ls[b * kTileRows + r] = in ? lse[bh * g.T + i1 + r] : INFINITY;
      Ds[b * kTileRows + r] = in ? Dd[bh * g.T + i1 + r] : 0.0f;
    }
  };
  tc::AsyncCopies cp;
  load_tile<D>(cp, k + bh * g.S * D, j0, g.S - j0, Ks);
  load_tile<D>(cp, v + bh * g.S * D, j0, g.S - j0, Vs);
  if (t0 < t1) stage(cp, t0 * kTileRows, 0);
  cp.commit();
  float ak[1][D / 8][4] = {}, av[1][D / 8][4] = {};
  uint32_t ka[1][D / 16][4], va[1][D / 16][4];
  for (int64_t tt = t0; tt < t1; ++tt) {
    const int buf = (int)((tt - t0) & 1);
    if (tt + 1 < t1) {
      stage(cp, (tt + 1) * kTileRows, buf ^ 1);
      cp.commit();
      cp.wait<1>();
    } else {
      cp.wait<0>();
    }
    __syncthreads();
    if (tt == t0) load_a<D>(ka[0], Ks, 16 * w), load_a<D>(va[0], Vs, 16 * w);
    float st[1][8][4], dpt[1][8][4];
    mma_abt<D, 1>(st, ka, Qs + buf * E);   // S^T = K Q^T   [16 keys, 64 queries]
    mma_abt<D, 1>(dpt, va, Gs + buf * E);  // dP^T = V dO^T
    const int64_t c0 = tt * kTileRows;
    const float *Lb = Ls + buf * kTileRows, *Db = Ds + buf * kTileRows;
    grad_tile<BIAS>(g, tab, sees_all(g, c0, c0 + kTileRows - 1, r0, r0 + 15), st[0], dpt[0],
                    [&](int nb, int e, int64_t* i, int64_t* j, float* Le, float* De) {
      *j = acc_row(r0, e), *i = acc_col(c0, nb, e);
      *Le = Lb[*i - c0], *De = Db[*i - c0];
    });
    mma_py<D, 1>(av, st, Gs + buf * E);   // dV += P^T dO
    mma_py<D, 1>(ak, dpt, Qs + buf * E);  // dK += dS^T Q
    __syncthreads();
  }
  cp.wait_all();
CTX_UNROLL
  for (int e = 0; e < 4; ++e) {
    const int64_t j = acc_row(r0, e);
    if (j >= g.S) continue;
CTX_UNROLL
    for (int nb = 0; nb < D / 8; ++nb) {
      const int64_t n = (bh * g.S + j) * D + acc_col(0, nb, e);
      dk[n] = g.scale * ak[0][nb][e];
      dv[n] = av[0][nb][e];
    }
  }
}

// ---------------------------------------------------------- backward, 32 rows a warp ----
// The opt-in (CTXLAB_TC_BACKWARD_ROWS=128, tc_backward_rows): blocks of 128 keys (dK/dV) or 128
// queries (dQ), 32 a warp (MT = 2 m-tiles), the other side streamed in tiles of 32 (kWideTile)
// so that S and dP fit as [2][4][4]; the warp's own A fragments (K and V, or Q and dO) are read
// from shared memory at every k-step (mma_abt_sm), not held in registers. Every B fragment of the
// P Y products then feeds four mma (two today), the S products' A and B fragments two each, and
// each streamed tile serves twice the rows. Every sum keeps the default kernels' order (keys, or
// queries, ascending; tiles a block skips add exact zeros there): the same bits.
constexpr int kWideMT = 2;
constexpr int kWideRows = kWarps * 16 * kWideMT;  // 128
constexpr int kWideTile = 32;

// dk, dv [B, H, S, D] f32. grid (ceil(S / 128), B H); shared K, V [128, D + 8] + 2 Q + 2 dO tiles
// [32, D + 8], then 2 x 32 lse and 2 x 32 D values (f32).
template <int D, bool BIAS>
__global__ void __launch_bounds__(kBlock) tc_dkdv_wide_kernel(Geo g, const bf16* q, const bf16* k, const bf16* v,
                                                             const bf16* dout, const float* lse, const float* Dd,
                                                             float* dk, float* dv) {
  constexpr int MT = kWideMT, QT = kWideTile, NB = QT / 8;
  CTX_DYNAMIC_SHARED(bf16, sm);
  constexpr int EK = kWideRows * Tile<D>::ld, EQ = QT * Tile<D>::ld;
  bf16 *Ks = sm, *Vs = sm + EK, *Qs = sm + 2 * EK, *Gs = sm + 2 * EK + 2 * EQ;
  float* Ls = reinterpret_cast<float*>(sm + 2 * EK + 4 * EQ);  // [2, 32]
  float* Ds = Ls + 2 * QT;                                      // [2, 32]
  const int w = threadIdx.x / 32;
  const int64_t bh = blockIdx.y, j0 = (int64_t)blockIdx.x * kWideRows, r0 = j0 + 16 * MT * w;
  const bf16 *qb = q + bh * g.T * D, *gb = dout + bh * g.T * D;
  const float* tab = dist_row<BIAS>(g, bh);
  int64_t t0, t1;
  query_tiles(g, j0, &t0, &t1, kWideRows, QT);
  auto stage = [&](tc::AsyncCopies& cp, int64_t i1, int b) {  // as tc_dkdv_kernel's
    load_tile<D, QT>(cp, qb, i1, g.T - i1, Qs + b * EQ);
    load_tile<D, QT>(cp, gb, i1, g.T - i1, Gs + b * EQ);
    for (int r = threadIdx.x; r < QT; r += kBlock) {
      const bool in = i1 + r < g.T;
      Ls[b * QT + r] = in ? lse[bh * g.T + i1 + r] : INFINITY;
      Ds[b * QT + r] = in ? Dd[bh * g.T + i1 + r] : 0.0f;
    }
  };
  tc::AsyncCopies cp;
  load_tile<D, kWideRows>(cp, k + bh * g.S * D, j0, g.S - j0, Ks);
  load_tile<D, kWideRows>(cp, v + bh * g.S * D, j0, g.S - j0, Vs);
  if (t0 < t1) stage(cp, t0 * QT, 0);
  cp.commit();
  float ak[MT][D / 8][4] = {}, av[MT][D / 8][4] = {};
  for (int64_t tt = t0; tt < t1; ++tt) {
    const int buf = (int)((tt - t0) & 1);
    if (tt + 1 < t1) {
      stage(cp, (tt + 1) * QT, buf ^ 1);
      cp.commit();
      cp.wait<1>();
    } else {
      cp.wait<0>();
    }
    __syncthreads();
    float st[MT][NB][4], dpt[MT][NB][4];
    mma_abt_sm<D, MT, NB>(st, Ks, 16 * MT * w, Qs + buf * EQ);   // S^T = K Q^T   [32 keys, 32 queries]
    mma_abt_sm<D, MT, NB>(dpt, Vs, 16 * MT * w, Gs + buf * EQ);  // dP^T = V dO^T
    const int64_t c0 = tt * QT;
    const float *Lb = Ls + buf * QT, *Db = Ds + buf * QT;
CTX_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      const int64_t rm = r0 + 16 * mt;
      grad_tile<BIAS>(g, tab, sees_all(g, c0, c0 + QT - 1, rm, rm + 15), st[mt], dpt[mt],
                      [&](int nb, int e, int64_t* i, int64_t* j, float* Le, float* De) {
        *j = acc_row(rm, e), *i = acc_col(c0, nb, e);
        *Le = Lb[*i - c0], *De = Db[*i - c0];
      });
    }
    mma_py<D, MT, NB>(av, st, Gs + buf * EQ);   // dV += P^T dO
    mma_py<D, MT, NB>(ak, dpt, Qs + buf * EQ);  // dK += dS^T Q
    __syncthreads();
  }
  cp.wait_all();
CTX_UNROLL
  for (int mt = 0; mt < MT; ++mt)
CTX_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int64_t j = acc_row(r0 + 16 * mt, e);
      if (j >= g.S) continue;
CTX_UNROLL
      for (int nb = 0; nb < D / 8; ++nb) {
        const int64_t n = (bh * g.S + j) * D + acc_col(0, nb, e);
        dk[n] = g.scale * ak[mt][nb][e];
        dv[n] = av[mt][nb][e];
      }
    }
}

// dq [B, H, T, D] f32. grid (ceil(T / 128), B H); shared Q, dO [128, D + 8] + 2 K + 2 V tiles
// [32, D + 8] (BIAS: then dS [128, 65] f32). BIAS with part: the table's gradient as tc_dq_kernel
// writes it, into the same part [B H, ceil(T / 64), S]: the block's two halves of 64 queries are
// two of its blocks, key tiles go in pairs (from an even one: the 64-key tiles), dS of a pair
// lands in Ps, and threads 64 h + u run half h's DiagSums. The halves visit the 64-key tiles of the
// whole block, a few more than their own: those add exact zeros (dS = 0 where masked), the bits
// stay tc_dq_kernel's.
template <int D, bool BIAS>
__global__ void __launch_bounds__(kBlock) tc_dq_wide_kernel(Geo g, const bf16* q, const bf16* k, const bf16* v,
                                                           const bf16* dout, const float* lse, const float* Dd,
                                                           float* dq, float* part) {
  constexpr int MT = kWideMT, KT = kWideTile, NB = KT / 8;
  CTX_DYNAMIC_SHARED(bf16, sm);
  constexpr int EQ = kWideRows * Tile<D>::ld, EK = KT * Tile<D>::ld;
  bf16 *Qs = sm, *Gs = sm + EQ, *Ks = sm + 2 * EQ, *Vs = sm + 2 * EQ + 2 * EK;
  float* Ps = reinterpret_cast<float*>(sm + 2 * EQ + 4 * EK);  // BIAS: dS [128, 65]
  const int w = threadIdx.x / 32;
  const int64_t bh = blockIdx.y, i0 = heavy_first_rows(kWideRows), r0 = i0 + 16 * MT * w;
  const bf16 *kb = k + bh * g.S * D, *vb = v + bh * g.S * D;
  const float* tab = dist_row<BIAS>(g, bh);
  int64_t t0, t1;
  key_tiles(g, i0, &t0, &t1, kWideRows, KT);
  DiagSums diag;
  const bool sums = BIAS && part;  // the table's gradient is wanted
  const int half = threadIdx.x / kTileRows, u = threadIdx.x % kTileRows;
  const int64_t ih = i0 + kTileRows * half;  // the thread's half: a tc_dq_kernel block's queries
  if (sums) {
    if (t0 < t1) t0 -= t0 & 1, t1 += t1 & 1;  // whole 64-key tiles
    const int64_t nb = (g.T + kTileRows - 1) / kTileRows;
    for (int h = 0; h < 2; ++h)
      if (i0 + kTileRows * h < g.T)
        zero_unreached(g, i0 + kTileRows * h, t0 / 2, t1 / 2, part + (bh * nb + i0 / kTileRows + h) * g.S);
    part = ih < g.T ? part + (bh * nb + ih / kTileRows) * g.S : nullptr;  // null: a half past T
  }
  tc::AsyncCopies cp;
  load_tile<D, kWideRows>(cp, q + bh * g.T * D, i0, g.T - i0, Qs);
  load_tile<D, kWideRows>(cp, dout + bh * g.T * D, i0, g.T - i0, Gs);
  if (t0 < t1) {
    load_tile<D, KT>(cp, kb, t0 * KT, g.S - t0 * KT, Ks);
    load_tile<D, KT>(cp, vb, t0 * KT, g.S - t0 * KT, Vs);
  }
  cp.commit();
  float L[MT][2], Di[MT][2];  // lse and D of the lane's rows
CTX_UNROLL
  for (int mt = 0; mt < MT; ++mt)
CTX_UNROLL
    for (int h = 0; h < 2; ++h) {
      const int64_t i = acc_row(r0 + 16 * mt, 2 * h);
      L[mt][h] = i < g.T ? lse[bh * g.T + i] : INFINITY;
      Di[mt][h] = i < g.T ? Dd[bh * g.T + i] : 0.0f;
    }
  float acc[MT][D / 8][4] = {};
  for (int64_t tt = t0; tt < t1; ++tt) {
    const int buf = (int)((tt - t0) & 1);
    if (tt + 1 < t1) {
      const int64_t j1 = (tt + 1) * KT;
      load_tile<D, KT>(cp, kb, j1, g.S - j1, Ks + (buf ^ 1) * EK);
      load_tile<D, KT>(cp, vb, j1, g.S - j1, Vs + (buf ^ 1) * EK);
      cp.commit();
      cp.wait<1>();
    } else {
      cp.wait<0>();
    }
    __syncthreads();
    float s[MT][NB][4], dp[MT][NB][4];
    mma_abt_sm<D, MT, NB>(s, Qs, 16 * MT * w, Ks + buf * EK);   // S = Q K^T
    mma_abt_sm<D, MT, NB>(dp, Gs, 16 * MT * w, Vs + buf * EK);  // dP = dO V^T
    const int64_t j0 = tt * KT;
CTX_UNROLL
    for (int mt = 0; mt < MT; ++mt) {
      const int64_t rm = r0 + 16 * mt;
      grad_tile<BIAS>(g, tab, sees_all(g, rm, rm + 15, j0, j0 + KT - 1), s[mt], dp[mt],
                      [&](int nb, int e, int64_t* i, int64_t* j, float* Le, float* De) {
        *i = acc_row(rm, e), *j = acc_col(j0, nb, e), *Le = L[mt][e / 2], *De = Di[mt][e / 2];
      });
      if (sums)  // dS into its half of the pair's [128, 64] (columns 32 (tt % 2) on)
CTX_UNROLL
        for (int nb = 0; nb < NB; ++nb)
CTX_UNROLL
          for (int e = 0; e < 4; ++e)
            Ps[acc_row(16 * (MT * w + mt), e) * (kTileRows + 1) + acc_col(KT * (tt & 1), nb, e)] = dp[mt][nb][e];
    }
    mma_py<D, MT, NB>(acc, dp, Ks + buf * EK);  // dQ += dS K
    __syncthreads();
    if (sums && (tt & 1) && part)  // a pair is in: Ps is rewritten after the next barrier
      diag.tile(g, Ps + kTileRows * half * (kTileRows + 1), ih, (tt - 1) * KT, tt - 1 == t0, part, u);
  }
  if (sums && part) diag.finish(g, part, u);
  cp.wait_all();
CTX_UNROLL
  for (int mt = 0; mt < MT; ++mt)
CTX_UNROLL
    for (int e = 0; e < 4; ++e) {
      const int64_t i = acc_row(r0 + 16 * mt, e);
      if (i >= g.T) continue;
CTX_UNROLL
      for (int nb = 0; nb < D / 8; ++nb) dq[(bh * g.T + i) * D + acc_col(0, nb, e)] = g.scale * acc[mt][nb][e];
    }
}

// ddist [H, n] = the sum of part [B, H, nb, S] over the batch and the nb query blocks, in that
// fixed order (0 for r >= S): one thread a distance. grid (ceil(n / 128), H).
__global__ void __launch_bounds__(kBlock) dist_grad_kernel(const float* part, int64_t B, int64_t H, int64_t nb,
                                                          int64_t S, int64_t n, float* ddist) {
  const int64_t h = blockIdx.y, r = (int64_t)blockIdx.x * kBlock + threadIdx.x;
  if (r >= n) return;
  float sum = 0.0f;
  if (r < S)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t x = 0; x < nb; ++x) sum += part[((b * H + h) * nb + x) * S + r];
  ddist[h * n + r] = sum;
}

// ---------------------------------------------------------------------------- host side ----

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <int D>
constexpr size_t tile_bytes(int tiles) {
  return (size_t)tiles * Tile<D>::elems * sizeof(bf16);
}

// x (f32) as bf16 bits, two to an i32 element of the returned scratch tensor
Tensor bf16_copy(const Tensor& x) {
  Tensor y = Tensor::empty({std::max<int64_t>(1, cdiv(x.numel(), 2))}, DType::I32, Device::CUDA);
  f32_to_bf16(x.data<float>(), reinterpret_cast<uint16_t*>(y.data<int32_t>()), x.numel());
  return y;
}
const bf16* bits(const Tensor& y) { return reinterpret_cast<const bf16*>(y.data<int32_t>()); }

// dist: the distance table (AttnRel::dist_bias [H, n] f32) or undefined
Geo geo(const AttnDims& d, const Tensor& dist) {
  const bool b = dist.defined();
  return Geo{d.T, d.S, d.S - d.T, d.window, (float)d.scale, b ? dist.data<float>() : nullptr, b ? dist.size(1) : 0,
             d.H};
}

template <int D, int MT, bool BIAS>
void forward_mt(const AttnDims& d, const Geo& G, const bf16* q, const bf16* k, const bf16* v, float* out,
                float* lse) {
  constexpr int R = kWarps * 16 * MT;
  const size_t smem = tile_bytes<D>(4) + (size_t)R * Tile<D>::ld * sizeof(bf16);
  allow_shared(tc_forward_kernel<D, MT, BIAS>, smem);
  CTX_LAUNCH((tc_forward_kernel<D, MT, BIAS>), dim3((unsigned)cdiv(d.T, R), (unsigned)(d.B * d.H)), kBlock, smem, stream(),
             G, q, k, v, out, lse);
  CTX_CUDA_LAUNCH_CHECK("tc_forward_kernel");
}
template <int D, bool BIAS>
void forward_d(const AttnDims& d, const Geo& G, const bf16* q, const bf16* k, const bf16* v, float* out,
               float* lse) {
  if constexpr (D <= 64) {
    if (tc_forward_rows() == 128) return forward_mt<D, 2, BIAS>(d, G, q, k, v, out, lse);
  }
  forward_mt<D, 1, BIAS>(d, G, q, k, v, out, lse);
}

// The backward's two passes for D and the block rows (tc_backward_rows). 128 gives 32 rows a warp
// where the registers allow it (ptxas, docs/cuda.md): the dQ pass for every D (D = 128 at 255
// registers, no spills, as its default), the dK/dV pass for D <= 64 (D = 128's accumulators alone
// would take 256 registers: it keeps 16 keys a warp).
constexpr size_t wide_smem(int D) { return (size_t)(2 * kWideRows + 4 * kWideTile) * (D + 8) * sizeof(bf16); }

template <int D, bool BIAS>
void dq_pass(const AttnDims& d, const Geo& G, const bf16* q, const bf16* k, const bf16* v, const bf16* g,
             const float* lse, const float* Dd, float* dq, float* part) {
  const unsigned bh = (unsigned)(d.B * d.H);
  if (tc_backward_rows() == 128) {
    const size_t smem = wide_smem(D) + (BIAS ? kWideRows * (kTileRows + 1) * sizeof(float) : 0);
    allow_shared(tc_dq_wide_kernel<D, BIAS>, smem);
    CTX_LAUNCH((tc_dq_wide_kernel<D, BIAS>), dim3((unsigned)cdiv(d.T, kWideRows), bh), kBlock, smem, stream(), G, q, k,
               v, g, lse, Dd, dq, part);
    CTX_CUDA_LAUNCH_CHECK("tc_dq_wide_kernel");
    ++g_tc_wide_dq;
    return;
  }
  const size_t smem = tile_bytes<D>(6) + (BIAS ? kTileRows * (kTileRows + 1) * sizeof(float) : 0);
  allow_shared(tc_dq_kernel<D, BIAS>, smem);
  CTX_LAUNCH((tc_dq_kernel<D, BIAS>), dim3((unsigned)cdiv(d.T, kBlockRows), bh), kBlock, smem, stream(), G, q, k, v, g,
             lse, Dd, dq, part);
  CTX_CUDA_LAUNCH_CHECK("tc_dq_kernel");
}

template <int D, bool BIAS>
void dkdv_pass(const AttnDims& d, const Geo& G, const bf16* q, const bf16* k, const bf16* v, const bf16* g,
               const float* lse, const float* Dd, float* dk, float* dv) {
  const unsigned bh = (unsigned)(d.B * d.H);
  if constexpr (D <= 64) {
    if (tc_backward_rows() == 128) {
      const size_t smem = wide_smem(D) + 4 * kWideTile * sizeof(float);
      allow_shared(tc_dkdv_wide_kernel<D, BIAS>, smem);
      CTX_LAUNCH((tc_dkdv_wide_kernel<D, BIAS>), dim3((unsigned)cdiv(d.S, kWideRows), bh), kBlock, smem, stream(), G, q,
                 k, v, g, lse, Dd, dk, dv);
      CTX_CUDA_LAUNCH_CHECK("tc_dkdv_wide_kernel");
      ++g_tc_wide_dkdv;
      return;
    }
  }
  const size_t smem = tile_bytes<D>(6) + 4 * kTileRows * sizeof(float);
  allow_shared(tc_dkdv_kernel<D, BIAS>, smem);
  CTX_LAUNCH((tc_dkdv_kernel<D, BIAS>), dim3((unsigned)cdiv(d.S, kBlockRows), bh), kBlock, smem, stream(), G, q, k, v, g,
             lse, Dd, dk, dv);
  CTX_CUDA_LAUNCH_CHECK("tc_dkdv_kernel");
}

// BIAS: part is the dQ blocks' per-distance scratch [B H, ceil(T / 64), S], ddist [H, n]
template <int D, bool BIAS>
void backward_d(const AttnDims& d, const Geo& G, const bf16* q, const bf16* k, const bf16* v, const bf16* g,
                const float* lse, const float* Dd, float* dq, float* dk, float* dv, float* part, float* ddist) {
  if (d.T > 0) dq_pass<D, BIAS>(d, G, q, k, v, g, lse, Dd, dq, part);
  if (d.S > 0) dkdv_pass<D, BIAS>(d, G, q, k, v, g, lse, Dd, dk, dv);
  if (BIAS && ddist) {
    CTX_LAUNCH(dist_grad_kernel, dim3((unsigned)cdiv(G.dist_n, kBlock), (unsigned)d.H), kBlock, 0, stream(), part, d.B,
               d.H, cdiv(d.T, kBlockRows), d.S, G.dist_n, ddist);
    CTX_CUDA_LAUNCH_CHECK("dist_grad_kernel");
  }
}

// the head dims with kernels: Dh = 64 (GPT-2, medium), 32 (small), 128
#define CTX_TC_DISPATCH(Dh, CALL)                          \
  switch (Dh) {                                            \
    case 32: { constexpr int D = 32; CALL; break; }        \
    case 64: { constexpr int D = 64; CALL; break; }        \
    case 128: { constexpr int D = 128; CALL; break; }      \
    default: throw Error("tc attention: head dim " + std::to_string(Dh)); \
  }

bool device_has_tensor_cores() {  // mma.sync bf16, ldmatrix, cp.async: sm_80 and newer
  static const bool yes = [] {
    int major = 0;
    return cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) == cudaSuccess && major >= 8;
  }();
  return yes;
}

}  // namespace

bool tc_attention_shape_fits(int64_t BH, int64_t Dh) {
  return BH <= 65535 && (Dh == 32 || Dh == 64 || Dh == 128) && device_has_tensor_cores();
}

bool tc_attention_fits(const AttnDims& d, const Tensor& q, const Tensor& bias, const AttnRel& rel) {
  AttnRel content = rel;  // the terms besides the distance table
  content.dist_bias = Tensor();
  return q.dtype() == DType::F32 && !bias.defined() && content.empty() && !d.dropout.active() &&
         d.kv_stride() == d.S && tc_attention_shape_fits(d.B * d.H, d.Dh);
}

namespace {
// The block-rows settings (CTXLAB_TC_FORWARD_ROWS, CTXLAB_TC_BACKWARD_ROWS): 64 or 128, read once
// from the variable unless a set_ call (tests, A/B benchmarks) overrides it (0: the setting again).
struct RowsSetting {
  const char* var;
  std::atomic<int> set{0};
  int env() const {
    const char* v = setting_env(var);
    if (!v) return 64;
    CTX_CHECK(std::strcmp(v, "64") == 0 || std::strcmp(v, "128") == 0, var,
              " must be 64 or 128 (docs/settings.md), got '", v, "'");
    return std::atoi(v);
  }
  void store(int rows, const char* who) {
    CTX_CHECK(rows == 0 || rows == 64 || rows == 128, who, ": 64, 128 or 0 (the setting), got ", rows);
    set.store(rows);
  }
};
RowsSetting g_forward_rows{"CTXLAB_TC_FORWARD_ROWS"}, g_backward_rows{"CTXLAB_TC_BACKWARD_ROWS"};
}  // namespace

int tc_forward_rows() {
  if (const int set = g_forward_rows.set.load()) return set;
  static const int env = g_forward_rows.env();
  return env;
}
void set_tc_forward_rows(int rows) { g_forward_rows.store(rows, "set_tc_forward_rows"); }
int tc_backward_rows() {
  if (const int set = g_backward_rows.set.load()) return set;
  static const int env = g_backward_rows.env();
  return env;
}
void set_tc_backward_rows(int rows) { g_backward_rows.store(rows, "set_tc_backward_rows"); }

namespace {
std::atomic<uint64_t> g_tc_forward{0}, g_tc_backward{0}, g_tc_kept{0}, g_tc_converted{0}, g_tc_dist{0};
// x as bf16: the kept copy when there is one, else a fresh conversion held in `scratch`
const bf16* bf16_of(const Tensor& x, const uint16_t* kept, Tensor& scratch) {
  if (kept) return ++g_tc_kept, kept;
  ++g_tc_converted;
  scratch = bf16_copy(x);
  return bits(scratch);
}
}  // namespace

void tc_attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& dist_bias, Tensor& out, Tensor& lse, TcBf16Inputs kept) {
  ++g_tc_forward;
  if (dist_bias.defined()) ++g_tc_dist;
  if (d.B * d.H * d.T == 0) return;
  Tensor sq, sk, sv;
  const bf16 *qb = bf16_of(q, kept.q, sq), *kb = bf16_of(k, kept.k, sk), *vb = bf16_of(v, kept.v, sv);
  const Geo G = geo(d, dist_bias);
  float *o = out.data<float>(), *l = lse.data<float>();
  if (dist_bias.defined())
    CTX_TC_DISPATCH(d.Dh, (forward_d<D, true>(d, G, qb, kb, vb, o, l)))
  else
    CTX_TC_DISPATCH(d.Dh, (forward_d<D, false>(d, G, qb, kb, vb, o, l)))
}

void tc_attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& dist_bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                           Tensor& dq, Tensor& dk, Tensor& dv, Tensor& ddist_bias, TcBf16Inputs kept,
                           const uint16_t* kept_dout) {
  ++g_tc_backward;
  const int64_t N = d.B * d.H * d.T;
  if (N == 0 || d.S == 0) {  // no query: no gradient reaches k, v (and dq is empty, or sees no key)
    for (Tensor* x : {&dq, &dk, &dv, &ddist_bias})
      if (x->defined()) fill<float>(x->data<float>(), x->numel(), 0.0f);
    return;
  }
  Tensor rowdot = Tensor::empty({N}, DType::F32, Device::CUDA);  // D_i = dO_i . O_i
  attention_row_dot(dout.data<float>(), out.data<float>(), rowdot.data<float>(), N, d.Dh);
  Tensor sq, sk, sv;
  const bf16 *qb = bf16_of(q, kept.q, sq), *kb = bf16_of(k, kept.k, sk), *vb = bf16_of(v, kept.v, sv);
  Tensor sg;
  const bf16* gb = bf16_of(dout, kept_dout, sg);
  const Geo G = geo(d, dist_bias);
  const float *L = lse.data<float>(), *Dd = rowdot.data<float>();
  float *gq = dq.data<float>(), *gk = dk.data<float>(), *gv = dv.data<float>();
  if (!dist_bias.defined()) {
    CTX_TC_DISPATCH(d.Dh, (backward_d<D, false>(d, G, qb, kb, vb, gb, L, Dd, gq, gk, gv, nullptr, nullptr)));
    return;
  }
  Tensor part;  // the dQ blocks' per-distance sums [B H, ceil(T / 64), S] (DiagSums), when wanted
  if (ddist_bias.defined()) part = Tensor::empty({d.B * d.H, cdiv(d.T, kBlockRows), d.S}, DType::F32, Device::CUDA);
  float *pp = part.defined() ? part.data<float>() : nullptr, *gd = pp ? ddist_bias.data<float>() : nullptr;
  CTX_TC_DISPATCH(d.Dh, (backward_d<D, true>(d, G, qb, kb, vb, gb, L, Dd, gq, gk, gv, pp, gd)));
}

TcAttentionCalls tc_attention_calls() {
  return {g_tc_forward.load(),   g_tc_backward.load(),  g_tc_kept.load(),   g_tc_converted.load(),
          g_tc_dist.load(),      g_tc_wide_dkdv.load(), g_tc_wide_dq.load()};
}

}  // namespace ctx::cuda
