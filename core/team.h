// core/team.h — a team of host threads that run one function together, with barriers between its
// stages: one OpenMP region for a whole piece of work instead of one per kernel. The graph-free
// decoder (nn/decode_engine.h) runs a batch-1 token this way: each thread streams its share of
// every weight matrix, the small steps between them run on rank 0, a barrier separates the
// stages (a spin of well under a microsecond where a fork / join per kernel costs several, and
// far more once the pool sleeps: docs/threading.md, docs/sampling.md). Kernels called inside run
// on their caller's thread (core/cpu/parallel.h: threads_for is 1 in a region).
#pragma once
#include <cstdint>
#include <functional>
#include <utility>

namespace ctx {

struct TeamState;

class Team {
 public:
  Team(int rank, int size, TeamState* state = nullptr) : rank_(rank), size_(size), state_(state) {}
  int rank() const { return rank_; }
  int size() const { return size_; }
  // Waits until every thread of the team has arrived (a no-op for a team of one); throws when
  // another thread of the team has thrown (so no thread waits forever for one that left).
  void barrier() const;
  // This thread's share [begin, end) of n items split in contiguous blocks of `align` items (the
  // last share takes the remainder; a share may be empty).
  std::pair<int64_t, int64_t> share(int64_t n, int64_t align = 1) const;

 private:
  int rank_, size_;
  TeamState* state_;
};

// Runs fn(team) on `threads` threads at once (one OpenMP region; threads <= 1, or when called
// inside a region: fn on the calling thread with a team of one). Returns when all have returned.
// An exception thrown by any thread ends every thread at its next barrier and is rethrown here.
void run_team(int threads, const std::function<void(const Team&)>& fn);

// How many run_team calls so far (process-wide) started a region of more than one thread: for the
// tests that hold a kernel to one region per call (tests/test_posenc_survey.cpp, the GRU's).
int64_t team_regions_started();

}  // namespace ctx
