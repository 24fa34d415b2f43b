// autograd/kernels/gru_cell_cpu.cpp — the CPU kernels of the GRU cell (gru_cell.h, registered
// below for Device::CPU): one pass over [B, H] that reads the two gate projections and writes the
// new state and what the backward needs, instead of ~20 elementwise primitives and their
// temporaries per step. The reference is the composed loop in autograd/ops_gru.cpp
// (CTXLAB_FUSED_GRU=0); tests/test_backend_ops.cpp holds every device's kernels to short loops,
// and tests/test_posenc_survey.cpp the fused op to the composed one. Below them the CPU-only
// sequence kernels: the whole recurrence in one team region (what gru_sequence runs here).
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "autograd/kernels/gru_cell.h"
#include "core/bf16.h"
#include "core/cpu/parallel.h"
#include "core/cpu/simd.h"
#include "core/precision.h"
#include "core/team.h"

namespace ctx::kernels {
namespace {
using cpu::exp_vec;
using cpu::sigmoid_vec;
using cpu::kW;
using cpu::splat;
using cpu::Vec;
using cpu::vload;
using cpu::vstore;

template <class F>
inline F sigm(F x) {  // (1 + tanh(x / 2)) / 2, the composed path's formula
  return F(0.5) * std::tanh(F(0.5) * x) + F(0.5);
}

// One unit j of one row, the formulas of gru_cell.h; x, s point at unit j of the row's gate blocks
// (stride H between r, z and n): the input side x, the saved r | z | n s. The cell kernels and the
// sequence kernels below share these two.
template <class F>
inline void cell_forward(const F* x, F gr, F gz, F gn, F bhn, F p, int64_t H, F& h, F* s, F& hn) {
  const F r = sigm(x[0] + gr), z = sigm(x[H] + gz);
  const F hv = gn + bhn;
  const F n = std::tanh(x[2 * H] + r * hv);
  h = n + z * (p - n);
  s[0] = r, s[H] = z, s[2 * H] = n;
  hn = hv;
}
// g = dL/dh of the step; writes unit j's dAr | dAz | dNp to a and dAr | dAz | dNp r to c (stride
// H); returns g z (the caller adds d2 W_hh).
template <class F>
inline F cell_backward(F g, const F* s, F hn, F hp, int64_t H, F* a, F* c) {
  const F r = s[0], z = s[H], n = s[2 * H];
  const F dnp = (g - g * z) * (F(1) - n * n);
  const F dar = dnp * hn * (r * (F(1) - r));
  const F daz = g * (hp - n) * (z * (F(1) - z));
  a[0] = dar, a[H] = daz, a[2 * H] = dnp;
  c[0] = dar, c[H] = daz, c[2 * H] = dnp * r;
  return g * z;
}

template <class F>
void forward_kernel(const F* xg, const F* hg, const F* bhn, const F* hp, F* h, F* rzn, F* hn, int64_t B, int64_t H) {
  CTX_OMP_IF(cpu::parallel_pays(B * H * 2), "omp parallel for schedule(static)",
  for (int64_t b = 0; b < B; ++b) {
    const F* x = xg + b * 3 * H;
    const F* g = hg + b * 3 * H;
    F* s = rzn + b * 3 * H;
    for (int64_t j = 0; j < H; ++j)
      cell_forward(x + j, g[j], g[H + j], g[2 * H + j], bhn[j], hp[b * H + j], H, h[b * H + j], s + j, hn[b * H + j]);
  });
}

template <class F>
void backward_kernel(const F* gy, const F* dhc, const F* hp, const F* rzn, const F* hn, F* d1, F* d2, F* dh,
                     int64_t B, int64_t H) {
  CTX_OMP_IF(cpu::parallel_pays(B * H * 2), "omp parallel for schedule(static)",
  for (int64_t b = 0; b < B; ++b) {
    const F* s = rzn + b * 3 * H;
    F* a = d1 + b * 3 * H;
    F* c = d2 + b * 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = b * H + j;
      dh[i] = cell_backward(gy[i] + dhc[i], s + j, hn[i], hp[i], H, a + j, c + j);
    }
  });
}

// ---- the whole sequence as one team (gru_sequence_forward / _backward) ----
// The hidden units go in blocks of kU; a thread owns a contiguous run of blocks (Team::share) and
// packs, once per call, the part of W_hh its units need, zero past H:
//   forward  wf [block][k < H][gate][u < kU] = W_hh[gate H + block kU + u, k]  (its rows of W_hh)
//   backward wb [block][c < 3H][u < kU]      = W_hh[c, block kU + u]           (its columns)
// Per step a thread computes its units' hg = h_{t-1} W_hh^T (forward) or d2 W_hh (backward) from
// all of the previous step's h or this step's d2, then a barrier: one per step, because step t's
// products read what every thread wrote before. Every product sums k (or c) in order, one
// multiply-add per term into a vector lane, the same code for every unit: the bits do not depend
// on how the units are split, i.e. on the thread count.
constexpr int64_t kU = 16;

template <class F, bool Bf16>
inline F factor(F x) {  // a product's factor as the GEMM it replaces takes it (core/precision.h)
  if constexpr (Bf16) return bf16_round(x);
  else return x;
}

// acc[b][v] = sum_k a[b lda + k] w[k kU G + v lanes] for b < NB rows, G kU-unit gates (kU G / kW
// vectors per row), k < K.
template <class F, int NB, int G>
inline void tile_products(const F* a, int64_t lda, const F* w, int64_t K, Vec<F> (&acc)[NB][G * kU / kW<F>]) {
  constexpr int NV = G * kU / kW<F>;
  for (int b = 0; b < NB; ++b)
    for (int v = 0; v < NV; ++v) acc[b][v] = Vec<F>{};
  for (int64_t k = 0; k < K; ++k) {
    const F* wk = w + k * G * kU;
    Vec<F> wv[NV];
    for (int v = 0; v < NV; ++v) wv[v] = vload(wk + v * kW<F>);
    for (int b = 0; b < NB; ++b) {
      const Vec<F> x = splat(a[b * lda + k]);
      for (int v = 0; v < NV; ++v) acc[b][v] += x * wv[v];
    }
  }
}

// out[b][0 .. G kU) = the products of rows b < nb (1 <= nb <= NB): tile_products with NB fixed at
// compile time, dispatched on nb (each row's sums are the same whatever the tile).
template <class F, int G, int NB>
void row_products(const F* a, int64_t lda, const F* w, int64_t K, int nb, F (*out)[G * kU]) {
  if constexpr (NB > 1)
    if (nb < NB) return row_products<F, G, NB - 1>(a, lda, w, K, nb, out);
  constexpr int NV = G * kU / kW<F>;
  Vec<F> acc[NB][NV];
  tile_products<F, NB, G>(a, lda, w, K, acc);
  for (int b = 0; b < NB; ++b)
    for (int v = 0; v < NV; ++v) vstore(out[b] + v * kW<F>, acc[b][v]);
}

// The gates of one row's block of units (units <= kU of them; x, s: the block's first unit of the
// row's r | z | n blocks, stride H; g: its hg, r | z | n of kU each), cell_forward's formulas. f64
// (the tests' dtype) runs cell_forward itself; f32 a vector a gate, sigm and tanh through e^x
// (core/cpu/simd.h's sigmoid_vec, tanh_vec: within a few ulp of std::tanh's, the same code for
// every unit).
inline Vec<float> tanh_vec(Vec<float> x) {  // (1 - e) / (1 + e), e = e^-2|x|; |x| < 1/16: the series
  const Vec<float> ax = x < 0 ? -x : x, x2 = x * x, e = exp_vec(-2.0f * ax);
  const Vec<float> big = (1.0f - e) / (1.0f + e);
  const Vec<float> series = x + x * (x2 * (-1.0f / 3 + x2 * (2.0f / 15)));
  return ax < 0.0625f ? series : (x < 0 ? -big : big);
}
template <class F>
inline void block_gates(const F* x, const F (&g)[3 * kU], const F* bhn, const F* hp, int64_t H, int64_t units, F* h,
                        F* s, F* hn) {
  for (int64_t u = 0; u < units; ++u) cell_forward(x + u, g[u], g[kU + u], g[2 * kU + u], bhn[u], hp[u], H, h[u], s + u, hn[u]);
}
template <>
inline void block_gates(const float* x, const float (&g)[3 * kU], const float* bhn, const float* hp, int64_t H,
                        int64_t units, float* h, float* s, float* hn) {
  float in[5][kU] = {}, out[5][kU];  // x_r, x_z, x_n, hp, bhn -> h, r, z, n, hn (lanes past `units`: 0)
  for (int64_t u = 0; u < units; ++u)
    in[0][u] = x[u], in[1][u] = x[H + u], in[2][u] = x[2 * H + u], in[3][u] = hp[u], in[4][u] = bhn[u];
  for (int64_t v = 0; v < kU; v += kW<float>) {
    const Vec<float> r = sigmoid_vec<float>(vload(in[0] + v) + vload(g + v)), z = sigmoid_vec<float>(vload(in[1] + v) + vload(g + kU + v));
    const Vec<float> hv = vload(g + 2 * kU + v) + vload(in[4] + v), n = tanh_vec(vload(in[2] + v) + r * hv);
    vstore(out[0] + v, n + z * (vload(in[3] + v) - n));
    vstore(out[1] + v, r), vstore(out[2] + v, z), vstore(out[3] + v, n), vstore(out[4] + v, hv);
  }
  for (int64_t u = 0; u < units; ++u)
    h[u] = out[0][u], s[u] = out[1][u], s[H + u] = out[2][u], s[2 * H + u] = out[3][u], hn[u] = out[4][u];
}

template <class F, bool Bf16>
void sequence_forward_kernel(const F* xg, const F* wh, const F* bhn, F* Hs, F* rzn, F* hn, int64_t T, int64_t B,
                             int64_t H) {
  constexpr int NB = 4;  // rows per tile: 4 x 3 gates x kU accumulators
  const int64_t blocks = (H + kU - 1) / kU;
  std::vector<F> wf(blocks * H * 3 * kU);
  // bf16 products: hr[t % 2] holds step t's factors, h_{t-1} rounded (written as h_{t-1} is, each
  // thread its units; step t + 1 writes the other half, which nobody reads after step t - 1).
  std::vector<F> hr(Bf16 ? 2 * B * H : 0);
  run_team(cpu::threads_for(B * 3 * H * H / kW<F>), [&](const Team& tm) {
    const std::pair<int64_t, int64_t> mine = tm.share(blocks);
    for (int64_t blk = mine.first; blk < mine.second; ++blk)
      for (int64_t k = 0; k < H; ++k)
        for (int64_t g = 0; g < 3; ++g)
          for (int64_t u = 0; u < kU; ++u) {
            const int64_t j = blk * kU + u;
            wf[((blk * H + k) * 3 + g) * kU + u] = j < H ? factor<F, Bf16>(wh[(g * H + j) * H + k]) : F(0);
          }
    const int64_t u0 = mine.first * kU, u1 = std::min(H, mine.second * kU);  // my units
    if constexpr (Bf16) {
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = u0; j < u1; ++j) hr[b * H + j] = factor<F, Bf16>(Hs[b * H + j]);
      tm.barrier();  // step 0 reads every unit of the rounded h_{-1}
    }
    F hg[NB][3 * kU];
    for (int64_t t = 0; t < T; ++t) {
      const F* hp = Hs + t * B * H;
      F* h = Hs + (t + 1) * B * H;
      const F* factors = Bf16 ? hr.data() + (t % 2) * B * H : hp;
      for (int64_t blk = mine.first; blk < mine.second; ++blk) {
        const int64_t j0 = blk * kU, units = std::min(kU, H - j0);
        for (int64_t b0 = 0; b0 < B; b0 += NB) {
          const int nb = (int)std::min<int64_t>(NB, B - b0);
          row_products<F, 3, NB>(factors + b0 * H, H, wf.data() + blk * H * 3 * kU, H, nb, hg);
          for (int b = 0; b < nb; ++b) {
            const int64_t row = t * B + b0 + b;
            block_gates(xg + row * 3 * H + j0, hg[b], bhn + j0, hp + (b0 + b) * H + j0, H, units,
                        h + (b0 + b) * H + j0, rzn + row * 3 * H + j0, hn + row * H + j0);
          }
        }
      }
      if constexpr (Bf16)
        for (int64_t b = 0; b < B; ++b)
          for (int64_t j = u0; j < u1; ++j) hr[((t + 1) % 2) * B * H + b * H + j] = factor<F, Bf16>(h[b * H + j]);
      tm.barrier();  // step t + 1 reads every unit of h_t
    }
  });
}

