// tests/test_onednn_ops.cpp — the oneDNN fast paths (softmax, log-softmax, layer norm, tanh-GELU;
// forward and backward) against plain double-precision loops written here, on odd shapes;
// plus the primitive cache and the CTXLAB_ONEDNN_OPS policy names.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu/onednn_ops.h"
#include "core/threads.h"
#include "core/error.h"

namespace ctx::cpu {
namespace {

std::vector<float> normal_vec(int64_t n, uint32_t seed, float scale = 1.f, float shift = 0.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d;
  std::vector<float> v((size_t)n);
  for (float& x : v) x = shift + scale * d(rng);
  return v;
}

// Element-wise |got - want| <= tol * (1 + |want|), with tol a few hundred f32 eps: the fast
// paths compute in f32 with reductions over C (and oneDNN's own exp/tanh approximations).
constexpr double kTol = 256 * std::numeric_limits<float>::epsilon();

void expect_close(const std::vector<float>& got, const std::vector<double>& want, const char* what,
                  double tol = kTol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << what << " element " << i;
}

// ---- double-precision references: rows of [N, C] ----
std::vector<double> softmax_ref(const std::vector<float>& x, int64_t N, int64_t C, bool log) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = &x[(size_t)(n * C)];
    double mx = -INFINITY, s = 0;
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, (double)xr[c]);
    for (int64_t c = 0; c < C; ++c) s += std::exp(xr[c] - mx);
    for (int64_t c = 0; c < C; ++c)
      y[(size_t)(n * C + c)] = log ? xr[c] - mx - std::log(s) : std::exp(xr[c] - mx) / s;
  }
  return y;
}

// softmax: dx = y (dy - sum(dy y)); log_softmax: dx = dy - exp(y) sum(dy)
std::vector<double> softmax_bwd_ref(const std::vector<float>& y, const std::vector<float>& dy,
                                    int64_t N, int64_t C, bool log) {
  std::vector<double> dx(y.size());
  for (int64_t n = 0; n < N; ++n) {
    const size_t r = (size_t)(n * C);
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += log ? (double)dy[r + c] : (double)dy[r + c] * y[r + c];
    for (int64_t c = 0; c < C; ++c)
      dx[r + c] = log ? dy[r + c] - std::exp((double)y[r + c]) * s : y[r + c] * (dy[r + c] - s);
  }
  return dx;
}

struct LayerNormRef {
  std::vector<double> y, mean, rstd;
};
LayerNormRef layernorm_ref(const std::vector<float>& x, const std::vector<float>& w,
                           const float* b, double eps, int64_t N, int64_t C) {
  LayerNormRef r{std::vector<double>(x.size()), std::vector<double>(N), std::vector<double>(N)};
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = &x[(size_t)(n * C)];
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += xr[c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double rs = 1 / std::sqrt(v / C + eps);
    r.mean[n] = m, r.rstd[n] = rs;
    for (int64_t c = 0; c < C; ++c)
      r.y[(size_t)(n * C + c)] = (xr[c] - m) * rs * w[c] + (b ? b[c] : 0.0);
  }
  return r;
}

// xhat = (x - mean) rstd, g = dy w: dx = rstd (g - mean(g) - xhat mean(g xhat));
// dw += sum_n dy xhat, db += sum_n dy
void layernorm_bwd_ref(const std::vector<float>& dy, const std::vector<float>& x,
                       const std::vector<float>& w, const std::vector<float>& mean,
                       const std::vector<float>& rstd, int64_t N, int64_t C,
                       std::vector<double>& dx, std::vector<double>& dw, std::vector<double>& db) {
  dx.assign(x.size(), 0);
  for (int64_t n = 0; n < N; ++n) {
    const size_t r = (size_t)(n * C);
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[r + c] - (double)mean[n]) * rstd[n], g = (double)dy[r + c] * w[c];
      mg += g, mgx += g * xh;
      dw[c] += dy[r + c] * xh, db[c] += dy[r + c];
    }
    mg /= C, mgx /= C;
    for (int64_t c = 0; c < C; ++c) {
      const double xh = (x[r + c] - (double)mean[n]) * rstd[n], g = (double)dy[r + c] * w[c];
      dx[r + c] = rstd[n] * (g - mg - xh * mgx);
    }
  }
}

double gelu_ref(double x) {
  const double k = std::sqrt(2 / M_PI);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double k = std::sqrt(2 / M_PI), u = k * (x + 0.044715 * x * x * x), t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// oneDNN's avx512_core ISA level (what its JIT softmax backward needs).
bool avx512_core() {
  static const bool has = [] {
    const bool b = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
    std::printf("CPU avx512_core: %s (oneDNN softmax backward %s)\n", b ? "yes" : "no",
                b ? "must be taken" : "must decline");
    return b;
  }();
  return has;
}

const int64_t kShapes[][2] = {{1, 1}, {3, 17}, {17, 65}, {65, 3}, {33, 256}, {130, 1000}};

class OneDNNOps : public ::testing::Test {
 protected:
  void SetUp() override { init_threading(); }
};

TEST_F(OneDNNOps, SoftmaxAndLogSoftmaxForwardBackward) {
  uint32_t seed = 1;
  for (const auto& s : kShapes)
    for (bool log : {false, true}) {
      const int64_t N = s[0], C = s[1];
      SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " log=" << log);
      const std::vector<float> x = normal_vec(N * C, seed++, 3.f), dy = normal_vec(N * C, seed++);
      std::vector<float> y(x.size()), dx(x.size());
      ASSERT_TRUE(onednn_softmax_f32(x.data(), y.data(), N, C, log));
      expect_close(y, softmax_ref(x, N, C, log), "y");
      // oneDNN 2.6 has a JIT softmax backward only for AVX-512 (avx512_core): there it must be
      // taken and right; on a CPU without it the call declines (its "ref:any" loops are slower
      // than ours) and leaves dx untouched.
      const bool taken = onednn_softmax_backward_f32(y.data(), dy.data(), dx.data(), N, C, log);
      if (avx512_core()) {
        ASSERT_TRUE(taken) << "oneDNN declined softmax backward on an AVX-512 CPU";
        expect_close(dx, softmax_bwd_ref(y, dy, N, C, log), "dx");
      } else {
        ASSERT_FALSE(taken) << "oneDNN took softmax backward without AVX-512 (its ref:any path?)";
        for (float v : dx) ASSERT_EQ(v, 0.f);
      }
    }
}

