// core/switch.h — the on/off switch of a fast path (fused attention, fused Linear, fused head
// split, ...): on unless its environment variable (a row of core/settings.h) is "0" (read once,
// on first use), and overridable at run time by tests and A/B benchmarks until reset(). A
// switch made with default_on = false (an opt-in path) is off while its variable is unset.
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
    int e = env_on_.load(std::memory_order_relaxed);
    if (e < 0) {
      const char* v = setting_env(env_);
      e = v ? (std::strcmp(v, "0") == 0 ? 0 : 1) : (default_on_ ? 1 : 0);
      env_on_.store(e, std::memory_order_relaxed);
    }
    return e == 1;
  }
  void set(bool on) { override_.store(on ? 1 : 0); }
  void reset() { override_.store(-1); }

 private:
  const char* env_;
  bool default_on_;
  mutable std::atomic<int> env_on_{-1};  // -1: not read yet
  std::atomic<int> override_{-1};        // -1: follow the environment
};

}  // namespace ctx
