// train/dist/bounded_wait.cpp — the bounded wait on other ranks (see bounded_wait.h).
#include "train/dist/bounded_wait.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace ctx::dist {

namespace {

using Clock = std::chrono::steady_clock;

Clock::duration seconds(double s) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

}  // namespace

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    s += str(i ? ", " : "", ranks[i]);
    if (j > i) s += str(j == i + 1 ? ", " : "-", ranks[j]);
    i = j + 1;
  }
  return s;
}

std::vector<int> other_ranks(int rank, int size) {
  std::vector<int> r;
  for (int i = 0; i < size; ++i)
    if (i != rank) r.push_back(i);
  return r;
}

std::string timeout_message(const WaitSpec& spec, const std::string& waited_for) {
  return str(spec.api, ": ", spec.op, " did not complete within ", spec.timeout_s, " s (--dist-timeout) on rank ",
             spec.rank, " of ", spec.size, ": waited for ", waited_for, "; the job ends (exit ", kTimeoutExitCode,
             ")");
}

// Polls without sleeping for the first 10 ms (an MPI collective progresses only inside MPI calls,
// as in the blocking call's own busy wait), then calls spec.idle between polls.
void wait_bounded(PendingOp& op, const WaitSpec& spec) {
  const auto t0 = Clock::now();
  const auto patient = t0 + std::chrono::milliseconds(10);
  const auto deadline = t0 + seconds(spec.timeout_s);
  std::string error;
  for (;;) {
    const PendingOp::State s = op.poll(error);
    if (s == PendingOp::State::Done) return;
    if (s == PendingOp::State::Failed) {
      op.abort();
      throw Error(error);
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      const std::vector<int> others = other_ranks(spec.rank, spec.size);
      const std::string waited = spec.missing ? spec.missing() : others.empty() ? std::string("nobody (one rank)")
                                                                              : rank_list(others);
      op.abort();
      throw TimeoutError(timeout_message(spec, waited));
    }
    if (now >= patient) {
      if (spec.idle)
        spec.idle();
      else
        std::this_thread::yield();
    }
  }
}

// The watchdog thread waits on a condition variable (no polling); _Exit because the main thread
// is inside the blocking call, and no other call into that library or exit handler can run safely.
void run_with_watchdog(const WaitSpec& spec, const std::function<void()>& blocking) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread dog([&] {
    std::unique_lock<std::mutex> lk(m);
    if (cv.wait_for(lk, seconds(spec.timeout_s), [&] { return done; })) return;
    const std::vector<int> others = other_ranks(spec.rank, spec.size);
    const std::string waited = spec.missing ? spec.missing() : others.empty() ? std::string("nobody (one rank)")
                                                                            : rank_list(others);
    std::fprintf(stderr, "ctxlab: error (rank %d of %d): %s\n", spec.rank, spec.size,
                 timeout_message(spec, waited).c_str());
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(kTimeoutExitCode);
  });
  blocking();
  {
    std::lock_guard<std::mutex> lk(m);
    done = true;
  }
  cv.notify_one();
  dog.join();
}

}  // namespace ctx::dist