TEST_F(OneDNNOps, LayerNormForwardBackwardWithAndWithoutBias) {
  uint32_t seed = 100;
  for (const auto& s : kShapes)
    for (bool bias : {true, false}) {
      const int64_t N = s[0], C = s[1];
      if (C < 2) continue;  // variance of one value is 0: rstd = 1/sqrt(eps), not informative
      SCOPED_TRACE(testing::Message() << "N=" << N << " C=" << C << " bias=" << bias);
      const float eps = 1e-5f;
      const std::vector<float> x = normal_vec(N * C, seed++, 2.f, 0.5f);
      const std::vector<float> w = normal_vec(C, seed++, 0.2f, 1.f), b = normal_vec(C, seed++);
      const std::vector<float> dy = normal_vec(N * C, seed++);
      std::vector<float> y(x.size()), mean(N), rstd(N);
      ASSERT_TRUE(onednn_layernorm_f32(x.data(), w.data(), bias ? b.data() : nullptr, eps,
                                       y.data(), mean.data(), rstd.data(), N, C));
      const LayerNormRef r = layernorm_ref(x, w, bias ? b.data() : nullptr, eps, N, C);
      expect_close(y, r.y, "y");
      expect_close(mean, r.mean, "mean");
      expect_close(rstd, r.rstd, "rstd");

      // Gradients accumulate into dw, db: start them non-zero.
      std::vector<float> dx(x.size()), dw = normal_vec(C, seed++), db = normal_vec(C, seed++);
      std::vector<double> dx_ref, dw_ref = to_double(dw), db_ref = to_double(db);
      ASSERT_TRUE(onednn_layernorm_backward_f32(dy.data(), x.data(), w.data(), mean.data(),
                                                rstd.data(), dx.data(), dw.data(),
                                                bias ? db.data() : nullptr, N, C));
      layernorm_bwd_ref(dy, x, w, mean, rstd, N, C, dx_ref, dw_ref, db_ref);
      // dw, db are sums over N rows: allow the error of an N-term f32 sum.
      const double sum_tol = kTol + 4 * N * std::numeric_limits<float>::epsilon();
      expect_close(dx, dx_ref, "dx");
      expect_close(dw, dw_ref, "dw", sum_tol);
      if (bias) expect_close(db, db_ref, "db", sum_tol);
    }
}

TEST_F(OneDNNOps, GeluTanhForwardBackward) {
  for (int64_t n : {1, 7, 1000, 65537}) {
    SCOPED_TRACE(testing::Message() << "n=" << n);
    const std::vector<float> x = normal_vec(n, (uint32_t)n, 3.f), dy = normal_vec(n, 2 * n + 1);
    std::vector<float> y(x.size()), dx(x.size());
    std::vector<double> y_ref(x.size()), dx_ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      y_ref[i] = gelu_ref(x[i]);
      dx_ref[i] = dy[i] * gelu_grad_ref(x[i]);
    }
    ASSERT_TRUE(onednn_gelu_tanh_f32(x.data(), y.data(), n));
    expect_close(y, y_ref, "y");
    ASSERT_TRUE(onednn_gelu_tanh_backward_f32(x.data(), dy.data(), dx.data(), n));
    expect_close(dx, dx_ref, "dx");
  }
}

TEST_F(OneDNNOps, EmptyShapesAreDeclined) {
  float v = 0;
  EXPECT_FALSE(onednn_softmax_f32(&v, &v, 0, 5, false));
  EXPECT_FALSE(onednn_gelu_tanh_f32(&v, &v, 0));
}

TEST_F(OneDNNOps, PrimitiveCacheDoesNotGrowForASeenShape) {
  const std::vector<float> x = normal_vec(19 * 23, 5);
  std::vector<float> y(x.size());
  ASSERT_TRUE(onednn_softmax_f32(x.data(), y.data(), 19, 23, false));
  const size_t n = onednn_ops_cache_size();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(onednn_softmax_f32(x.data(), y.data(), 19, 23, false));
  EXPECT_EQ(onednn_ops_cache_size(), n);
  ASSERT_TRUE(onednn_softmax_f32(x.data(), y.data(), 19, 23, true));  // log: another primitive
  EXPECT_EQ(onednn_ops_cache_size(), n + 1);
}

TEST_F(OneDNNOps, PolicyKnowsEveryOpAndRejectsUnknownNames) {
  for (const char* op : {"softmax", "softmax_backward", "log_softmax", "log_softmax_backward",
                         "layernorm", "layernorm_backward", "gelu_tanh", "gelu_tanh_backward"})
    EXPECT_NO_THROW(onednn_op_enabled(op)) << op;
  EXPECT_THROW(onednn_op_enabled("conv"), Error);
}

}  // namespace
}  // namespace ctx::cpu
