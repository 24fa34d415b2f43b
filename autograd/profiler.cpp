// autograd/profiler.cpp — per-op time accounting (see profiler.h).
#include "autograd/profiler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/settings.h"

namespace ctx::prof {

namespace {

using Clock = std::chrono::steady_clock;

struct Stat {
  int64_t calls = 0;
  double seconds = 0;
};

struct State {
  std::mutex mu;
  std::map<std::pair<std::string, std::string>, Stat> stats;  // (phase, op) -> stat
  Clock::time_point last = Clock::now();
};

State& state() {
  static State s;
  return s;
}

std::atomic<int> g_enabled{-1};  // -1: not read from the environment yet

}  // namespace

void sync() {
  // A GPU runs the queued kernels after the host has moved on: without this wait each op would be
  // charged its launch, and the op that next waits for the device would be charged everyone's work.
  synchronize_devices();
}

bool enabled() {
  int e = g_enabled.load(std::memory_order_relaxed);
  if (e < 0) {
    e = setting_flag("CTXLAB_PROFILE", false) ? 1 : 0;
    g_enabled.store(e);
  }
  return e == 1;
}

void set_enabled(bool on) {
  g_enabled.store(on ? 1 : 0);
  mark();
}

void reset() {
  sync();
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.stats.clear();
  s.last = Clock::now();
}

void mark() {
  sync();
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  s.last = Clock::now();
}

void forward_op(const std::string& name) {
  sync();
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  const auto now = Clock::now();
  Stat& st = s.stats[{"forward", name}];
  st.calls += 1;
  st.seconds += std::chrono::duration<double>(now - s.last).count();
  s.last = now;
}

void add(const char* phase, const std::string& name, double seconds) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  Stat& st = s.stats[{phase, name}];
  st.calls += 1;
  st.seconds += seconds;
}

namespace {
struct Row {
  std::string phase, op;
  Stat st;
};
std::vector<Row> sorted_rows(double* total) {
  State& s = state();
  std::lock_guard<std::mutex> g(s.mu);
  std::vector<Row> rows;
  *total = 0;
  for (auto& [k, v] : s.stats) {
    rows.push_back({k.first, k.second, v});
    *total += v.seconds;
  }
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.st.seconds > b.st.seconds; });
  return rows;
}
}  // namespace

std::string table(int steps, int top) {
  double total = 0;
  std::vector<Row> rows = sorted_rows(&total);
  steps = std::max(steps, 1);
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-9s %-22s %9s %12s %10s %7s\n", "phase", "op", "calls/st", "ms/step",
                "us/call", "%");
  out += buf;
  int n = 0;
  for (auto& r : rows) {
    if (top > 0 && n++ >= top) break;
    std::snprintf(buf, sizeof buf, "%-9s %-22s %9.1f %12.2f %10.1f %6.1f%%\n", r.phase.c_str(), r.op.c_str(),
                  (double)r.st.calls / steps, 1e3 * r.st.seconds / steps, 1e6 * r.st.seconds / (double)r.st.calls,
                  total > 0 ? 100.0 * r.st.seconds / total : 0.0);
    out += buf;
  }
  std::snprintf(buf, sizeof buf, "%-9s %-22s %9s %12.2f\n", "total", "(profiled)", "", 1e3 * total / steps);
  out += buf;
  return out;
}

nlohmann::json to_json(int steps) {
  double total = 0;
  std::vector<Row> rows = sorted_rows(&total);
  steps = std::max(steps, 1);
  nlohmann::json j = nlohmann::json::array();
  for (auto& r : rows)
    j.push_back({{"phase", r.phase},
                 {"op", r.op},
                 {"calls_per_step", (double)r.st.calls / steps},
                 {"ms_per_step", 1e3 * r.st.seconds / steps}});
  return j;
}

}  // namespace ctx::prof
