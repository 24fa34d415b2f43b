// core/dropout_mask.h — which elements one dropout call keeps: a counter-based function of
// (seed, element index), the same code on the CPU and inside CUDA kernels. So the mask is never
// stored, built on the host or uploaded: the forward and the backward each recompute it from the
// call's seed (as PyTorch's CUDA dropout draws Philox numbers from (seed, offset)).
//
//   mix(x) = lowbias32 (C. Wellons' hash-prospector): x ^= x >> 16; x *= 0x7feb352d;
//            x ^= x >> 15; x *= 0x846ca68b; x ^= x >> 16            (a bijection of 32-bit words)
//   k0 = lo32(seed) ^ 0x9E3779B9,  k1 = hi32(seed) ^ 0x85EBCA6B
//   u_i  = mix(mix(lo32(i) ^ k0) ^ hi32(i) ^ k1)                    (two rounds, 32-bit words only)
//   keep = u_i >= threshold,  threshold = min(round(p * 2^32), 2^32 - 1)  (P(drop) = p within 2^-32)
//   y_i  = x_i * (keep ? 1 / (1 - p) : 0)                           (in x's dtype; NaN * 0 stays NaN)
//
// 32-bit words because neither AVX2 nor a GPU has a 64-bit multiply: SplitMix64 (the first
// version of this file) cost ~1.3 ns an element on an AVX2 core, this ~0.1 ns in 8-lane vectors
// (core/cpu/dropout_simd.h). `mix` is a template so that the CPU's vector code runs this very
// formula on vector types.
//
// The autograd op (autograd/ops_elementwise.cpp) draws one seed per call from the model's dropout
// Rng, so a checkpoint's Rng state resumes the same masks.
//
// A step recorded into a CUDA Graph (core/step_graph.h) must not freeze its seeds: while it is
// recorded, each mask drawn also gets `seed_at`, the device address of a slot in the recording's
// seed table, and a kernel reads its seed there (resolved()); before each replay the same seeds,
// drawn from the same Rng in the same order, are written into the table.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_device.h"

namespace ctx {

struct DropoutMask {
  uint64_t seed = 0;
  const uint64_t* seed_at = nullptr;  // device memory holding the seed (a recorded step), or null
  uint32_t threshold = 0;  // dropped iff the 32-bit draw is below it (0: keep everything)
  double scale = 1.0;      // 1 / (1 - p), the factor of the kept elements

  // lowbias32 on one word, or lane by lane on a vector of uint32 (GCC vector extensions)
  template <class U>
  CTX_HOST_DEVICE static U mix(U x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
  }
  CTX_HOST_DEVICE uint32_t key0() const { return (uint32_t)seed ^ 0x9E3779B9U; }
  // the second round's key for the elements whose index has these high 32 bits
  CTX_HOST_DEVICE uint32_t key1(uint32_t hi) const { return (uint32_t)(seed >> 32) ^ 0x85EBCA6BU ^ hi; }
  CTX_HOST_DEVICE uint32_t draw(uint64_t i) const { return mix(mix((uint32_t)i ^ key0()) ^ key1((uint32_t)(i >> 32))); }
  CTX_HOST_DEVICE bool keep(uint64_t i) const { return draw(i) >= threshold; }
  // false for the default mask (keeps everything, factor 1): no dropout
  CTX_HOST_DEVICE bool active() const { return threshold > 0 || scale != 1.0; }
  // The factor element i is multiplied by, in the tensor's dtype.
  template <class T> CTX_HOST_DEVICE T factor(uint64_t i) const { return keep(i) ? (T)scale : T(0); }
  // This mask with its seed read from seed_at when it has one: what a kernel draws with (once, at
  // its start). On the host seed_at is always null (only a device recording sets it).
  CTX_HOST_DEVICE DropoutMask resolved() const {
    DropoutMask m = *this;
    if (seed_at) {
      m.seed = *seed_at;
      m.seed_at = nullptr;
    }
    return m;
  }
};

// While a step is recorded (DropoutSeedRecording), the slot of the next mask's seed in the
// recording's table, the seed's value kept for the first replay; null otherwise.
const uint64_t* dropout_seed_slot(uint64_t seed);

// The mask of dropout with drop probability p in [0, 1) and this call's seed.
inline DropoutMask dropout_mask(double p, uint64_t seed) {
  DropoutMask m;
  m.seed = seed;
  const long long t = std::llround(p * 4294967296.0);
  m.threshold = (uint32_t)(t > 0xFFFFFFFFLL ? 0xFFFFFFFFLL : t);
  m.scale = 1.0 / (1.0 - p);
  m.seed_at = dropout_seed_slot(seed);
  return m;
}

// The seed table of a recording: between begin() and end() every mask drawn takes the next slot
// of `table` (device u64 [capacity]) and its seed is appended to `drawn`; one recording at a time.
struct DropoutSeedRecording {
  uint64_t* table = nullptr;
  int64_t capacity = 0;
  std::vector<uint64_t> drawn;
  void begin(uint64_t* device_table, int64_t cap);
  void end();  // (also on an error in the recorded code)
};

}  // namespace ctx
