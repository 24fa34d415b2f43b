// core/cpu/simd.h — SIMD vectors through GCC's vector extensions (as wide as the build's ISA:
// AVX-512, AVX or SSE) and e^x on whole vectors: what the CPU kernels that are not GEMMs share
// (the fused attention's online softmax, CoPE's gates). Include only from CPU translation units
// compiled with the project's flags (the vector width is the build's).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ctx::cpu {

#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;
#endif
template <class F>
struct VecT {
  typedef F type __attribute__((vector_size(kVecBytes)));
};
template <class F>
using Vec = typename VecT<F>::type;
template <class F>
constexpr int64_t kW = kVecBytes / (int64_t)sizeof(F);  // lanes

template <class F>
inline Vec<F> vload(const F* p) {
  Vec<F> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class F>
inline void vstore(F* p, Vec<F> v) {
  std::memcpy(p, &v, sizeof v);
}
// x - (+0) == x for every x (also -0 and NaN): a plain broadcast without -ffast-math
template <class F>
inline Vec<F> splat(F x) {
  return x - Vec<F>{};
}

// e^x per lane for x <= 88 (here always x <= ~0: logits minus their running max or logsumexp).
// float: Cephes expf (x = n ln2 + r, |r| <= ln2/2; degree-5 polynomial; 2^n through the exponent
// bits), within ~2 ulp of std::exp; x < -87.33 (incl. -inf) gives 0.
inline Vec<float> exp_vec(Vec<float> x) {
  typedef int32_t VI __attribute__((vector_size(kVecBytes)));
  const Vec<float> lo = splat(-87.3365478515625f);
  const auto under = x < lo;
  const Vec<float> xc = under ? lo : x;
  Vec<float> n = xc * 1.44269504088896341f + 12582912.0f;  // round to nearest: + 1.5 * 2^23
  n = n - 12582912.0f;
  Vec<float> r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  Vec<float> y = splat(1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * (r * r) + r + 1.0f;
  const VI e = (__builtin_convertvector(n, VI) + 127) << 23;
  const Vec<float> z = Vec<float>{};
  return under ? z : y * (Vec<float>)e;
}
inline Vec<double> exp_vec(Vec<double> x) {
  for (int64_t i = 0; i < kW<double>; ++i) x[i] = std::exp(x[i]);
  return x;
}

// sigmoid(x) = 1 / (1 + e^-x) per lane, without overflow for any x: t = e^-|x| <= 1 and
// sigmoid = 1 / (1 + t) for x >= 0, t / (1 + t) below (float: within a few ulp of the scalar form).
template <class F>
inline Vec<F> sigmoid_vec(Vec<F> x) {
  const auto neg = x < F(0);
  const Vec<F> t = exp_vec(neg ? x : -x);
  const Vec<F> one = splat(F(1));
  return (neg ? t : one) / (one + t);
}

}  // namespace ctx::cpu
