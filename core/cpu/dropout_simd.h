// core/cpu/dropout_simd.h — the dropout mask (core/dropout_mask.h) eight lanes at a time: the
// CPU's fast path for Backend::dropout and for the fused attention's dropped rows. The lanes run
// DropoutMask::mix itself on a vector of uint32, so there is one formula; test_backend_ops holds
// the CPU backend to the scalar ref::dropout bit for bit, and GradcheckOps.DropoutMask... holds
// dropout_draws to DropoutMask::draw across a 2^32 boundary of the index.
#pragma once
#include "core/dropout_mask.h"
#include "core/cpu/parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace ctx::cpu {

// u[c] = m.draw(base + c) for c in [0, n)
inline void dropout_draws(const DropoutMask& m, uint64_t base, int64_t n, uint32_t* u) {
  typedef uint32_t U8 __attribute__((vector_size(32)));
  const U8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
  const uint32_t k0 = m.key0();
  for (int64_t c = 0; c < n;) {
    const uint64_t g = base + (uint64_t)c;
    const uint32_t lo = (uint32_t)g, k1 = m.key1((uint32_t)(g >> 32));
    const int64_t seg = std::min<int64_t>(n - c, (int64_t)((1ull << 32) - lo));  // hi32 fixed
    int64_t e = 0;
    for (; e + 8 <= seg; e += 8) {
      const U8 v = DropoutMask::mix(DropoutMask::mix((lane + (lo + (uint32_t)e)) ^ k0) ^ k1);
      std::memcpy(u + c + e, &v, sizeof v);
    }
    for (; e < seg; ++e) u[c + e] = DropoutMask::mix(DropoutMask::mix((lo + (uint32_t)e) ^ k0) ^ k1);
    c += seg;
  }
}

// y[c] = x[c] * m.factor(base + c) for c in [0, n) (y may be x)
template <class T>
void dropout_apply(const T* x, T* y, int64_t n, const DropoutMask& m, uint64_t base) {
  constexpr int64_t kChunk = 256;
  uint32_t u[kChunk];
  const T s = (T)m.scale;
  const uint32_t thr = m.threshold;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t len = std::min(kChunk, n - c0);
    dropout_draws(m, base + (uint64_t)c0, len, u);
#pragma omp simd
    for (int64_t c = 0; c < len; ++c) y[c0 + c] = x[c0 + c] * (u[c] >= thr ? s : T(0));
  }
}

// Backend::dropout on the CPU: y = x * m.factor(i), i in [0, n), OpenMP over blocks of the index
template <class T>
void dropout_fast(const T* x, T* y, int64_t n, const DropoutMask& m) {
  constexpr int64_t kBlock = 16384;
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t b = 0; b < n; b += kBlock) dropout_apply(x + b, y + b, std::min(kBlock, n - b), m, (uint64_t)b););
}

}  // namespace ctx::cpu
