// train/dist/bounded_wait.h — the one wait of a rank on the others, bounded by --dist-timeout
// (docs/distributed.md): poll an operation that other ranks must join (an MPI request, an NCCL
// communicator's work) until it is done; when it reports a failure, or the deadline passes, abort
// it exactly once and throw an error naming the operation, the timeout and the ranks. The MPI
// collectives (train/dist/distributed.cpp) and NCCL's (train/dist/nccl/nccl_wait.cpp) both wait
// here; the operation is an interface, so the logic is tested without either (tests/test_bounded_wait.cpp).
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

namespace ctx::dist {

// The exit status of a rank (and of mpirun, through MPI_Abort) when a wait passed --dist-timeout:
// 124, as timeout(1) exits (docs/reliability.md).
constexpr int kTimeoutExitCode = 124;
// Thrown by a wait that did not complete within --dist-timeout; main() ends the job with
// abort_job(kTimeoutExitCode).
struct TimeoutError : Error {
  using Error::Error;
};

// One operation in flight that other ranks must join.
class PendingOp {
 public:
  enum class State { Pending, Done, Failed };
  virtual ~PendingOp() = default;
  // Non-blocking. Failed: `error` holds the one-line reason (the call that failed, its message).
  virtual State poll(std::string& error) = 0;
  // Called once when the wait gives up (a failure, or past the deadline): the operation will
  // never complete (NCCL: ncclCommAbort, so that no kernel keeps spinning on the GPU).
  virtual void abort() = 0;
};

// What one wait is, and what it asks of the job while it waits.
struct WaitSpec {
  std::string api;   // "MPI", "NCCL": the first word of the messages
  std::string op;    // "MPI_Allreduce (gradients)", "ncclAllReduce (gradients)"
  double timeout_s;  // --dist-timeout, > 0
  int rank, size;    // this rank of `size`
  // Between polls once the first 10 ms have passed (another rank is still computing): answer the
  // other ranks' pings, yield the core. Empty: std::this_thread::yield.
  std::function<void()> idle;
  // Asked once past the deadline: who did not arrive ("rank 1 (no answer: ...)"). Empty: every
  // other rank.
  std::function<std::string()> missing;
};

// Polls `op` until it is done. A failure aborts it and throws Error(reason); past
// spec.timeout_s it aborts it and throws TimeoutError(timeout_message(spec, missing())).
void wait_bounded(PendingOp& op, const WaitSpec& spec);

// Runs `blocking` (a call with no non-blocking form: MPI_Init_thread, MPI_Finalize, a blocking
// ncclCommInitRank) while a watchdog thread waits spec.timeout_s for it; past that the watchdog
// prints "ctxlab: error (rank R of N): " + timeout_message(spec, missing()) to stderr and ends the
// process with _Exit(kTimeoutExitCode). spec.idle is unused; spec.missing runs on the watchdog
// thread while `blocking` is still inside its call (it must not call that library). Costs one
// thread start per call.
void run_with_watchdog(const WaitSpec& spec, const std::function<void()>& blocking);

// "NCCL: ncclAllReduce (gradients) did not complete within 300 s (--dist-timeout) on rank 0 of
// 2: waited for rank 1 (...); the job ends (exit 124)": the one line of every expiry.
std::string timeout_message(const WaitSpec& spec, const std::string& waited_for);
// "rank 1", "ranks 1, 3", "ranks 0-3, 5" (ascending, not empty).
std::string rank_list(const std::vector<int>& ranks);
// Every rank of `size` but `rank`.
std::vector<int> other_ranks(int rank, int size);

}  // namespace ctx::dist
