// tests/test_tc_attention.cpp — the tensor-core FlashAttention-2 kernels (core/cuda/attention_tc.h)
// through the CUDA backend (--precision bf16, CTXLAB_BF16_ATTENTION on), held to a double reference
// on the bf16-rounded q, k, v, dout, per element within a bound derived from the kernels' own
// roundings: P (forward, dV) and dS (dQ, dK) are rounded to bf16 before their products (relative
// error up to bf16's unit roundoff 2^-8 each; the bound takes twice that of the summed
// magnitudes, a margin for a GPU's own fp32 order and exp), (Dh + S + 16) 2^-24 of the
// magnitudes for the fp32 sums, and in dS the error of the kernel's D_i = dout_i . out_i (fp32
// dout, its own out). Shapes: T not a multiple of the 64-row tiles, S > T, a window of one key
// (each query sees itself alone), sliding windows (tiles skipped), Dh 32, 64, 128, one query;
// each plain and with a distance table (AttnRel::dist_bias [H, S + 5], read in the tiles; its
// gradient ddist_bias from the per-tile diagonal sums against the reference's sum of dS by
// distance, within the sum of the dS bounds).
// Every case runs both block shapes of the forward (CTXLAB_TC_FORWARD_ROWS) and of the backward
// (CTXLAB_TC_BACKWARD_ROWS: 16 or 32 rows a warp) with bitwise-equal results.
// Under the emulator every case also runs, both shapes, under the forward, reverse and shuffled thread
// schedules with bitwise-equal results (the race detector run, backend_racecheck, includes
// BackendOpsEmu.*). The attention op is causal by contract (S >= T): no non-causal case.
#ifdef CTXLAB_WITH_CUDA
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/bf16.h"
#include "core/cuda/attention.h"     // attention_calls: the SIMT kernels were not used
#include "core/cuda/attention_tc.h"  // set_tc_forward_rows, set_tc_backward_rows
#include "core/cuda/cuda_runtime.h"
#include "core/fast_paths.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/tensor.h"
#ifdef CTXLAB_CUDA_EMULATOR
#include "core/cuda/emu/emu_runtime.h"
#endif

