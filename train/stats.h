// train/stats.h — summaries over independent repeats (seeds) of an experiment: the mean with its
// 95% Student-t confidence interval, and Welch's two-sample t-test for "is this difference
// significant", and the median of timed repeats. Used by `ctxlab study` (train/cli/study*.cpp) and
// `ctxlab bench`; quantiles from Boost.Math.
#pragma once
#include <vector>

namespace ctx {

struct MeanCI {
  int n = 0;
  double mean = 0, sd = 0;  // sd: the sample standard deviation (n - 1); 0 when n < 2
  double lo = 0, hi = 0;    // mean -+ t(0.975, n - 1) * sd / sqrt(n); lo = hi = mean when n < 2
};
// The mean of `x` and its two-sided 95% t interval. Throws on an empty or non-finite sample.
MeanCI mean_ci(const std::vector<double>& x);

// The median of `x` (the mean of the two middle values for an even count; 0 when empty): the
// figure `ctxlab bench` reports over its timed repeats.
double median(std::vector<double> x);

// Welch's t-test of equal means (unequal variances): the two-sided p-value. 1 when either sample
// has fewer than 2 values or both have zero variance with equal means; 0 when both have zero
// variance and the means differ.
double welch_p(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace ctx