template <class F, bool Bf16>
void sequence_backward_kernel(const F* gy, const F* wh, const F* Hs, const F* rzn, const F* hn, F* d1, F* d2,
                              int64_t T, int64_t B, int64_t H) {
  constexpr int NB = 8;  // rows per tile: 8 x kU accumulators
  const int64_t blocks = (H + kU - 1) / kU;
  std::vector<F> wb(blocks * 3 * H * kU), dh(B * H, F(0));  // dh: dL/dh_t flowing back, each thread its units
  std::vector<F> d2r(Bf16 ? 2 * B * 3 * H : 0);  // bf16 products: d2[t] rounded in d2r[t % 2] (as hr above)
  run_team(cpu::threads_for(B * 3 * H * H / kW<F>), [&](const Team& tm) {
    const std::pair<int64_t, int64_t> mine = tm.share(blocks);
    for (int64_t blk = mine.first; blk < mine.second; ++blk)
      for (int64_t c = 0; c < 3 * H; ++c)
        for (int64_t u = 0; u < kU; ++u) {
          const int64_t j = blk * kU + u;
          wb[(blk * 3 * H + c) * kU + u] = j < H ? factor<F, Bf16>(wh[c * H + j]) : F(0);
        }
    const int64_t u0 = mine.first * kU, u1 = std::min(H, mine.second * kU);  // my units
    F back[NB][kU];
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t r0 = t * B;  // this step's first row of [T B, .]
      F* rounded = Bf16 ? d2r.data() + (t % 2) * B * 3 * H : nullptr;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = u0; j < u1; ++j) {
          const int64_t row = r0 + b, i = row * H + j;
          F* c = d2 + row * 3 * H + j;
          dh[b * H + j] = cell_backward(gy[i] + dh[b * H + j], rzn + row * 3 * H + j, hn[i], Hs[i], H,
                                        d1 + row * 3 * H + j, c);
          if constexpr (Bf16)
            for (int64_t g = 0; g < 3; ++g) rounded[b * 3 * H + g * H + j] = factor<F, Bf16>(c[g * H]);
        }
      if (t == 0) break;  // nothing flows back from the first step
      tm.barrier();       // the products below read every unit of d2[t]
      for (int64_t blk = mine.first; blk < mine.second; ++blk) {
        const int64_t j0 = blk * kU, units = std::min(kU, H - j0);
        for (int64_t b0 = 0; b0 < B; b0 += NB) {
          const int nb = (int)std::min<int64_t>(NB, B - b0);
          const F* factors = Bf16 ? rounded + b0 * 3 * H : d2 + (r0 + b0) * 3 * H;
          row_products<F, 1, NB>(factors, 3 * H, wb.data() + blk * 3 * H * kU, 3 * H, nb, back);
          for (int b = 0; b < nb; ++b)
            for (int64_t u = 0; u < units; ++u) dh[(b0 + b) * H + j0 + u] += back[b][u];
        }
      }
    }
  });
}

