// core/cuda/attention.cu — fused causal attention (FlashAttention-2 style) for the CUDA backend,
// f32 and f64, forward and backward side by side. The [T, S] probabilities are never stored.
//
// Geometry: a block is kRows warps; each warp owns one row (a query in the forward and dq
// kernels, a key in the dk/dv kernel); the other side streams through shared memory in tiles of
// kTile = 32, one element per lane. A lane owns the head-dim columns c = lane, lane + 32, ... of
// its warp's accumulator row (kept in shared memory, so any Dh fits while the tiles do).
//   forward   per (b, h, kRows queries): keys in tiles; s = logit, online softmax (m, l per row,
//             warp butterfly max / sum), o = o e^(m - m') + sum_j p_j (v_j + vrel[qidx_ij]);
//             out = o / l, lse = m + ln l (+inf and out = 0 for a row with no finite logit)
//   backward  (recomputation) D_i = do_i . o_i (one warp per row); then
//             dq   per (h, kRows queries), batch rows in order: p = e^(s - lse), dp = do_i .
//                  (v_j + vrel[qidx_ij]), ds = p (dp - D_i); dq_i = scale sum_j ds_ij k_j;
//                  dbias[h, i, j] += ds_ij (b in order: summed over the batch without atomics);
//                  dqrel[i, qidx_ij] += scale ds_ij and prel[i, qidx_ij] += p_ij (for dvrel)
//             dk/dv per (b, h, kRows keys), queries in tiles: dv_j = sum_i p_ij do_i,
//                  dk_j = scale sum_i ds_ij q_i, dkrel[j, kidx_ij] += scale ds_ij
//             dvrel[r, c] = sum over (b, h, i) of prel[b, h, i, r] do[b, h, i, c]: partials over
//                  fixed row chunks, then the chunks added in a fixed order (reduce.cu's column_sum_add)
// Dropout (AttnDims::dropout): the forward weights v by p z after l has summed p; the backward
// takes ds = p (z dp - D_i), dv and prel from p z (D_i = do_i . o_i still holds).
// The relative bins (dqrel, prel, dkrel) belong to one row; the lane owning index r (r mod 32)
// adds the tile's entries in order. Every sum has a fixed order: results are bitwise the same
// run to run and under every thread schedule. No atomics.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "core/cuda/attention.h"
#include "core/cuda/check.h"
#include "core/cuda/dispatch.h"
#include "core/cuda/kernels.h"  // fill, column_chunks, column_sum_add
#include "core/cuda/launch.h"
#include "core/cuda/shared_opt_in.h"  // allow_shared

