// tests/test_stats.cpp — the study's statistics (train/stats.h) against values computed by hand
// from published t quantiles: the 95% t interval of a mean, and Welch's two-sided p-value.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "train/stats.h"

namespace ctx {
namespace {

TEST(Stats, MeanCIUsesStudentT) {
  // {1, 2, 3, 4}: mean 2.5, sd sqrt(5/3); t(0.975, 3) = 3.182446305284263
  const MeanCI c = mean_ci({1, 2, 3, 4});
  const double half = 3.182446305284263 * std::sqrt(5.0 / 3.0) / 2.0;
  EXPECT_EQ(c.n, 4);
  EXPECT_DOUBLE_EQ(c.mean, 2.5);
  EXPECT_NEAR(c.sd, std::sqrt(5.0 / 3.0), 1e-12);
  EXPECT_NEAR(c.lo, 2.5 - half, 1e-9);
  EXPECT_NEAR(c.hi, 2.5 + half, 1e-9);
  // two seeds: t(0.975, 1) = 12.706204736174698, the study's common case
  const MeanCI two = mean_ci({1.0, 2.0});
  EXPECT_NEAR(two.hi - two.mean, 12.706204736174698 * std::sqrt(0.5) / std::sqrt(2.0), 1e-9);
}

TEST(Stats, MeanCIOfOneValueIsThePoint) {
  const MeanCI c = mean_ci({3.25});
  EXPECT_EQ(c.n, 1);
  EXPECT_EQ(c.lo, 3.25);
  EXPECT_EQ(c.hi, 3.25);
  EXPECT_EQ(c.sd, 0);
}

TEST(Stats, MeanCIRejectsEmptyAndNonFinite) {
  EXPECT_THROW(mean_ci({}), Error);
  EXPECT_THROW(mean_ci({1.0, std::nan("")}), Error);
}

TEST(Stats, WelchPAtTheCriticalValue) {
  // a = {-1, 1}, b = {m - 1, m + 1}: variances 2, se^2 = 1 + 1, t = m / sqrt(2), Welch df = 2.
  // t(0.975, 2) = 4.302652729749464, so m = 4.3027 * sqrt(2) gives p = 0.05 exactly.
  const double m = 4.302652729749464 * std::sqrt(2.0);
  EXPECT_NEAR(welch_p({-1, 1}, {m - 1, m + 1}), 0.05, 1e-9);
  EXPECT_NEAR(welch_p({m - 1, m + 1}, {-1, 1}), 0.05, 1e-9);  // two-sided
  // t(0.995, 2) = 9.924843200918276: p = 0.01
  const double m99 = 9.924843200918276 * std::sqrt(2.0);
  EXPECT_NEAR(welch_p({-1, 1}, {m99 - 1, m99 + 1}), 0.01, 1e-9);
}

TEST(Stats, WelchPUnequalSizesAndDegenerateCases) {
  // a = {0, 2, 4} (var 4), b = {10, 11, 12, 13, 14} (var 2.5): se^2 = 4/3 + 1/2 = 11/6,
  // df = (11/6)^2 / ((4/3)^2 / 2 + (1/2)^2 / 4) = 3.5328..., t = -10 / sqrt(11/6) = -7.3855;
  // p = 2 * the t(3.5328) tail beyond 7.3855 = 0.0028733599 (Simpson's rule on the density, which
  // gives 0.0500000 at the df = 2 critical value above).
  EXPECT_NEAR(welch_p({0, 2, 4}, {10, 11, 12, 13, 14}), 0.0028733599, 1e-8);
  EXPECT_EQ(welch_p({1}, {2, 3}), 1.0);          // fewer than two values: no test
  EXPECT_EQ(welch_p({1, 1}, {1, 1}), 1.0);       // no variance, equal means
  EXPECT_EQ(welch_p({1, 1}, {2, 2}), 0.0);       // no variance, different means
  EXPECT_NEAR(welch_p({1, 2, 3}, {1, 2, 3}), 1.0, 1e-12);  // t = 0
}

}  // namespace
}  // namespace ctx