// The arguments are checked (gru_cell.cpp) before these run.
void forward(const Tensor& xg, const Tensor& hg, const Tensor& bhn, const Tensor& hp, Tensor& h, Tensor& rzn,
             Tensor& hn) {
  const int64_t B = hp.size(0), H = hp.size(1);
  if (hp.dtype() == DType::F32)
    forward_kernel(xg.data<float>(), hg.data<float>(), bhn.data<float>(), hp.data<float>(), h.data<float>(),
                   rzn.data<float>(), hn.data<float>(), B, H);
  else
    forward_kernel(xg.data<double>(), hg.data<double>(), bhn.data<double>(), hp.data<double>(), h.data<double>(),
                   rzn.data<double>(), hn.data<double>(), B, H);
}

void backward(const Tensor& gy, const Tensor& dhc, const Tensor& hp, const Tensor& rzn, const Tensor& hn, Tensor& d1,
              Tensor& d2, Tensor& dh) {
  const int64_t B = hp.size(0), H = hp.size(1);
  if (hp.dtype() == DType::F32)
    backward_kernel(gy.data<float>(), dhc.data<float>(), hp.data<float>(), rzn.data<float>(), hn.data<float>(),
                    d1.data<float>(), d2.data<float>(), dh.data<float>(), B, H);
  else
    backward_kernel(gy.data<double>(), dhc.data<double>(), hp.data<double>(), rzn.data<double>(), hn.data<double>(),
                    d1.data<double>(), d2.data<double>(), dh.data<double>(), B, H);
}

