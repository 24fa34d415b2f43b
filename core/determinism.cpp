// core/determinism.cpp — the process-wide deterministic-algorithms switch (core/determinism.h).
#include "core/determinism.h"

#include <atomic>

namespace ctx {

namespace {
std::atomic<bool> g_deterministic{false};
}  // namespace

bool deterministic_algorithms() { return g_deterministic.load(std::memory_order_relaxed); }
void set_deterministic_algorithms(bool on) { g_deterministic.store(on); }

DeterministicScope::DeterministicScope(bool on) : saved_(deterministic_algorithms()) {
  set_deterministic_algorithms(on);
}
DeterministicScope::~DeterministicScope() { set_deterministic_algorithms(saved_); }

}  // namespace ctx