namespace ctx::cuda {
namespace {

constexpr int kRows = 4;   // warps per block = rows per block
constexpr int kTile = 32;  // elements of the streamed side per shared tile (one per lane)
// Row stride of the [rows, Dh] shared tiles: Dh + 1. Lane l reads row l of a tile in the logit and
// dp dot products; with a stride of Dh (a multiple of 32 in practice) all 32 lanes would hit one
// bank (a 32-way conflict: about one FMA per clock per SM); Dh + 1 spreads them over the banks.
__host__ __device__ constexpr int64_t pad(int64_t Dh) { return Dh + 1; }
constexpr unsigned kFull = 0xffffffffu;

// The operands of one call (device pointers; null: absent).
template <class F>
struct Args {
  const F *q, *k, *v;          // [B, H, T, Dh], [B, H, KS, Dh] x2 (the first S rows are keys)
  const F* bias;               // [H, T, S]
  const int32_t *qidx, *kidx;  // [T, S]
  const F *qrel, *krel, *vrel; // [B, H, T, Rq], [B, H, S, Rk], [Rq, Dh]
  int64_t B, H, T, S, Dh, window, Rq, Rk, off;  // off = S - T
  int64_t KS;                  // rows per (b, h) in k, v, dk, dv (AttnDims::kv_stride)
  F scale;
  DropoutMask drop;            // AttnDims::dropout (inactive: no dropout)
  bool dropping;
  // z_ij: the dropout factor of p[b, h, i, j]; exactly 1 without dropout, so the products with
  // it leave the no-dropout bits unchanged
  __device__ F z(int64_t bh, int64_t i, int64_t j) const {
    return dropping ? drop.factor<F>((uint64_t)((bh * T + i) * S + j)) : F(1);
  }
};

__device__ inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ inline int64_t imax(int64_t a, int64_t b) { return a < b ? b : a; }

template <class T>
__device__ T warp_sum(T v) {  // butterfly: every lane ends with the same bits
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFull, v, o);
  return v;
}
template <class T>
__device__ T warp_max(T v) {
  for (int o = 16; o > 0; o /= 2) {
    const T u = __shfl_xor_sync(kFull, v, o);
    v = v < u ? u : v;
  }
  return v;
}

template <class T>
__device__ bool finite(T x) {
  return x < T(INFINITY) && x > -T(INFINITY);
}

// query i sees key j (j < S assumed)
template <class T>
__device__ bool sees(const Args<T>& a, int64_t i, int64_t j) {
  return j <= i + a.off && (a.window <= 0 || j > i + a.off - a.window);
}

// x . y over n elements, in order
template <class T>
__device__ T dot(const T* x, const T* y, int64_t n) {
  T s = T(0);
  for (int64_t c = 0; c < n; ++c) s += x[c] * y[c];
  return s;
}

// logit_ij = scale (qk + qrel[i, qidx_ij] + krel[j, kidx_ij]) + bias[h, i, j]
template <class T>
__device__ T logit(const Args<T>& a, int64_t bh, int64_t h, int64_t i, int64_t j, T qk) {
  T x = qk;
  if (a.qrel) x += a.qrel[(bh * a.T + i) * a.Rq + a.qidx[i * a.S + j]];
  if (a.krel) x += a.krel[(bh * a.S + j) * a.Rk + a.kidx[i * a.S + j]];
  x *= a.scale;
  if (a.bias) x += a.bias[(h * a.T + i) * a.S + j];
  return x;
}

// dp_ij = do_i . (v_j + vrel[qidx_ij])
template <class T>
__device__ T dprob(const Args<T>& a, const T* g, const T* vj, int64_t i, int64_t j) {
  T s = dot(g, vj, a.Dh);
  if (a.vrel) s += dot(g, a.vrel + (int64_t)a.qidx[i * a.S + j] * a.Dh, a.Dh);
  return s;
}

// rows [r0, r0 + n) of x [.., Dh] into sh [rows, pad(Dh)], zeros past `valid` rows
template <class T>
__device__ void load_rows(const T* x, int64_t r0, int64_t valid, int rows, int64_t Dh, T* sh) {
  const int64_t ld = pad(Dh);
  for (int64_t e = threadIdx.x; e < rows * Dh; e += blockDim.x) {
    const int64_t r = e / Dh, c = e % Dh;
    sh[r * ld + c] = r < valid ? x[(r0 + r) * Dh + c] : T(0);
  }
}

// bin[idx[jj]] += scale_w * w[jj] for jj < n with w[jj] != 0, by the lane owning idx mod 32.
// idx(jj) gives the index; entries in order.
template <class T, class Idx>
__device__ void bin_add(T* bin, const T* w, int n, T scale_w, Idx idx) {
  const int lane = threadIdx.x % 32;
  for (int jj = 0; jj < n; ++jj) {
    const T x = w[jj];
    if (x == T(0)) continue;
    const int32_t r = idx(jj);
    if (r % 32 == lane) bin[r] += scale_w * x;
  }
}

// ------------------------------------------------------------------------------- forward ----
// grid: B H ceil(T / kRows) blocks (bh major); block kRows warps; shared (2 kTile + 2 kRows) Dh
// + kRows kTile elements (row stride pad(Dh)). out [B, H, T, Dh], lse [B, H, T].
template <class T>
__global__ void attn_forward_kernel(Args<T> a, int64_t ntiles, T* out, T* lse) {
  CTX_DYNAMIC_SHARED(T, sm);
  a.drop = a.drop.resolved();  // a recorded step's dropout seed: read where it was written
  const int64_t Dh = a.Dh, ld = pad(Dh);  // ld: row stride of the shared tiles
  T* Ks = sm;                  // [kTile, Dh]
  T* Vs = Ks + kTile * ld;     // [kTile, Dh]
  T* Qs = Vs + kTile * ld;     // [kRows, Dh]
  T* Os = Qs + kRows * ld;     // [kRows, Dh] unnormalised output
  T* Ps = Os + kRows * ld;     // [kRows, kTile] probabilities of the tile
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x / ntiles, h = bh % a.H, i0 = (blockIdx.x % ntiles) * kRows, i = i0 + w;
  const bool row = i < a.T;
  const int64_t ilast = imin(a.T, i0 + kRows) - 1;
  load_rows(a.q + bh * a.T * Dh, i0, a.T - i0, kRows, Dh, Qs);
  for (int64_t e = threadIdx.x; e < kRows * ld; e += blockDim.x) Os[e] = T(0);
  __syncthreads();
  T m = -T(INFINITY), l = T(0);
  const int64_t jlo = a.window > 0 ? imax(0, i0 + a.off - a.window + 1) : 0;
  const int64_t jhi = ilast + a.off + 1;  // exclusive
  for (int64_t j0 = jlo; j0 < jhi; j0 += kTile) {
    const int64_t nb = imin(kTile, a.S - j0);
    __syncthreads();  // the previous tile is no longer read
    load_rows(a.k + bh * a.KS * Dh, j0, nb, kTile, Dh, Ks);
    load_rows(a.v + bh * a.KS * Dh, j0, nb, kTile, Dh, Vs);
    __syncthreads();
    if (!row) continue;  // warp-uniform
    const int64_t j = j0 + lane;
    T s = -T(INFINITY);
    if (lane < nb && sees(a, i, j)) s = logit(a, bh, h, i, j, dot(Qs + w * ld, Ks + lane * ld, Dh));
    const T mx = warp_max(s);
    if (!(mx > -T(INFINITY))) continue;  // nothing visible here (warp-uniform)
    const T mnew = m < mx ? mx : m;
    const T alpha = std::exp(m - mnew);  // 0 on the first visible tile
    const T p = std::exp(s - mnew);
    l = l * alpha + warp_sum(p);  // the normaliser sums the undropped p
    Ps[w * kTile + lane] = p * a.z(bh, i, j);  // p z (p = 0 past the tile or the mask)
    __syncwarp();
    for (int64_t c = lane; c < Dh; c += 32) {
      T o = Os[w * ld + c] * alpha;
      for (int jj = 0; jj < nb; ++jj) {
        const T pj = Ps[w * kTile + jj];
        if (pj == T(0)) continue;
        T vv = Vs[jj * ld + c];
        if (a.vrel) vv += a.vrel[(int64_t)a.qidx[i * a.S + j0 + jj] * Dh + c];
        o += pj * vv;
      }
      Os[w * ld + c] = o;
    }
    m = mnew;
    __syncwarp();
  }
  if (!row) return;
  const int64_t n = bh * a.T + i;
  if (l > T(0)) {
    const T inv = T(1) / l;
    for (int64_t c = lane; c < Dh; c += 32) out[n * Dh + c] = Os[w * ld + c] * inv;
    if (lane == 0) lse[n] = m + std::log(l);
  } else {
    for (int64_t c = lane; c < Dh; c += 32) out[n * Dh + c] = T(0);
    if (lane == 0) lse[n] = T(INFINITY);
  }
}

// ------------------------------------------------------------------------------ backward ----
// D[n] = dout[n] . out[n] for the N = B H T rows [N, Dh]; one warp per row.
template <class T>
__global__ void attn_rowdot_kernel(const T* dout, const T* out, T* D, int64_t N, int64_t Dh) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t n = (int64_t)blockIdx.x * kRows + w; n < N; n += (int64_t)gridDim.x * kRows) {
    T s = T(0);
    for (int64_t c = lane; c < Dh; c += 32) s += dout[n * Dh + c] * out[n * Dh + c];
    s = warp_sum(s);
    if (lane == 0) D[n] = s;
  }
}

