// core/switch.h — the on/off switch of a fast path (fused attention, fused Linear, fused head
// split, ...): its environment variable (a row of core/settings.h) is 0 or 1, read once on first
// use (setting_flag: any other value is an error naming it); unset, the path is on, or off for an
// opt-in switch (default_on = false). Tests and A/B benchmarks override it at run time until
// reset().
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
      e = setting_flag(env_, default_on_) ? 1 : 0;  // throws for a value other than 0 / 1
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
