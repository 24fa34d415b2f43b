// tests/test_cpu_simd.cpp — core/cpu/simd.h: the vector exp (Cephes) and sigmoid that the fused
// attention, the masked softmax and CoPE's gates use, held to std::exp / 1 / (1 + e^-x) in ulps over
// their whole range, including the ends where a naive form overflows (sigmoid of -100: e^100).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/cpu/simd.h"

using namespace ctx::cpu;

namespace {

// f(x) lane by lane for every x in xs, padded to whole vectors
template <class F, class Fn>
std::vector<F> on_vectors(const std::vector<F>& xs, Fn f) {
  std::vector<F> in(xs), out;
  while (in.size() % kW<F>) in.push_back(F(0));
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); i += kW<F>) vstore(out.data() + i, f(vload(in.data() + i)));
  out.resize(xs.size());
  return out;
}

template <class F>
double ulps(F got, F want) {
  if (got == want) return 0;
  return std::fabs((double)got - (double)want) / std::max<double>(std::numeric_limits<F>::denorm_min(),
                                                                     std::fabs((double)want) * std::numeric_limits<F>::epsilon());
}

}  // namespace

TEST(CpuSimd, ExpWithinTwoUlpsOfStdExpAndZeroBelowTheRange) {
  std::vector<float> xs;
  for (float x = -87.f; x <= 0.f; x += 0.0137f) xs.push_back(x);
  const std::vector<float> y = on_vectors<float>(xs, [](Vec<float> v) { return exp_vec(v); });
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) worst = std::max(worst, ulps(y[i], std::exp(xs[i])));
  EXPECT_LE(worst, 2.0);
  const std::vector<float> lo = on_vectors<float>({-88.f, -200.f, -INFINITY}, [](Vec<float> v) { return exp_vec(v); });
  for (float v : lo) EXPECT_EQ(v, 0.f);
}

TEST(CpuSimd, SigmoidMatchesTheScalarFormAndSaturatesWithoutOverflow) {
  std::vector<float> xs;
  for (float x = -120.f; x <= 120.f; x += 0.0731f) xs.push_back(x);
  const std::vector<float> g = on_vectors<float>(xs, [](Vec<float> v) { return sigmoid_vec<float>(v); });
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double want = 1.0 / (1.0 + std::exp(-(double)xs[i]));
    if (want < 1e-37) {  // below float's normal range: the scalar form gives 0 or a denormal
      EXPECT_LE(g[i], 1e-37f) << xs[i];
      continue;
    }
    worst = std::max(worst, ulps(g[i], (float)want));
    EXPECT_TRUE(g[i] >= 0.f && g[i] <= 1.f) << xs[i];
  }
  EXPECT_LE(worst, 4.0);
  const std::vector<double> d = on_vectors<double>({-1000.0, -1.5, 0.0, 2.5, 1000.0},
                                                   [](Vec<double> v) { return sigmoid_vec<double>(v); });
  EXPECT_EQ(d[0], 0.0);
  EXPECT_DOUBLE_EQ(d[1], 1.0 / (1.0 + std::exp(1.5)));
  EXPECT_EQ(d[2], 0.5);
  EXPECT_DOUBLE_EQ(d[3], 1.0 / (1.0 + std::exp(-2.5)));
  EXPECT_EQ(d[4], 1.0);
}
