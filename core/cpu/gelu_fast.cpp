// core/cpu/gelu_fast.cpp — vectorised tanh-GELU forward and backward (f32); see gelu_fast.h.
// With e = exp(-2u) and d = 1 / (1 + e):  0.5 (1 + tanh u) = d  and  0.5 (1 - tanh^2 u) = 2 d (e d),
//   y  = x d
//   y' = d + 2 x u' d (e d),   u' = sqrt(2/pi) (1 + 3 * 0.044715 x^2)
// which has no cancellation in the negative tail (1 + tanh u there is computed exactly as d).
// exp is Cephes' expf (range reduction by ln 2, degree-6 polynomial, ~1 ulp). Where |2u| > 80
// the result is the limit (y = x, y' = 1 for x > 0; y = -0, y' = 0 for x < 0): the neglected
// term is below e^-80 relative.
#include "core/cpu/gelu_fast.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CTX_GELU_AVX2 1
#endif

#include "core/cpu/onednn_ops.h"
#include "core/cpu/parallel.h"
#include "core/cpu/ref_kernels.h"
#include "core/error.h"
#include "core/settings.h"

namespace ctx::cpu {

namespace {

constexpr float kC = 0.7978845608028654f;              // sqrt(2/pi)
constexpr float kCA = 0.7978845608028654f * 0.044715f;  // sqrt(2/pi) * 0.044715
constexpr float kCA3 = 3.f * kCA;
constexpr float kLimit = 80.f;  // |2u| beyond which the limit is exact in f32

// ---- scalar: the same formula (fallback, and the reference of what the vector code does) ----
inline void gelu_scalar(float x, float& y, float& g) {
  const float x2 = x * x;
  const float u = x * std::fma(kCA, x2, kC);
  const float a = -2.f * u;
  if (a > kLimit) { y = std::copysign(0.f, x); g = 0.f; return; }
  if (a < -kLimit) { y = x; g = 1.f; return; }
  const float e = std::exp(a), d = 1.f / (1.f + e);
  y = x * d;
  g = std::fma(2.f * x * std::fma(kCA3, x2, kC), d * (e * d), d);
}

#ifdef CTX_GELU_AVX2
// Cephes expf on 8 lanes; the argument is in [-kLimit, kLimit] (2^n stays a normal float).
inline __m256 exp8(__m256 x) {
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500E-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073E-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894E-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459E-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201E-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.f));
  const __m256i n = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(e, _mm256_castsi256_ps(n));
}

// One vector of 8: y (forward) and/or g = gelu'(x) (backward: dx = dy * g).
template <bool kBackward>
inline __m256 gelu8(__m256 x, __m256 dy) {
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 u = _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_set1_ps(kCA), x2, _mm256_set1_ps(kC)));
  const __m256 a = _mm256_mul_ps(u, _mm256_set1_ps(-2.f));
  const __m256 hi = _mm256_cmp_ps(a, _mm256_set1_ps(kLimit), _CMP_GT_OQ);   // x << 0
  const __m256 lo = _mm256_cmp_ps(a, _mm256_set1_ps(-kLimit), _CMP_LT_OQ);  // x >> 0
  // NaN: max/min return their second operand, so e stays finite and x carries the NaN.
  const __m256 ac =
      _mm256_min_ps(_mm256_max_ps(a, _mm256_set1_ps(-kLimit)), _mm256_set1_ps(kLimit));
  const __m256 e = exp8(ac);
  const __m256 d = _mm256_div_ps(_mm256_set1_ps(1.f), _mm256_add_ps(_mm256_set1_ps(1.f), e));
  if constexpr (!kBackward) {
    (void)dy;
    __m256 y = _mm256_mul_ps(x, d);
    y = _mm256_blendv_ps(y, _mm256_and_ps(x, _mm256_set1_ps(-0.f)), hi);  // -0 for x < 0
    return _mm256_blendv_ps(y, x, lo);
  } else {
    const __m256 du = _mm256_fmadd_ps(_mm256_set1_ps(kCA3), x2, _mm256_set1_ps(kC));
    const __m256 xdu2 = _mm256_mul_ps(_mm256_add_ps(x, x), du);
    __m256 g = _mm256_fmadd_ps(xdu2, _mm256_mul_ps(d, _mm256_mul_ps(e, d)), d);
    g = _mm256_andnot_ps(hi, g);                           // 0 where x << 0
    g = _mm256_blendv_ps(g, _mm256_set1_ps(1.f), lo);      // 1 where x >> 0
    return _mm256_mul_ps(dy, g);
  }
}

