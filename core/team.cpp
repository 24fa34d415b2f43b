// core/team.cpp — run_team and the team's barrier (see team.h): a spinning barrier of its own
// (an arrival count and a generation), so that a thread that throws can release the others.
#include "core/team.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ctx {

struct TeamState {
  std::atomic<int> arrived{0}, generation{0};
  std::atomic<bool> failed{false};
  std::mutex m;
  std::exception_ptr first;
};

namespace {
struct TeamAborted : std::runtime_error {
  TeamAborted() : std::runtime_error("run_team: another thread of the team failed") {}
};
inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
}  // namespace

void Team::barrier() const {
  if (size_ <= 1 || !state_) return;
  TeamState& s = *state_;
  const int gen = s.generation.load(std::memory_order_acquire);
  if (s.arrived.fetch_add(1, std::memory_order_acq_rel) == size_ - 1) {
    s.arrived.store(0, std::memory_order_relaxed);
    s.generation.store(gen + 1, std::memory_order_release);
  } else {
    // spin (the others are microseconds away), then yield: with more threads than free cores the
    // one everybody waits for may need this core to run
    for (int spins = 0; s.generation.load(std::memory_order_acquire) == gen; ++spins) {
      if (s.failed.load(std::memory_order_relaxed)) throw TeamAborted();
      if (spins < 4096) cpu_relax();
      else std::this_thread::yield();
    }
  }
  if (s.failed.load(std::memory_order_relaxed)) throw TeamAborted();
}

std::pair<int64_t, int64_t> Team::share(int64_t n, int64_t align) const {
  if (size_ <= 1) return {0, n};
  const int64_t blocks = (n + align - 1) / align, per = (blocks + size_ - 1) / size_;
  const int64_t begin = std::min(n, rank_ * per * align), end = std::min(n, (rank_ + 1) * per * align);
  return {begin, end};
}

namespace {
std::atomic<int64_t> g_regions{0};
}  // namespace

int64_t team_regions_started() { return g_regions.load(std::memory_order_relaxed); }

void run_team(int threads, const std::function<void(const Team&)>& fn) {
  if (threads <= 1 || omp_in_parallel()) {
    fn(Team(0, 1));
    return;
  }
  g_regions.fetch_add(1, std::memory_order_relaxed);
  TeamState state;
#pragma omp parallel num_threads(threads)
  {
    try {  // (the runtime may give fewer threads than asked: the team is as many as it gave)
      fn(Team(omp_get_thread_num(), omp_get_num_threads(), &state));
    } catch (const TeamAborted&) {
    } catch (...) {
      std::lock_guard<std::mutex> lock(state.m);
      if (!state.first) state.first = std::current_exception();
      state.failed.store(true, std::memory_order_relaxed);
    }
  }
  if (state.first) std::rethrow_exception(state.first);
}

}  // namespace ctx