namespace {
using namespace ctx;

struct TcCase {
  int64_t B, H, T, S, Dh, window;
};
const TcCase kCases[] = {{1, 2, 100, 100, 64, 0}, {2, 1, 64, 64, 64, 0},  {1, 1, 70, 150, 64, 0},
                         {1, 2, 130, 130, 64, 40}, {1, 1, 20, 20, 64, 1},  {1, 1, 50, 50, 32, 7},
                         {1, 1, 33, 40, 128, 0},   {1, 1, 1, 65, 64, 0},   {1, 1, 78, 92, 64, 0},
                         {1, 1, 200, 200, 64, 79}, {1, 1, 260, 300, 32, 0}};
// (78, 92: S - T = 14 leaves a warp's 16 x 64 tile one key short of unmasked; 200 with window 79
// one key short of inside the window: the kernels' unmasked-tile test, sees_all, at its edges)
// (260 of 300: three forward blocks of 128 queries, the last of 4, with S - T = 40)

std::string name(const TcCase& c) {
  return "B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " T" + std::to_string(c.T) + " S" +
         std::to_string(c.S) + " Dh" + std::to_string(c.Dh) + " window " + std::to_string(c.window);
}

std::vector<float> uniform(int64_t n, uint64_t seed, double lo, double hi) {
  Rng r(seed);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = (float)r.uniform(lo, hi);
  return v;
}
Tensor on_device(const std::vector<float>& v, const Shape& s) {
  Tensor t = Tensor::empty(s, DType::F32);
  std::memcpy(t.data<float>(), v.data(), v.size() * sizeof(float));
  return t.to(Device::CUDA);
}
std::vector<float> to_host(const Tensor& t) {
  const Tensor h = t.to(Device::CPU);
  return std::vector<float>(h.data<float>(), h.data<float>() + h.numel());
}

struct Inputs {
  std::vector<float> q, k, v, g;  // g: dout
  std::vector<float> tab;         // the distance table [H, n], or empty
  int64_t n = 0;
};
Inputs inputs(const TcCase& c, bool table = false) {
  Inputs in{uniform(c.B * c.H * c.T * c.Dh, 11, -2, 2), uniform(c.B * c.H * c.S * c.Dh, 12, -2, 2),
            uniform(c.B * c.H * c.S * c.Dh, 13, -1, 1), uniform(c.B * c.H * c.T * c.Dh, 14, -1, 1), {}, 0};
  if (table) in.n = c.S + 5, in.tab = uniform(c.H * in.n, 15, -3, 1);  // entries from S on are never read
  return in;
}
AttnDims dims(const TcCase& c) {
  AttnDims d;
  d.B = c.B, d.H = c.H, d.T = c.T, d.S = c.S, d.Dh = c.Dh, d.window = c.window;
  d.scale = 1.0 / std::sqrt((double)c.Dh);
  return d;
}

// out, lse, dq, dk, dv (, ddist_bias) from the CUDA backend on the tensor-core path; with a table
// and table_grad false, the call asks no gradient of it (as alibi's and sandwich's fixed tables)
std::vector<std::vector<float>> run_device(const TcCase& c, const Inputs& in, bool table_grad = true) {
  const AttnDims d = dims(c);
  const Shape qs{c.B, c.H, c.T, c.Dh}, ks{c.B, c.H, c.S, c.Dh};
  Backend& be = backend(Device::CUDA);
  Tensor q = on_device(in.q, qs), k = on_device(in.k, ks), v = on_device(in.v, ks), g = on_device(in.g, qs);
  Tensor out = Tensor::empty(qs, DType::F32, Device::CUDA), lse = Tensor::empty({c.B, c.H, c.T}, DType::F32, Device::CUDA);
  Tensor dq = Tensor::empty(qs, DType::F32, Device::CUDA), dk = Tensor::empty(ks, DType::F32, Device::CUDA),
         dv = Tensor::empty(ks, DType::F32, Device::CUDA), none;
  AttnRel rel;
  AttnRelGrad drel;
  if (!in.tab.empty()) {
    rel.dist_bias = on_device(in.tab, {c.H, in.n});
    if (table_grad) drel.ddist_bias = Tensor::empty({c.H, in.n}, DType::F32, Device::CUDA);
  }
  be.attention_forward(d, q, k, v, none, out, lse, rel);
  be.attention_backward(d, q, k, v, none, out, lse, g, dq, dk, dv, none, rel, drel);
  std::vector<std::vector<float>> r = {to_host(out), to_host(lse), to_host(dq), to_host(dk), to_host(dv)};
  if (drel.ddist_bias.defined()) r.push_back(to_host(drel.ddist_bias));
  return r;
}

// The reference in double on the bf16-rounded inputs, and each element's error bound.
struct Ref {
  std::vector<double> val[6], bound[6];  // out, lse, dq, dk, dv, ddist_bias (with a table)
  int outputs = 5;
};
Ref reference(const TcCase& c, const Inputs& in) {
  const int64_t T = c.T, S = c.S, Dh = c.Dh, off = S - T;
  const double sc = 1.0 / std::sqrt((double)Dh), u = 2 * std::ldexp(1.0, -8), f32 = (double)(Dh + S + 16) * std::ldexp(1.0, -24);
  auto r16 = [](const std::vector<float>& x) {
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = bf16_round(x[i]);
    return y;
  };
  const std::vector<double> q = r16(in.q), k = r16(in.k), v = r16(in.v), g = r16(in.g);
  Ref R;
  const bool table = !in.tab.empty();
  R.outputs = table ? 6 : 5;
  const size_t sizes[6] = {q.size(), (size_t)(c.B * c.H * T), q.size(), k.size(), k.size(), in.tab.size()};
  for (int o = 0; o < R.outputs; ++o) R.val[o].assign(sizes[o], 0.0), R.bound[o].assign(sizes[o], 0.0);
  // the table's entry of (i, j) in head h (fp32 values: exact in double), at distance i + off - j
  auto bias = [&](int64_t bh, int64_t i, int64_t j) {
    return table ? (double)in.tab[(size_t)((bh % c.H) * in.n + i + off - j)] : 0.0;
  };
  std::vector<double> p((size_t)S), ds((size_t)S), eds((size_t)S), dot((size_t)S);
  for (int64_t bh = 0; bh < c.B * c.H; ++bh)
    for (int64_t i = 0; i < T; ++i) {
      const double* qi = &q[(size_t)((bh * T + i) * Dh)];
      const double* gi = &g[(size_t)((bh * T + i) * Dh)];
      double mx = -INFINITY, absdot = 0;
      for (int64_t j = 0; j < S; ++j) {
        const bool seen = j <= i + off && (c.window <= 0 || j > i + off - c.window);
        double s = 0, a = 0;
        for (int64_t e = 0; e < Dh; ++e) s += qi[e] * k[(size_t)((bh * S + j) * Dh + e)], a += std::fabs(qi[e] * k[(size_t)((bh * S + j) * Dh + e)]);
        dot[(size_t)j] = seen ? sc * s + bias(bh, i, j) : -INFINITY;
        absdot = std::max(absdot, sc * a + (seen ? std::fabs(bias(bh, i, j)) : 0.0));
        mx = std::max(mx, dot[(size_t)j]);
      }
      const size_t n = (size_t)(bh * T + i);
      if (mx == -INFINITY) {
        R.val[1][n] = INFINITY;
        continue;  // out, dq stay 0
      }
      double sum = 0;
      for (int64_t j = 0; j < S; ++j) sum += std::exp(dot[(size_t)j] - mx);
      const double L = mx + std::log(sum);
      R.val[1][n] = L;
      R.bound[1][n] = f32 * (absdot + std::fabs(L) + 1);
      for (int64_t j = 0; j < S; ++j) p[(size_t)j] = std::exp(dot[(size_t)j] - L);
      double Di = 0, dD = 0;  // dD: the error of the kernel's D_i (fp32 dout . its own out)
      for (int64_t e = 0; e < Dh; ++e) {
        double o = 0, ob = 0;
        for (int64_t j = 0; j < S; ++j) o += p[(size_t)j] * v[(size_t)((bh * S + j) * Dh + e)], ob += p[(size_t)j] * std::fabs(v[(size_t)((bh * S + j) * Dh + e)]);
        R.val[0][n * Dh + e] = o;
        R.bound[0][n * Dh + e] = u * ob + f32 * ob * (absdot + 1);
        Di += gi[e] * o;
        dD += u * std::fabs(gi[e] * o) + std::fabs(gi[e]) * R.bound[0][n * Dh + e];
      }
      for (int64_t j = 0; j < S; ++j) {
        double dp = 0, dpa = 0;
        for (int64_t e = 0; e < Dh; ++e) dp += gi[e] * v[(size_t)((bh * S + j) * Dh + e)], dpa += std::fabs(gi[e] * v[(size_t)((bh * S + j) * Dh + e)]);
        ds[(size_t)j] = p[(size_t)j] * (dp - Di);
        // ds's error: its bf16 rounding, D's error, the fp32 dot products behind p and dp
        eds[(size_t)j] = u * std::fabs(ds[(size_t)j]) + p[(size_t)j] * (dD + f32 * (dpa + (absdot + 1) * std::fabs(dp - Di)));
      }
      for (int64_t j = 0; j < S; ++j) {
        if (p[(size_t)j] == 0) continue;
        if (table) {  // dS summed by distance over the batch: fp32, not rounded to bf16 (no u |ds|)
          const size_t r = (size_t)((bh % c.H) * in.n + i + off - j);
          R.val[5][r] += ds[(size_t)j];
          R.bound[5][r] += eds[(size_t)j] - u * std::fabs(ds[(size_t)j]) + f32 * std::fabs(ds[(size_t)j]);
        }
        const size_t kj = (size_t)((bh * S + j) * Dh);
        for (int64_t e = 0; e < Dh; ++e) {
          R.val[2][n * Dh + e] += sc * ds[(size_t)j] * k[kj + e];
          R.bound[2][n * Dh + e] += sc * eds[(size_t)j] * std::fabs(k[kj + e]);
          R.val[3][kj + e] += sc * ds[(size_t)j] * qi[e];
          R.bound[3][kj + e] += sc * eds[(size_t)j] * std::fabs(qi[e]);
          R.val[4][kj + e] += p[(size_t)j] * gi[e];
          R.bound[4][kj + e] += (u + f32 * (absdot + 1)) * p[(size_t)j] * std::fabs(gi[e]);
        }
      }
    }
  return R;
}

const char* kOut[6] = {"out", "lse", "dq", "dk", "dv", "ddist_bias"};

// every element within its bound (infinities equal); returns the largest error / bound seen
double expect_within(const TcCase& c, const std::vector<std::vector<float>>& got, const Ref& R) {
  double worst = 0;
  if ((int)got.size() != R.outputs) ADD_FAILURE() << name(c) << ": " << got.size() << " outputs";
  for (int o = 0; o < std::min<int>(R.outputs, (int)got.size()); ++o) {
    if (got[o].size() != R.val[o].size()) {
      ADD_FAILURE() << name(c) << " " << kOut[o] << ": " << got[o].size() << " elements";
      continue;
    }
    int bad = 0;
    for (size_t i = 0; i < got[o].size(); ++i) {
      const double want = R.val[o][i], x = got[o][i];
      if (std::isinf(want)) {
        if (x != want && bad++ < 3) ADD_FAILURE() << name(c) << " " << kOut[o] << "[" << i << "] = " << x << ", want " << want;
        continue;
      }
      const double tol = R.bound[o][i] + 1e-30, err = std::fabs(x - want);
      worst = std::max(worst, err / tol);
      if (!(err <= tol) && bad++ < 3)
        ADD_FAILURE() << name(c) << " " << kOut[o] << "[" << i << "] = " << x << ", want " << want << " (bound " << tol << ")";
    }
  }
  return worst;
}

// the tensor-core path on for the scope: --precision bf16 and the Bf16Attention switch
struct TensorCorePath {
  PrecisionScope bf16{Precision::BF16};
  TensorCorePath() { set_fast_path(FastPath::Bf16Attention, true); }
  ~TensorCorePath() { reset_fast_path(FastPath::Bf16Attention); }
};

bool cuda_device() { return cuda::emulated() || cuda::device_count() > 0; }

TEST(BackendOpsCuda, TensorCoreAttentionWithinItsBf16Bound) {
  if (!cuda_device()) GTEST_SKIP() << "skipped: no GPU (cuda::device_count() is 0)";
  TensorCorePath on;
  double worst = 0;
  for (const TcCase& c : kCases)
  for (const bool table : {false, true}) {
    SCOPED_TRACE(table ? "with a distance table" : "plain");
    const Inputs in = inputs(c, table);
    const cuda::AttentionCalls before = cuda::attention_calls();
    const cuda::TcAttentionCalls tc0 = cuda::tc_attention_calls();
    const std::vector<std::vector<float>> got = run_device(c, in);
    EXPECT_EQ(cuda::attention_calls().forward, before.forward) << name(c) << ": took the SIMT kernels";
    EXPECT_EQ(cuda::tc_attention_calls().dist_forward - tc0.dist_forward, table ? 1u : 0u) << name(c);
    worst = std::max(worst, expect_within(c, got, reference(c, in)));
    // the forward's other block shape (64 query rows for Dh <= 64): the same bits
    const int other = cuda::tc_forward_rows() == 128 ? 64 : 128;
    cuda::set_tc_forward_rows(other);
    EXPECT_EQ(run_device(c, in), got) << name(c) << ": forward blocks of " << other << " rows differ";
    cuda::set_tc_forward_rows(0);
    // the backward's other block shape (128 rows, 32 a warp; dK/dV for Dh <= 64): the same bits; with
    // a table whose gradient is not wanted too (the wide dQ pass without its diagonal sums)
    const int wide = cuda::tc_backward_rows() == 128 ? 64 : 128;
    const cuda::TcAttentionCalls w0 = cuda::tc_attention_calls();
    cuda::set_tc_backward_rows(wide);
    EXPECT_EQ(run_device(c, in), got) << name(c) << ": backward blocks of " << wide << " rows differ";
    if (table) {
      const std::vector<std::vector<float>> five(got.begin(), got.begin() + 5);
      EXPECT_EQ(run_device(c, in, false), five) << name(c) << ": backward blocks of " << wide << " rows differ";
    }
    const cuda::TcAttentionCalls w1 = cuda::tc_attention_calls();
    cuda::set_tc_backward_rows(0);
    if (wide == 128) {  // the wide kernels ran (dK/dV for Dh <= 64)
      EXPECT_EQ(w1.wide_dkdv - w0.wide_dkdv, c.Dh > 64 ? 0u : table ? 2u : 1u) << name(c);
      EXPECT_EQ(w1.wide_dq - w0.wide_dq, table ? 2u : 1u) << name(c);
    }
  }
  std::printf("tensor-core attention: largest error / bound %.3g\n", worst);
  EXPECT_GT(worst, 0.01) << "the bound is more than 100x the largest observed error";
}

TEST(BackendOpsCuda, TensorCoreAttentionStaysOffUnlessAsked) {
  if (!cuda_device()) GTEST_SKIP() << "skipped: no GPU (cuda::device_count() is 0)";
  const TcCase c{1, 1, 9, 9, 64, 0};
  const cuda::AttentionCalls before = cuda::attention_calls();
  run_device(c, inputs(c));  // fp32 precision: the SIMT kernels
  EXPECT_EQ(cuda::attention_calls().forward, before.forward + 1);
  EXPECT_EQ(cuda::attention_calls().backward, before.backward + 1);
}

#ifdef CTXLAB_CUDA_EMULATOR
TEST(BackendOpsEmu, TensorCoreAttentionIsTheSameUnderEveryThreadSchedule) {
  TensorCorePath on;
  const cuemu::Schedule saved = cuemu::schedule();
  for (const int rows : {64, 128})  // both block shapes of the forward and the backward
  for (const TcCase& c : kCases)
  for (const bool table : {false, true}) {
    SCOPED_TRACE(table ? "with a distance table" : "plain");
    SCOPED_TRACE("blocks of " + std::to_string(rows) + " rows");
    cuda::set_tc_forward_rows(rows);
    cuda::set_tc_backward_rows(rows);
    const Inputs in = inputs(c, table);
    cuemu::set_schedule(cuemu::Schedule::Forward);
    const auto f = run_device(c, in);
    cuemu::set_schedule(cuemu::Schedule::Reverse);
    const auto r = run_device(c, in);
    cuemu::set_schedule(cuemu::Schedule::Shuffle, 5);
    const auto s = run_device(c, in);
    ASSERT_EQ(f.size(), r.size());
    ASSERT_EQ(f.size(), s.size());
    for (size_t o = 0; o < f.size(); ++o) {
      EXPECT_EQ(std::memcmp(f[o].data(), r[o].data(), f[o].size() * 4), 0) << name(c) << " " << kOut[o] << ": reverse";
      EXPECT_EQ(std::memcmp(f[o].data(), s[o].data(), f[o].size() * 4), 0) << name(c) << " " << kOut[o] << ": shuffle";
    }
    expect_within(c, s, reference(c, in));
    if (table) {  // the table without its gradient: no diagonal sums
      cuemu::set_schedule(cuemu::Schedule::Reverse);
      const auto r5 = run_device(c, in, false);
      cuemu::set_schedule(cuemu::Schedule::Shuffle, 7);
      EXPECT_EQ(run_device(c, in, false), r5) << name(c) << ": no table gradient, shuffle against reverse";
      EXPECT_EQ(r5, std::vector<std::vector<float>>(f.begin(), f.begin() + 5)) << name(c);
    }
  }
  cuda::set_tc_forward_rows(0);
  cuda::set_tc_backward_rows(0);
  cuemu::set_schedule(saved);
}
#endif

}  // namespace
#endif
