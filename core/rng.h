// core/rng.h — deterministic, seeded random numbers (same sequence on every machine).
// xoshiro256** seeded through splitmix64; uniform from the top 53 bits; normal by Box-Muller
// (both values of a pair are used). The whole state is four words plus the cached normal, so
// checkpoints can save and restore it exactly.
#pragma once
#include <array>
#include <cstdint>

#include "core/tensor.h"

namespace ctx {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { seed_with(seed); }
  void seed_with(uint64_t seed);
  uint64_t next_u64();
  double uniform();                      // [0, 1)
  double uniform(double lo, double hi);  // [lo, hi)
  double normal();                       // N(0, 1)
  uint64_t below(uint64_t n);            // uniform integer in [0, n), unbiased

  // Fill a CPU f32/f64 tensor.
  void fill_uniform(Tensor& t, double lo, double hi);
  void fill_normal(Tensor& t, double mean, double std);

  struct State {
    std::array<uint64_t, 4> s;
    bool has_cached;
    double cached;
  };
  State state() const { return {s_, has_cached_, cached_}; }
  void set_state(const State& st) { s_ = st.s; has_cached_ = st.has_cached; cached_ = st.cached; }

 private:
  std::array<uint64_t, 4> s_{};
  bool has_cached_ = false;
  double cached_ = 0;
};

}  // namespace ctx
