// core/rng.cpp — Rng implementation (see rng.h).
#include "core/rng.h"

#include <cmath>

namespace ctx {

static uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void Rng::seed_with(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) w = splitmix64(x);
  has_cached_ = false;
  cached_ = 0;
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return (double)(next_u64() >> 11) * 0x1.0p-53; }
double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

uint64_t Rng::below(uint64_t n) {
  if (n <= 1) return 0;
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do r = next_u64(); while (r >= limit);
  return r % n;
}

double Rng::normal() {
  if (has_cached_) {
    has_cached_ = false;
    return cached_;
  }
  double u1;
  do u1 = uniform(); while (u1 <= 0.0);
  double u2 = uniform();
  double r = std::sqrt(-2.0 * std::log(u1));
  double a = 6.283185307179586476925 * u2;
  cached_ = r * std::sin(a);
  has_cached_ = true;
  return r * std::cos(a);
}

void Rng::fill_uniform(Tensor& t, double lo, double hi) {
  CTX_CHECK(t.device() == Device::CPU && is_float(t.dtype()),
            "Rng::fill_uniform: needs a CPU float tensor, got ", t.str());
  int64_t n = t.numel();
  if (t.dtype() == DType::F32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = (float)uniform(lo, hi);
  } else {
    double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = uniform(lo, hi);
  }
}

void Rng::fill_normal(Tensor& t, double mean, double std) {
  CTX_CHECK(t.device() == Device::CPU && is_float(t.dtype()),
            "Rng::fill_normal: needs a CPU float tensor, got ", t.str());
  int64_t n = t.numel();
  if (t.dtype() == DType::F32) {
    float* p = t.data<float>();
    for (int64_t i = 0; i < n; ++i) p[i] = (float)(mean + std * normal());
  } else {
    double* p = t.data<double>();
    for (int64_t i = 0; i < n; ++i) p[i] = mean + std * normal();
  }
}

}  // namespace ctx
