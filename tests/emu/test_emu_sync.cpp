// tests/emu/test_emu_sync.cpp — __syncthreads under the emulator: a planted missing barrier in a
// shared-memory reduction changes the result between schedules (with the barrier: bitwise equal
// everywhere), divergent barriers and deadlocks are reported with their call sites, exited
// threads drop out of barriers, the reducing barriers, and the schedule orders themselves.
#include <algorithm>
#include <numeric>
#include <random>

#include "tests/emu/emu_test_util.h"

// out[block] = sum of x[block * blockDim.x ...] by a tree in dynamic shared memory.
// with_barrier = false plants the classic bug: no barrier between the tree's levels.
__global__ void block_sum(const float* x, float* out, int with_barrier) {
  CTX_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    if (with_barrier) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

static std::vector<float> run_block_sum(const std::vector<float>& x, int threads, int with_barrier,
                                        cuemu::Schedule sched, uint64_t seed = 0) {
  cuemu::set_schedule(sched, seed);
  const int blocks = (int)x.size() / threads;
  DeviceBuffer<float> dx(x), dout((size_t)blocks);
  CTX_LAUNCH(block_sum, blocks, threads, threads * sizeof(float), 0, dx.ptr, dout.ptr, with_barrier);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  return dout.download();
}

TEST_F(Emu, MissingBarrierChangesTheResultBetweenSchedules) {
  const int threads = 256, blocks = 4;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x((size_t)threads * blocks);
  for (float& v : x) v = u(rng);
  // The reference: the same tree on the host.
  std::vector<float> ref(blocks);
  for (int b = 0; b < blocks; ++b) {
    std::vector<float> s(x.begin() + b * threads, x.begin() + (b + 1) * threads);
    for (int stride = threads / 2; stride > 0; stride /= 2)
      for (int t = 0; t < stride; ++t) s[t] += s[t + stride];
    ref[b] = s[0];
  }
  const auto fwd = run_block_sum(x, threads, 1, cuemu::Schedule::Forward);
  EXPECT_TRUE(bitwise_equal(fwd, ref));
  EXPECT_TRUE(bitwise_equal(run_block_sum(x, threads, 1, cuemu::Schedule::Reverse), ref));
  for (uint64_t seed : {1u, 2u, 3u}) EXPECT_TRUE(bitwise_equal(run_block_sum(x, threads, 1, cuemu::Schedule::Shuffle, seed), ref));

  const auto bug_fwd = run_block_sum(x, threads, 0, cuemu::Schedule::Forward);
  const auto bug_shuf = run_block_sum(x, threads, 0, cuemu::Schedule::Shuffle, 1);
  EXPECT_FALSE(bitwise_equal(bug_fwd, bug_shuf)) << "the missing barrier went unnoticed";
  EXPECT_FALSE(bitwise_equal(bug_fwd, ref));
}

constexpr int kFirstBarrierLine = __LINE__ + 4;  // the two __syncthreads() call sites below
constexpr int kSecondBarrierLine = __LINE__ + 5;
__global__ void divergent(float* out) {
  if (threadIdx.x < 16) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}

TEST_F(Emu, DivergentBarrierIsReportedWithBothCallSites) {
  DeviceBuffer<float> out(32);
  CTX_LAUNCH(divergent, 1, 32, 0, 0, out.ptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("divergent barrier"), std::string::npos) << m;
  EXPECT_NE(m.find("kernel divergent"), std::string::npos) << m;
  EXPECT_NE(m.find("threads 0-15 wait at __syncthreads() at " __FILE__ ":" + std::to_string(kFirstBarrierLine)),
            std::string::npos) << m;
  EXPECT_NE(m.find("threads 16-31 wait at __syncthreads() at " __FILE__ ":" + std::to_string(kSecondBarrierLine)),
            std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorLaunchFailure);
}

// Warps 1.. return before warp 0's barriers (llm.c's wte_backward pattern): legal.
__global__ void early_exit(float* tmp, float* out) {
  if (threadIdx.x >= 32) return;
  tmp[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tmp[(threadIdx.x + 1) % 32];
}

TEST_F(Emu, ExitedThreadsDropOutOfBarriers) {
  for (auto sched : {cuemu::Schedule::Forward, cuemu::Schedule::Reverse}) {
    cuemu::set_schedule(sched);
    DeviceBuffer<float> tmp(32), out(std::vector<float>(128, -1.0f));
    CTX_LAUNCH(early_exit, 1, 128, 0, 0, tmp.ptr, out.ptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
    std::vector<float> h = out.download();
    for (int i = 0; i < 32; ++i) EXPECT_EQ(h[i], (float)((i + 1) % 32));
    for (int i = 32; i < 128; ++i) EXPECT_EQ(h[i], -1.0f);
  }
}

// Half of a warp shuffles with a full mask while the other half waits at a barrier.
__global__ void warp_vs_barrier(float* out) {
  float v = (float)threadIdx.x;
  if (threadIdx.x < 16)
    v = __shfl_sync(0xffffffffu, v, 0);
  else
    __syncthreads();
  out[threadIdx.x] = v;
}

TEST_F(Emu, DeadlockIsReportedWithTheWaitersCallSites) {
  DeviceBuffer<float> out(32);
  CTX_LAUNCH(warp_vs_barrier, 1, 32, 0, 0, out.ptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
  EXPECT_NE(m.find("threads 0-15 wait at __shfl_sync(mask 0xffffffff)"), std::string::npos) << m;
  EXPECT_NE(m.find("threads 16-31 wait at __syncthreads()"), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorLaunchFailure);
}

__global__ void reducing_barriers(int* out) {
  const int t = threadIdx.x;
  out[0] = __syncthreads_count(t % 3 == 0);
  const int all_small = __syncthreads_and(t < 1000);
  const int any_big = __syncthreads_or(t > 90);
  const int none = __syncthreads_or(t > 1000);
  if (t == 0) {
    out[1] = all_small;
    out[2] = any_big;
    out[3] = none;
  }
}

TEST_F(Emu, ReducingBarriersCountAndCombinePredicates) {
  DeviceBuffer<int> out(std::vector<int>(4, -1));
  CTX_LAUNCH(reducing_barriers, 1, 100, 0, 0, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  std::vector<int> h = out.download();
  EXPECT_EQ(h[0], 34);  // 0, 3, ..., 99
  EXPECT_EQ(h[1], 1);
  EXPECT_EQ(h[2], 1);
  EXPECT_EQ(h[3], 0);
}

// order[k] = the thread that ran k-th.
__global__ void record_order(int* counter, int* order) {
  order[atomicAdd(counter, 1)] = (int)threadIdx.x;
}

static std::vector<int> run_order(cuemu::Schedule s, uint64_t seed) {
  cuemu::set_schedule(s, seed);
  DeviceBuffer<int> counter(std::vector<int>(1, 0)), order(64);
  CTX_LAUNCH(record_order, 1, 64, 0, 0, counter.ptr, order.ptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  return order.download();
}

TEST_F(Emu, ScheduleOrdersAreForwardReverseAndSeededShuffles) {
  std::vector<int> fwd(64), rev(64);
  std::iota(fwd.begin(), fwd.end(), 0);
  std::iota(rev.rbegin(), rev.rend(), 0);
  EXPECT_EQ(run_order(cuemu::Schedule::Forward, 0), fwd);
  EXPECT_EQ(run_order(cuemu::Schedule::Reverse, 0), rev);
  const auto s1 = run_order(cuemu::Schedule::Shuffle, 1);
  EXPECT_EQ(run_order(cuemu::Schedule::Shuffle, 1), s1) << "a seed gives one order";
  EXPECT_NE(run_order(cuemu::Schedule::Shuffle, 2), s1);
  EXPECT_NE(s1, fwd);
  std::vector<int> sorted = s1;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, fwd) << "a shuffle runs every thread once";
}
