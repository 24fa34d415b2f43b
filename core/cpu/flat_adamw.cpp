// core/cpu/flat_adamw.cpp — the optimizer over flat buffers on the CPU (Backend::sum_squares /
// adamw_flat, core/cpu/fused.h): the squared-gradient sum per chunk (f64, summed in chunk order,
// so the value does not depend on the thread count) and one AdamW pass per chunk that reads the
// gradient scaled by the clip factor, in two vectorizing loops around the square root. No
// allocation after the first call.
#include <algorithm>
#include <cmath>
#include <vector>
#if defined(__SSE2__)
#include <immintrin.h>
#endif

#include "core/cpu/fused.h"
#include "core/cpu/parallel.h"

namespace ctx::cpu {
namespace {

// Elements of all chunks (the work of a pass over them)
int64_t chunk_elements(const std::vector<FlatChunk>& chunks) {
  int64_t n = 0;
  for (const FlatChunk& c : chunks) n += c.end - c.begin;
  return n;
}

template <class T>
double sum_squares_chunks(const T* g, const std::vector<FlatChunk>& chunks) {
  thread_local std::vector<double> partial;  // grows to the largest chunk count seen
  const int64_t nc = (int64_t)chunks.size();
  if ((int64_t)partial.size() < nc) partial.resize((size_t)nc);
  double* part = partial.data();
  CTX_OMP_IF(nc > 4 && parallel_pays(chunk_elements(chunks)), "omp parallel for schedule(static)",
  for (int64_t c = 0; c < nc; ++c) {
    double s = 0;
    _Pragma("omp simd reduction(+ : s)")
    for (int64_t i = chunks[c].begin; i < chunks[c].end; ++i) s += (double)g[i] * (double)g[i];
    part[c] = s;
  });
  double total = 0;  // fixed order: the same sum for any thread count
  for (int64_t c = 0; c < nc; ++c) total += part[c];
  return total;
}

// y = sqrt(x), correctly rounded like std::sqrt, with vector instructions where the build has
// them: std::sqrt's errno branch keeps GCC from vectorizing any loop that calls it.
void sqrt_n(const float* x, float* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  // maskz with a full mask: the same instruction; the unmasked intrinsic trips GCC 12's
  // -Wmaybe-uninitialized inside its own header (_mm512_undefined_ps)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, _mm512_maskz_sqrt_ps(0xFFFF, _mm512_loadu_ps(x + i)));
#elif defined(__AVX__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#elif defined(__SSE2__)
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
  for (; i < n; ++i) y[i] = std::sqrt(x[i]);
}
void sqrt_n(const double* x, double* y, int64_t n) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 8 <= n; i += 8) _mm512_storeu_pd(y + i, _mm512_maskz_sqrt_pd(0xFF, _mm512_loadu_pd(x + i)));
#elif defined(__AVX__)
  for (; i + 4 <= n; i += 4) _mm256_storeu_pd(y + i, _mm256_sqrt_pd(_mm256_loadu_pd(x + i)));
#elif defined(__SSE2__)
  for (; i + 2 <= n; i += 2) _mm_storeu_pd(y + i, _mm_sqrt_pd(_mm_loadu_pd(x + i)));
#endif
  for (; i < n; ++i) y[i] = std::sqrt(x[i]);
}

// The element update of ref::adamw (core/cpu/ref_kernels.h), each expression written the same way
// so that both compile to the same arithmetic, split around the square root into two loops that
// vectorize (per block of kBlock elements, in L1); gs is the gradient scale, applied as
// clip_grad_norm's in-place Scale would (gs * g, rounded to T).
template <class T>
void adamw_range(T* p, const T* g, T* m, T* v, int64_t begin, int64_t end, T gs, T decay, T tb1, T tb2,
                 T bc2_sqrt, T teps, T step_size) {
  constexpr int64_t kBlock = 1024;
  T root[kBlock];
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    for (int64_t i = b; i < e; ++i) {
      T gi = gs * g[i];
      m[i] = tb1 * m[i] + (T(1) - tb1) * gi;
      v[i] = tb2 * v[i] + (T(1) - tb2) * gi * gi;
    }
    sqrt_n(v + b, root, e - b);
    for (int64_t i = b; i < e; ++i) {
      T denom = root[i - b] / bc2_sqrt + teps;
      p[i] *= decay;
      p[i] -= step_size * m[i] / denom;
    }
  }
}

// Constants as ref::adamw computes them (a chunk without decay gets wd = 0).
template <class T>
void adamw_chunks(T* p, const T* g, T* m, T* v, const std::vector<FlatChunk>& chunks, const AdamWHyper& h,
                  double gscale) {
  // the step's constants: from h.terms when the caller wrote them there (a captured step), else
  // from lr and step; decay_off is 1 - lr * 0 = 1 either way
  const AdamWStepTerms st = h.terms.defined()
                                ? AdamWStepTerms{h.terms.data<double>()[0], h.terms.data<double>()[1],
                                                 h.terms.data<double>()[2]}
                                : adamw_step_terms(h);
  const T step_size = (T)st.step_size;
  const T bc2_sqrt = (T)st.bc2_sqrt;
  const T decay_on = (T)st.decay, decay_off = T(1);
  const T tb1 = (T)h.beta1, tb2 = (T)h.beta2, teps = (T)h.eps;
  const T gs = (T)gscale;
  const int64_t nc = (int64_t)chunks.size();
  // ~4 units an element (two moments, a square root, a division)
  CTX_OMP_IF(nc > 4 && parallel_pays(chunk_elements(chunks) * 4), "omp parallel for schedule(static)",
  for (int64_t c = 0; c < nc; ++c)
    adamw_range(p, g, m, v, chunks[c].begin, chunks[c].end, gs, chunks[c].decay ? decay_on : decay_off, tb1, tb2,
                bc2_sqrt, teps, step_size););
}

}  // namespace

// (the arguments, chunks included, are checked: checks::sum_squares / adamw_flat)
void sum_squares(const Tensor& x, const std::vector<FlatChunk>& chunks, Tensor& out) {
  out.data<double>()[0] = x.dtype() == DType::F32 ? sum_squares_chunks(x.data<float>(), chunks)
                                                  : sum_squares_chunks(x.data<double>(), chunks);
}

void adamw_flat(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const std::vector<FlatChunk>& chunks,
                const AdamWHyper& h, const Tensor& norm_sq) {
  double gscale = h.grad_scale;
  if (norm_sq.defined() && h.max_norm > 0) {
    const double norm = std::sqrt(norm_sq.data<double>()[0]);
    if (norm > h.max_norm) gscale *= h.max_norm / (norm + 1e-6);  // as clip_grad_norm
  }
  if (p.dtype() == DType::F32)
    adamw_chunks(p.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), chunks, h, gscale);
  else
    adamw_chunks(p.data<double>(), g.data<double>(), m.data<double>(), v.data<double>(), chunks, h, gscale);
}

}  // namespace ctx::cpu