// dq [B, H, T, Dh]; dbias [H, T, S] (zeroed before; null: not wanted); dqrel [B, H, T, Rq] and
// prel [B, H, T, Rq] (null: not wanted). grid: G H ceil(T / kRows) blocks, G = B (each block one
// batch row) or 1 (each block walks the batch in order: needed for dbias). Shared: (2 kTile +
// 3 kRows) pad(Dh) + 2 kRows kTile elements.
template <class T>
__global__ void attn_dq_kernel(Args<T> a, int64_t ntiles, bool walk_batch, const T* dout, const T* lse,
                               const T* D, T* dq, T* dbias, T* dqrel, T* prel) {
  CTX_DYNAMIC_SHARED(T, sm);
  a.drop = a.drop.resolved();  // a recorded step's dropout seed: read where it was written
  const int64_t Dh = a.Dh, ld = pad(Dh);  // ld: row stride of the shared tiles
  T* Ks = sm;                   // [kTile, Dh]
  T* Vs = Ks + kTile * ld;      // [kTile, Dh]
  T* Qs = Vs + kTile * ld;      // [kRows, Dh]
  T* Gs = Qs + kRows * ld;      // [kRows, Dh] dout rows
  T* Acc = Gs + kRows * ld;     // [kRows, Dh] sum_j ds_ij k_j
  T* DSs = Acc + kRows * ld;    // [kRows, kTile] ds of the tile
  T* Ps = DSs + kRows * kTile;  // [kRows, kTile] p of the tile
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t g = blockIdx.x / ntiles, i0 = (blockIdx.x % ntiles) * kRows, i = i0 + w;
  const int64_t h = walk_batch ? g : g % a.H;
  const int64_t b_begin = walk_batch ? 0 : g / a.H, b_end = walk_batch ? a.B : b_begin + 1;
  const bool row = i < a.T;
  const int64_t ilast = imin(a.T, i0 + kRows) - 1;
  const int64_t jlo = a.window > 0 ? imax(0, i0 + a.off - a.window + 1) : 0;
  const int64_t jhi = ilast + a.off + 1;
  for (int64_t b = b_begin; b < b_end; ++b) {
    const int64_t bh = b * a.H + h, n = bh * a.T + i;
    __syncthreads();  // the previous batch row's accumulators are written out
    load_rows(a.q + bh * a.T * Dh, i0, a.T - i0, kRows, Dh, Qs);
    load_rows(dout + bh * a.T * Dh, i0, a.T - i0, kRows, Dh, Gs);
    for (int64_t e = threadIdx.x; e < kRows * ld; e += blockDim.x) Acc[e] = T(0);
    __syncthreads();
    T* dqr = row && dqrel ? dqrel + n * a.Rq : nullptr;
    T* pr = row && prel ? prel + n * a.Rq : nullptr;
    for (int64_t r = lane; r < a.Rq; r += 32) {  // each lane zeroes the bins it owns
      if (dqr) dqr[r] = T(0);
      if (pr) pr[r] = T(0);
    }
    const T L = row ? lse[n] : T(INFINITY), Di = row ? D[n] : T(0);
    for (int64_t j0 = jlo; j0 < jhi; j0 += kTile) {
      const int64_t nb = imin(kTile, a.S - j0);
      __syncthreads();
      load_rows(a.k + bh * a.KS * Dh, j0, nb, kTile, Dh, Ks);
      load_rows(a.v + bh * a.KS * Dh, j0, nb, kTile, Dh, Vs);
      __syncthreads();
      if (!row) continue;
      const int64_t j = j0 + lane;
      T p = T(0), ds = T(0);
      const bool vis = lane < nb && sees(a, i, j);
      if (vis && finite(L)) {
        p = std::exp(logit(a, bh, h, i, j, dot(Qs + w * ld, Ks + lane * ld, Dh)) - L);
        const T zj = a.z(bh, i, j);  // dprob is d/d(p z): ds = p (z dp - D); prel bins p z
        ds = p * (zj * dprob(a, Gs + w * ld, Vs + lane * ld, i, j) - Di);
        p *= zj;
      }
      if (dbias && vis) dbias[(h * a.T + i) * a.S + j] += ds;
      DSs[w * kTile + lane] = ds;
      Ps[w * kTile + lane] = p;
      __syncwarp();
      for (int64_t c = lane; c < Dh; c += 32) {
        T acc = Acc[w * ld + c];
        for (int jj = 0; jj < nb; ++jj) acc += DSs[w * kTile + jj] * Ks[jj * ld + c];
        Acc[w * ld + c] = acc;
      }
      const int32_t* qix = a.qidx ? a.qidx + i * a.S + j0 : nullptr;
      if (dqr) bin_add(dqr, DSs + w * kTile, (int)nb, a.scale, [&](int jj) { return qix[jj]; });
      if (pr) bin_add(pr, Ps + w * kTile, (int)nb, T(1), [&](int jj) { return qix[jj]; });
      __syncwarp();
    }
    if (row)
      for (int64_t c = lane; c < Dh; c += 32) dq[n * Dh + c] = a.scale * Acc[w * ld + c];
  }
}