// out[i] = f(x[i]) (forward) or dy[i] * f'(x[i]) (backward) over [0, n); the last n % 8 go
// through a padded block so that every element sees the same instructions.
template <bool kBackward>
void run_avx2(const float* x, const float* dy, float* out, int64_t n) {
  const int64_t nv = n / 8;
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < nv; ++i) {
    const __m256 xv = _mm256_loadu_ps(x + 8 * i);
    const __m256 gv = kBackward ? _mm256_loadu_ps(dy + 8 * i) : _mm256_setzero_ps();
    _mm256_storeu_ps(out + 8 * i, gelu8<kBackward>(xv, gv));
  });
  const int64_t rest = n - 8 * nv;
  if (rest > 0) {
    alignas(32) float xb[8] = {0}, gb[8] = {0}, ob[8];
    std::memcpy(xb, x + 8 * nv, sizeof(float) * (size_t)rest);
    if (kBackward) std::memcpy(gb, dy + 8 * nv, sizeof(float) * (size_t)rest);
    _mm256_store_ps(ob, gelu8<kBackward>(_mm256_load_ps(xb), _mm256_load_ps(gb)));
    std::memcpy(out + 8 * nv, ob, sizeof(float) * (size_t)rest);
  }
}
#endif

}  // namespace

void gelu_tanh_fast_f32(const float* x, float* y, int64_t n) {
#ifdef CTX_GELU_AVX2
  run_avx2<false>(x, nullptr, y, n);
#else
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < n; ++i) {
    float g;
    gelu_scalar(x[i], y[i], g);
  });
#endif
}

void gelu_tanh_backward_fast_f32(const float* x, const float* dy, float* dx, int64_t n) {
#ifdef CTX_GELU_AVX2
  run_avx2<true>(x, dy, dx, n);
#else
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < n; ++i) {
    float y, g;
    gelu_scalar(x[i], y, g);
    dx[i] = dy[i] * g;
  });
#endif
}

const char* gelu_fast_isa() {
#ifdef CTX_GELU_AVX2
  (void)&gelu_scalar;
  return "avx2";
#else
  return "scalar";
#endif
}

GeluImpl gelu_impl(bool backward) {
  static const int forced = [] {  // -1: measured policy
    const char* e = setting_env("CTXLAB_GELU");
    if (!e) return -1;
    const std::string s = e;
    if (s == "reference") return (int)GeluImpl::Reference;
    if (s == "fast") return (int)GeluImpl::Fast;
    if (s == "onednn") return (int)GeluImpl::OneDNN;
    throw Error(str("CTXLAB_GELU='", s, "': expected reference, fast or onednn"));
  }();
  if (forced >= 0) return (GeluImpl)forced;
  return onednn_op_enabled(backward ? "gelu_tanh_backward" : "gelu_tanh") ? GeluImpl::OneDNN
                                                                           : GeluImpl::Fast;
}

void gelu_tanh_f32(const float* x, float* y, int64_t n) {
  const GeluImpl gi = gelu_impl(false);
  if (gi == GeluImpl::OneDNN && onednn_gelu_tanh_f32(x, y, n)) return;
  if (gi != GeluImpl::Reference) return gelu_tanh_fast_f32(x, y, n);  // fast, or oneDNN declined
  ref::unary<float>(UnaryOp::GeluTanh, x, y, n, 0.f, 0.f);
}

}  // namespace ctx::cpu
