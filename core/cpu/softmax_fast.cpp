// core/cpu/softmax_fast.cpp — the vectorised masked softmax (softmax_fast.h): per row a max, an exp
// pass that stores e^(x - max) and sums it, a scale pass, each over the visible columns on whole
// vectors with a scalar tail; rows in parallel.
#include "core/cpu/softmax_fast.h"

#include <algorithm>
#include <cmath>

#include "core/cpu/hsum.h"
#include "core/cpu/parallel.h"
#include "core/cpu/simd.h"

namespace ctx::cpu {
namespace {

using V = Vec<float>;
constexpr int64_t W = kW<float>;

float row_max(const float* x, int64_t lo, int64_t hi) {
  float mx = -INFINITY;
  int64_t c = lo;
  if (hi - lo >= W) {
    V m = vload(x + c);
    for (c += W; c + W <= hi; c += W) {
      const V v = vload(x + c);
      m = v > m ? v : m;
    }
    for (int64_t t = 0; t < W; ++t) mx = std::max(mx, m[t]);
  }
  for (; c < hi; ++c) mx = std::max(mx, x[c]);
  return mx;
}

}  // namespace

void softmax_row_f32(const float* x, float* y, int64_t C, int64_t lo, int64_t hi) {
  const float mx = row_max(x, lo, hi);
  if (mx == -INFINITY) {  // no visible finite logit: 0, as the reference
    std::fill(y, y + C, 0.f);
    return;
  }
  const V vm = splat(mx);
  V acc = V{};
  int64_t c = lo;
  for (; c + W <= hi; c += W) {
    const V e = exp_vec(vload(x + c) - vm);
    vstore(y + c, e);
    acc += e;
  }
  float s = hsum_tree<float, kVecBytes>(&acc);
  for (; c < hi; ++c) s += y[c] = std::exp(x[c] - mx);
  const float inv = 1.f / s;
  const V vi = splat(inv);
  for (c = lo; c + W <= hi; c += W) vstore(y + c, vload(y + c) * vi);
  for (; c < hi; ++c) y[c] *= inv;
  std::fill(y, y + lo, 0.f);
  std::fill(y + hi, y + C, 0.f);
}

void softmax_backward_row_f32(const float* y, const float* dy, float* dx, int64_t C, int64_t lo, int64_t hi) {
  V acc = V{};
  int64_t c = lo;
  for (; c + W <= hi; c += W) acc += vload(dy + c) * vload(y + c);
  float s = hsum_tree<float, kVecBytes>(&acc);
  for (; c < hi; ++c) s += dy[c] * y[c];
  const V vs = splat(s);
  for (c = lo; c + W <= hi; c += W) vstore(dx + c, vload(y + c) * (vload(dy + c) - vs));
  for (; c < hi; ++c) dx[c] = y[c] * (dy[c] - s);
  std::fill(dx, dx + lo, 0.f);
  std::fill(dx + hi, dx + C, 0.f);
}

void causal_softmax_fast_f32(const float* x, float* y, int64_t N, int64_t C, CausalRows rows) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const int64_t lo = rows.lo(n), hi = std::max(lo, rows.hi(n, C));
    softmax_row_f32(x + n * C, y + n * C, C, lo, hi);
  });
}

void causal_softmax_backward_fast_f32(const float* y, const float* dy, float* dx, int64_t N, int64_t C,
                                      CausalRows rows) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const int64_t lo = rows.lo(n), hi = std::max(lo, rows.hi(n, C));
    softmax_backward_row_f32(y + n * C, dy + n * C, dx + n * C, C, lo, hi);
  });
}

}  // namespace ctx::cpu
