// bench/timing.h — how the benchmarks time things: every candidate once per round, rounds
// interleaved (so a loaded machine's slow moments spread over all candidates), medians.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bench {

inline const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? v : fallback;
}

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

using Candidates = std::vector<std::pair<std::string, std::function<void()>>>;
using Times = std::map<std::string, std::vector<double>>;  // ms per round, by candidate

// One warm-up round (primitive creation, caches, page faults), then `repeats` timed rounds.
// Round r starts at candidate r mod n, so that every candidate follows every other equally
// often (what the previous call leaves in the caches is not always the same one's).
inline Times time_rounds(const Candidates& cands, int repeats) {
  Times t;
  const size_t n = cands.size();
  for (int r = -1; r < repeats; ++r)
    for (size_t i = 0; i < n; ++i) {
      const auto& [name, f] = cands[(i + (size_t)(r + 1)) % n];
      const auto t0 = std::chrono::steady_clock::now();
      f();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r >= 0) t[name].push_back(ms);
    }
  return t;
}

inline double best(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end());
}

// How much slower `a` is than `b` in %, from their best times: on a shared machine interference
// only ever adds time, so the best of many rounds is the cleanest view of the code itself.
inline double best_slower_pct(const Times& t, const std::string& a, const std::string& b) {
  auto x = t.find(a), y = t.find(b);
  if (x == t.end() || y == t.end()) return 0.0;
  return 100.0 * (best(x->second) / best(y->second) - 1.0);
}

// Median over rounds of f(time of a, time of b); 0 when either is missing.
template <class F>
double paired_median(const Times& t, const std::string& a, const std::string& b, F f) {
  auto x = t.find(a), y = t.find(b);
  if (x == t.end() || y == t.end()) return 0.0;
  std::vector<double> v;
  for (size_t i = 0; i < x->second.size() && i < y->second.size(); ++i)
    v.push_back(f(x->second[i], y->second[i]));
  return median(v);
}

// How much slower `a` is than `b`, in %: median over rounds of (a / b - 1).
inline double slower_pct(const Times& t, const std::string& a, const std::string& b) {
  return 100.0 * paired_median(t, a, b, [](double x, double y) { return x / y - 1.0; });
}


}  // namespace bench
