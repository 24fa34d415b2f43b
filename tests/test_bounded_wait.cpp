// tests/test_bounded_wait.cpp — the bounded wait of one rank on the others
// (train/dist/bounded_wait.h), driven by fake operations instead of MPI or NCCL: one that never
// completes (a stopped peer: a TimeoutError within the bound, abort called exactly once, the
// message naming the operation, the timeout and the ranks), one that completes (no abort), one
// that reports an asynchronous error (ncclCommGetAsyncError's ncclRemoteError: abort once, the
// error, not a timeout), and the watchdog of a blocking call (exit 124 with the one line).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "train/dist/bounded_wait.h"

using namespace ctx;
using namespace ctx::dist;

namespace {

using Clock = std::chrono::steady_clock;

// A communicator whose operation completes after `done_after` polls (never when < 0), or fails
// with `error` at poll `fail_at` (never when < 0).
class FakeOp final : public PendingOp {
 public:
  int done_after = -1, fail_at = -1;
  std::string error;
  int polls = 0, aborts = 0;
  State poll(std::string& why) override {
    EXPECT_EQ(aborts, 0) << "polled after abort";
    ++polls;
    if (fail_at >= 0 && polls >= fail_at) {
      why = error;
      return State::Failed;
    }
    return done_after >= 0 && polls >= done_after ? State::Done : State::Pending;
  }
  void abort() override { ++aborts; }
};

WaitSpec spec(double timeout_s) { return {"NCCL", "ncclAllReduce (gradients)", timeout_s, 0, 2, {}, {}}; }

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

TEST(BoundedWait, NeverCompletingOpTimesOutWithinTheBoundAndAbortsOnce) {
  FakeOp op;
  int idles = 0, asked = 0;
  WaitSpec s = spec(0.2);
  s.idle = [&] { ++idles; };
  s.missing = [&] {
    ++asked;
    return std::string("rank 1 (no answer)");
  };
  const auto t0 = Clock::now();
  std::string msg;
  try {
    wait_bounded(op, s);
    FAIL() << "a wait on an operation that never completes returned";
  } catch (const TimeoutError& e) {
    msg = e.what();
  }
  const double took = seconds_since(t0);
  EXPECT_GE(took, 0.2);
  EXPECT_LT(took, 0.2 + 2.0);  // the deadline plus scheduling noise on a shared machine
  EXPECT_EQ(op.aborts, 1);
  EXPECT_EQ(asked, 1);
  EXPECT_GT(idles, 0);  // past the first 10 ms the wait hands the core back between polls
  EXPECT_EQ(msg, "NCCL: ncclAllReduce (gradients) did not complete within 0.2 s (--dist-timeout) on rank 0 of 2: "
                 "waited for rank 1 (no answer); the job ends (exit 124)");
}

TEST(BoundedWait, WithoutMissingItNamesEveryOtherRank) {
  FakeOp op;
  WaitSpec s = spec(0.05);
  s.rank = 2;
  s.size = 5;
  try {
    wait_bounded(op, s);
    FAIL() << "returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("on rank 2 of 5: waited for ranks 0, 1, 3, 4;"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(op.aborts, 1);
}

TEST(BoundedWait, CompletingOpReturnsWithoutAbort) {
  FakeOp op;
  op.done_after = 1000;
  wait_bounded(op, spec(30));
  EXPECT_EQ(op.polls, 1000);
  EXPECT_EQ(op.aborts, 0);
}

TEST(BoundedWait, AsyncErrorAbortsOnceAndThrowsTheErrorNotATimeout) {
  FakeOp op;
  op.fail_at = 5;
  op.error = "NCCL: ncclAllReduce (gradients) failed on rank 0 of 2: ncclAllReduce: remote process exited or there "
             "was a network error";
  const auto t0 = Clock::now();
  try {
    wait_bounded(op, spec(30));
    FAIL() << "returned";
  } catch (const TimeoutError&) {
    FAIL() << "an asynchronous error reported as a timeout";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), op.error);
  }
  EXPECT_LT(seconds_since(t0), 5.0);  // at once, not at the deadline
  EXPECT_EQ(op.polls, 5);
  EXPECT_EQ(op.aborts, 1);
}

TEST(BoundedWait, RankList) {
  EXPECT_EQ(rank_list({1}), "rank 1");
  EXPECT_EQ(rank_list({1, 3}), "ranks 1, 3");
  EXPECT_EQ(rank_list({0, 1, 2, 3, 5}), "ranks 0-3, 5");
  EXPECT_EQ(rank_list({0, 1, 4, 5}), "ranks 0, 1, 4, 5");
}

TEST(BoundedWaitDeathTest, WatchdogEndsABlockedCallWithExit124AndOneLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const WaitSpec s{"MPI", "MPI_Finalize", 0.1, 0, 2, {}, {}};
  EXPECT_EXIT(run_with_watchdog(s, [] { std::this_thread::sleep_for(std::chrono::seconds(30)); }),
              ::testing::ExitedWithCode(kTimeoutExitCode),
              "ctxlab: error \\(rank 0 of 2\\): MPI: MPI_Finalize did not complete within 0.1 s \\(--dist-timeout\\) "
              "on rank 0 of 2: waited for rank 1; the job ends \\(exit 124\\)");
}

TEST(BoundedWait, WatchdogLetsACallThatReturnsInTimeGo) {
  const WaitSpec s{"MPI", "MPI_Finalize", 30, 0, 2, {}, {}};
  bool ran = false;
  const auto t0 = Clock::now();
  run_with_watchdog(s, [&] { ran = true; });
  EXPECT_TRUE(ran);
  EXPECT_LT(seconds_since(t0), 5.0);  // the watchdog is woken, not waited out
}
