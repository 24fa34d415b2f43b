// core/switch.h — the on/off switch of a fast path (fused attention, fused Linear, fused head
// split, ...): its environment variable (a row of core/settings.h) is 0 or 1, read once on first
// use (setting_flag: any other value is an error naming it); unset, the path is on, or off for an
// opt-in switch (default_on = false). Tests and A/B benchmarks override it at run time until
// reset(). forced_on() tells an explicit "on" (the variable = 1, or set(true)) from the default, for
// a path whose backend may also decline it where it measured slower (fused attention on CUDA).
// The switches themselves are the rows of core/fast_paths.h (set_fast_path / reset_fast_path).
#pragma once
#include <atomic>
#include <cstring>

#include "core/settings.h"

namespace ctx {

class FastPathSwitch {
 public:
  explicit FastPathSwitch(const char* env_var, bool default_on = true) : env_(env_var), default_on_(default_on) {}
  bool enabled() const {
    const int o = override_.load(std::memory_order_relaxed);
    if (o >= 0) return o == 1;
    const int e = env_state();
    return e == kUnset ? default_on_ : e == 1;
  }
  bool forced_on() const {
    const int o = override_.load(std::memory_order_relaxed);
    if (o >= 0) return o == 1;
    return env_state() == 1;
  }
  // Whether the switch was set (the variable, or set()): else a backend may apply its own default.
  bool is_set() const { return override_.load(std::memory_order_relaxed) >= 0 || env_state() != kUnset; }
  void set(bool on) { override_.store(on ? 1 : 0); }
  void reset() { override_.store(-1); }

 private:
  static constexpr int kUnset = 2;
  int env_state() const {  // 0 / 1: the variable's value; kUnset: not set
    int e = env_on_.load(std::memory_order_relaxed);
    if (e < 0) {
      e = setting_env(env_) ? (setting_flag(env_, default_on_) ? 1 : 0) : kUnset;  // throws unless 0 / 1
      env_on_.store(e, std::memory_order_relaxed);
    }
    return e;
  }
  const char* env_;
  bool default_on_;
  mutable std::atomic<int> env_on_{-1};  // -1: not read yet
  std::atomic<int> override_{-1};        // -1: follow the environment
};

}  // namespace ctx
