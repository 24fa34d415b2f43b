// train/stats.cpp — mean and t interval, Welch's test (see stats.h).
#include "train/stats.h"

#include <algorithm>
#include <cmath>

#include <boost/math/distributions/students_t.hpp>

#include "core/error.h"

namespace ctx {
namespace {

struct Moments {
  double n = 0, mean = 0, var = 0;  // var: sample variance (n - 1), 0 when n < 2
};

Moments moments(const std::vector<double>& x) {
  Moments m;
  m.n = (double)x.size();
  for (double v : x) {
    CTX_CHECK(std::isfinite(v), "stats: a non-finite value (", v, ") in a sample");
    m.mean += v;
  }
  m.mean /= m.n;
  if (x.size() < 2) return m;
  for (double v : x) m.var += (v - m.mean) * (v - m.mean);
  m.var /= m.n - 1;
  return m;
}

}  // namespace

double median(std::vector<double> x) {
  if (x.empty()) return 0;
  std::sort(x.begin(), x.end());
  const size_t n = x.size();
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

MeanCI mean_ci(const std::vector<double>& x) {
  CTX_CHECK(!x.empty(), "stats: the mean of an empty sample");
  const Moments m = moments(x);
  MeanCI c;
  c.n = (int)x.size();
  c.mean = c.lo = c.hi = m.mean;
  if (c.n < 2) return c;
  c.sd = std::sqrt(m.var);
  const boost::math::students_t t((double)(c.n - 1));
  const double half = boost::math::quantile(t, 0.975) * c.sd / std::sqrt(m.n);
  c.lo = m.mean - half;
  c.hi = m.mean + half;
  return c;
}

double welch_p(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() < 2 || b.size() < 2) return 1.0;
  const Moments x = moments(a), y = moments(b);
  const double va = x.var / x.n, vb = y.var / y.n, se2 = va + vb;
  if (se2 == 0) return x.mean == y.mean ? 1.0 : 0.0;
  const double t = (x.mean - y.mean) / std::sqrt(se2);
  // Welch-Satterthwaite degrees of freedom
  const double df = se2 * se2 / (va * va / (x.n - 1) + vb * vb / (y.n - 1));
  const boost::math::students_t dist(df);
  return 2 * boost::math::cdf(boost::math::complement(dist, std::fabs(t)));
}

}  // namespace ctx