// fp32 products in bf16 where the GEMMs they replace would be (core/precision.h).
bool bf16_products() { return gemm_precision() == Precision::BF16; }

void sequence_forward(const Tensor& xg, const Tensor& wh, const Tensor& bhn, Tensor& Hs, Tensor& rzn, Tensor& hn) {
  const int64_t T = hn.size(0), B = hn.size(1), H = hn.size(2);
  if (hn.dtype() == DType::F64) {
    sequence_forward_kernel<double, false>(xg.data<double>(), wh.data<double>(), bhn.data<double>(),
                                           Hs.data<double>(), rzn.data<double>(), hn.data<double>(), T, B, H);
    return;
  }
  auto run = [&](auto kernel) {
    kernel(xg.data<float>(), wh.data<float>(), bhn.data<float>(), Hs.data<float>(), rzn.data<float>(),
           hn.data<float>(), T, B, H);
  };
  if (bf16_products()) run(&sequence_forward_kernel<float, true>);
  else run(&sequence_forward_kernel<float, false>);
}

void sequence_backward(const Tensor& gy, const Tensor& wh, const Tensor& Hs, const Tensor& rzn, const Tensor& hn,
                       Tensor& d1, Tensor& d2) {
  const int64_t T = hn.size(0), B = hn.size(1), H = hn.size(2);
  if (hn.dtype() == DType::F64) {
    sequence_backward_kernel<double, false>(gy.data<double>(), wh.data<double>(), Hs.data<double>(),
                                            rzn.data<double>(), hn.data<double>(), d1.data<double>(),
                                            d2.data<double>(), T, B, H);
    return;
  }
  auto run = [&](auto kernel) {
    kernel(gy.data<float>(), wh.data<float>(), Hs.data<float>(), rzn.data<float>(), hn.data<float>(),
           d1.data<float>(), d2.data<float>(), T, B, H);
  };
  if (bf16_products()) run(&sequence_backward_kernel<float, true>);
  else run(&sequence_backward_kernel<float, false>);
}

[[maybe_unused]] const bool g_registered = (gru_cell_forward.add(Device::CPU, &forward, __FILE__),
                                            gru_cell_backward.add(Device::CPU, &backward, __FILE__),
                                            gru_sequence_forward.add(Device::CPU, &sequence_forward, __FILE__),
                                            gru_sequence_backward.add(Device::CPU, &sequence_backward, __FILE__),
                                            true);

}  // namespace
}  // namespace ctx::kernels