// dk, dv [B, H, S, Dh]; dkrel [B, H, S, Rk] (null: not wanted). grid: B H ceil(S / kRows)
// blocks; warp w owns key j0 + w. Shared: (2 kTile + 4 kRows) pad(Dh) + 2 kTile + 2 kRows kTile.
template <class T>
__global__ void attn_dkdv_kernel(Args<T> a, int64_t ntiles, const T* dout, const T* lse, const T* D, T* dk,
                                 T* dv, T* dkrel) {
  CTX_DYNAMIC_SHARED(T, sm);
  a.drop = a.drop.resolved();  // a recorded step's dropout seed: read where it was written
  const int64_t Dh = a.Dh, ld = pad(Dh);  // ld: row stride of the shared tiles
  T* Qs = sm;                    // [kTile, Dh]
  T* Gs = Qs + kTile * ld;       // [kTile, Dh] dout rows
  T* Kr = Gs + kTile * ld;       // [kRows, Dh]
  T* Vr = Kr + kRows * ld;       // [kRows, Dh]
  T* dKa = Vr + kRows * ld;      // [kRows, Dh]
  T* dVa = dKa + kRows * ld;     // [kRows, Dh]
  T* Ls = dVa + kRows * ld;      // [kTile] lse of the tile's queries
  T* Dsm = Ls + kTile;           // [kTile] D of the tile's queries
  T* Ps = Dsm + kTile;           // [kRows, kTile]
  T* DSs = Ps + kRows * kTile;   // [kRows, kTile]
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x / ntiles, h = bh % a.H, j0 = (blockIdx.x % ntiles) * kRows, j = j0 + w;
  const bool row = j < a.S;
  const int64_t jlast = imin(a.S, j0 + kRows) - 1;
  load_rows(a.k + bh * a.KS * Dh, j0, a.S - j0, kRows, Dh, Kr);
  load_rows(a.v + bh * a.KS * Dh, j0, a.S - j0, kRows, Dh, Vr);
  for (int64_t e = threadIdx.x; e < kRows * ld; e += blockDim.x) dKa[e] = dVa[e] = T(0);
  __syncthreads();  // the owners read these even when no query tile follows (keys nobody sees)
  T* dkr = row && dkrel ? dkrel + (bh * a.S + j) * a.Rk : nullptr;
  for (int64_t r = lane; r < a.Rk; r += 32)
    if (dkr) dkr[r] = T(0);
  // queries that see a key of the block: i >= j0 - off and (window) i < jlast - off + window
  const int64_t ilo = imax(0, j0 - a.off);
  const int64_t ihi = a.window > 0 ? imin(a.T, jlast - a.off + a.window) : a.T;
  for (int64_t q0 = ilo; q0 < ihi; q0 += kTile) {
    const int64_t nq = imin(kTile, a.T - q0);
    __syncthreads();
    load_rows(a.q + bh * a.T * Dh, q0, nq, kTile, Dh, Qs);
    load_rows(dout + bh * a.T * Dh, q0, nq, kTile, Dh, Gs);
    for (int64_t r = threadIdx.x; r < kTile; r += blockDim.x) {
      Ls[r] = r < nq ? lse[bh * a.T + q0 + r] : T(INFINITY);
      Dsm[r] = r < nq ? D[bh * a.T + q0 + r] : T(0);
    }
    __syncthreads();
    if (!row) continue;
    const int64_t i = q0 + lane;
    T p = T(0), ds = T(0);
    if (lane < nq && sees(a, i, j) && finite(Ls[lane])) {
      p = std::exp(logit(a, bh, h, i, j, dot(Qs + lane * ld, Kr + w * ld, Dh)) - Ls[lane]);
      const T zj = a.z(bh, i, j);  // ds = p (z dp - D); dv takes p z
      ds = p * (zj * dprob(a, Gs + lane * ld, Vr + w * ld, i, j) - Dsm[lane]);
      p *= zj;
    }
    Ps[w * kTile + lane] = p;
    DSs[w * kTile + lane] = ds;
    __syncwarp();
    for (int64_t c = lane; c < Dh; c += 32) {
      T gv = dVa[w * ld + c], gk = dKa[w * ld + c];
      for (int ii = 0; ii < nq; ++ii) {
        gv += Ps[w * kTile + ii] * Gs[ii * ld + c];
        gk += DSs[w * kTile + ii] * Qs[ii * ld + c];
      }
      dVa[w * ld + c] = gv;
      dKa[w * ld + c] = gk;
    }
    if (dkr) bin_add(dkr, DSs + w * kTile, (int)nq, a.scale, [&](int ii) { return a.kidx[(q0 + ii) * a.S + j]; });
    __syncwarp();
  }
  if (!row) return;
  const int64_t n = bh * a.KS + j;
  for (int64_t c = lane; c < Dh; c += 32) {
    dk[n * Dh + c] = a.scale * dKa[w * ld + c];
    dv[n * Dh + c] = dVa[w * ld + c];
  }
}

