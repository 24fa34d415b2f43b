// core/dropout_mask.h — which elements one dropout call keeps: a counter-based function of
// (seed, element index), the same code on the CPU and inside CUDA kernels. So the mask is never
// stored, built on the host or uploaded: the forward and the backward each recompute it from the
// call's seed (as PyTorch's CUDA dropout draws Philox numbers from (seed, offset)).
//
//   u_i  = top 32 bits of SplitMix64's output function at seed + (i + 1) * 0x9E3779B97F4A7C15
//          (element i of the SplitMix64 sequence started at seed)
//   keep = u_i >= threshold,  threshold = round(p * 2^32)    (P(drop) = p within 2^-33)
//   y_i  = x_i * (keep ? 1 / (1 - p) : 0)                     (in x's dtype; NaN * 0 stays NaN)
//
// The autograd op (autograd/ops_elementwise.cpp) draws one seed per call from the model's dropout
// Rng, so a checkpoint's Rng state resumes the same masks.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define CTX_HOST_DEVICE __host__ __device__
#else
#define CTX_HOST_DEVICE
#endif

namespace ctx {

struct DropoutMask {
  uint64_t seed = 0;
  uint64_t threshold = 0;  // dropped iff the 32-bit draw is below it (0: keep everything)
  double scale = 1.0;      // 1 / (1 - p), the factor of the kept elements

  CTX_HOST_DEVICE bool keep(uint64_t i) const {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (z >> 32) >= threshold;
  }
  // false for the default mask (keeps everything, factor 1): no dropout
  CTX_HOST_DEVICE bool active() const { return threshold > 0 || scale != 1.0; }
  // The factor element i is multiplied by, in the tensor's dtype.
  template <class T> CTX_HOST_DEVICE T factor(uint64_t i) const { return keep(i) ? (T)scale : T(0); }
};

// The mask of dropout with drop probability p in [0, 1) and this call's seed.
inline DropoutMask dropout_mask(double p, uint64_t seed) {
  DropoutMask m;
  m.seed = seed;
  m.threshold = (uint64_t)std::llround(p * 4294967296.0);
  m.scale = 1.0 / (1.0 - p);
  return m;
}

}  // namespace ctx