// First pass of dvrel: part[k, r, c] = sum over the rows n of chunk k (ceil(N / K) rows each,
// in order) of prel[n, r] dout[n, c]; prel [N, Rq], dout [N, Dh], part [K, Rq, Dh]. The second
// pass (reduce.cu: column_sum_add) adds the K partials in a fixed order.
template <class T>
__global__ void attn_dvrel_partial_kernel(const T* prel, const T* dout, T* part, int64_t N, int64_t K, int64_t Rq,
                                          int64_t Dh) {
  const int64_t rows = (N + K - 1) / K, C = Rq * Dh;
  CTX_GRID_STRIDE(e, K * C) {
    const int64_t k = e / C, r = (e % C) / Dh, c = e % Dh;
    T s = T(0);
    for (int64_t n = k * rows; n < N && n < (k + 1) * rows; ++n) s += prel[n * Rq + r] * dout[n * Dh + c];
    part[e] = s;
  }
}

// ---------------------------------------------------------------------------- host side ----


template <class T>
const T* cptr(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <class T>
T* mptr(Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

template <class T>
Args<T> make_args(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                  const AttnRel& rel) {
  Args<T> a;
  a.q = q.data<T>(), a.k = k.data<T>(), a.v = v.data<T>(), a.bias = cptr<T>(bias);
  a.qidx = rel.qrel.defined() || rel.vrel.defined() ? rel.qidx.data<int32_t>() : nullptr;
  a.kidx = rel.krel.defined() ? rel.kidx.data<int32_t>() : nullptr;
  a.qrel = cptr<T>(rel.qrel), a.krel = cptr<T>(rel.krel), a.vrel = cptr<T>(rel.vrel);
  a.B = d.B, a.H = d.H, a.T = d.T, a.S = d.S, a.Dh = d.Dh, a.window = d.window;
  a.Rq = rel.Rq, a.Rk = rel.Rk, a.off = d.S - d.T, a.KS = d.kv_stride();
  a.scale = (T)d.scale;
  a.drop = d.dropout;
  a.dropping = d.dropout.active();
  return a;
}

std::atomic<uint64_t> g_forward_calls{0}, g_backward_calls{0};

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

template <class T>
void forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
             Tensor& out, Tensor& lse, const AttnRel& rel) {
  if (d.B * d.H * d.T == 0) return;
  const Args<T> a = make_args<T>(d, q, k, v, bias, rel);
  const int64_t ntiles = cdiv(d.T, kRows);
  const size_t smem = sizeof(T) * (size_t)((2 * kTile + 2 * kRows) * pad(d.Dh) + kRows * kTile);
  allow_shared(attn_forward_kernel<T>, smem);
  CTX_LAUNCH(attn_forward_kernel<T>, (unsigned)(d.B * d.H * ntiles), kRows * 32, smem, stream(), a, ntiles,
             out.data<T>(), lse.data<T>());
  CTX_CUDA_LAUNCH_CHECK("attn_forward_kernel");
}

template <class T>
void backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
              const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv,
              Tensor& dbias, const AttnRel& rel, AttnRelGrad& drel) {
  const Args<T> a = make_args<T>(d, q, k, v, bias, rel);
  const int64_t BH = d.B * d.H, N = BH * d.T;
  T* dbias_p = mptr<T>(dbias);
  T* dqrel_p = rel.qrel.defined() ? mptr<T>(drel.dqrel) : nullptr;
  T* dkrel_p = rel.krel.defined() ? mptr<T>(drel.dkrel) : nullptr;
  T* dvrel_p = rel.vrel.defined() ? mptr<T>(drel.dvrel) : nullptr;
  if (dbias_p) fill<T>(dbias_p, dbias.numel(), T(0));  // ds is added in at the visible elements
  Tensor prel = dvrel_p ? Tensor::empty({std::max<int64_t>(1, N * rel.Rq)}, q.dtype(), Device::CUDA) : Tensor();
  if (N > 0) {
    Tensor D = Tensor::empty({N}, q.dtype(), Device::CUDA);
    CTX_LAUNCH(attn_rowdot_kernel<T>, (unsigned)std::min<int64_t>(cdiv(N, kRows), kMaxBlocks), kRows * 32, 0, stream(),
               dout.data<T>(), out.data<T>(), D.data<T>(), N, d.Dh);
    CTX_CUDA_LAUNCH_CHECK("attn_rowdot_kernel");
    const int64_t qt = cdiv(d.T, kRows);
    const bool walk_batch = dbias_p != nullptr;  // dbias: one block walks the batch in order
    const int64_t groups = walk_batch ? d.H : BH;
    const size_t smem_dq = sizeof(T) * (size_t)((2 * kTile + 3 * kRows) * pad(d.Dh) + 2 * kRows * kTile);
    allow_shared(attn_dq_kernel<T>, smem_dq);
    CTX_LAUNCH(attn_dq_kernel<T>, (unsigned)(groups * qt), kRows * 32, smem_dq, stream(), a, qt, walk_batch,
               dout.data<T>(), lse.data<T>(), (const T*)D.data<T>(), dq.data<T>(), dbias_p, dqrel_p,
               dvrel_p ? prel.data<T>() : (T*)nullptr);
    CTX_CUDA_LAUNCH_CHECK("attn_dq_kernel");
    if (d.kv_stride() != d.S) {  // rows S.. of each (b, h) are not keys: their gradient is 0
      fill<T>(dk.data<T>(), dk.numel(), T(0));
      fill<T>(dv.data<T>(), dv.numel(), T(0));
    }
    const int64_t kt = cdiv(d.S, kRows);
    const size_t smem_kv = sizeof(T) * (size_t)((2 * kTile + 4 * kRows) * pad(d.Dh) + 2 * kTile + 2 * kRows * kTile);
    allow_shared(attn_dkdv_kernel<T>, smem_kv);
    CTX_LAUNCH(attn_dkdv_kernel<T>, (unsigned)(BH * kt), kRows * 32, smem_kv, stream(), a, kt, dout.data<T>(),
               lse.data<T>(), (const T*)D.data<T>(), dk.data<T>(), dv.data<T>(), dkrel_p);
    CTX_CUDA_LAUNCH_CHECK("attn_dkdv_kernel");
  } else {  // no queries (or no batch rows): nothing reaches k, v or the key terms
    fill<T>(dk.data<T>(), dk.numel(), T(0));
    fill<T>(dv.data<T>(), dv.numel(), T(0));
    if (dkrel_p) fill<T>(dkrel_p, drel.dkrel.numel(), T(0));
  }
  if (dvrel_p) {  // dvrel = prel^T dout in two fixed-order passes (K row chunks, then the chunks)
    const int64_t C = rel.Rq * d.Dh, K = column_chunks(N);
    fill<T>(dvrel_p, C, T(0));
    if (N > 0 && C > 0) {
      Tensor part = Tensor::empty({K, C}, q.dtype(), Device::CUDA);
      CTX_LAUNCH(attn_dvrel_partial_kernel<T>, grid_for(K * C), kThreads, 0, stream(), (const T*)prel.data<T>(),
                 dout.data<T>(), part.data<T>(), N, K, rel.Rq, d.Dh);
      CTX_CUDA_LAUNCH_CHECK("attn_dvrel_partial_kernel");
      column_sum_add<T>(part.data<T>(), dvrel_p, K, C);
    }
  }
}

}  // namespace

void attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                       Tensor& out, Tensor& lse, const AttnRel& rel) {
  CTX_CHECK(!rel.dist_bias.defined(), "cuda attention (SIMT): AttnRel::dist_bias reaches these kernels expanded ",
            "into the bias [H, T, S] (Backend::attention_forward does it: reads_dist_bias is false for them)");
  CTX_CUDA_DISPATCH_FLOAT(q.dtype(), "attention_forward", forward<T>(d, q, k, v, bias, out, lse, rel));
  ++g_forward_calls;
}

void attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                        Tensor& dv, Tensor& dbias, const AttnRel& rel, AttnRelGrad& drel) {
  CTX_CHECK(!rel.dist_bias.defined(), "cuda attention (SIMT): AttnRel::dist_bias reaches these kernels expanded ",
            "into the bias [H, T, S] (Backend::attention_backward does it)");
  CTX_CUDA_DISPATCH_FLOAT(q.dtype(), "attention_backward",
                          backward<T>(d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, drel));
  ++g_backward_calls;
}

void attention_row_dot(const float* dout, const float* out, float* D, int64_t N, int64_t Dh) {
  if (N == 0) return;
  CTX_LAUNCH(attn_rowdot_kernel<float>, (unsigned)std::min<int64_t>(cdiv(N, kRows), kMaxBlocks), kRows * 32, 0, stream(),
             dout, out, D, N, Dh);
  CTX_CUDA_LAUNCH_CHECK("attn_rowdot_kernel");
}

AttentionCalls attention_calls() { return {g_forward_calls.load(), g_backward_calls.load()}; }

}  // namespace ctx::cuda
