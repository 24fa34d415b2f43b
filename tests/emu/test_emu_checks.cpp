// tests/emu/test_emu_checks.cpp — the emulator's access checks (core/cuda/emu/access.cpp), each
// against the planted bug that used to pass unnoticed (correct results under every schedule, no
// error), and its correct twin, which must stay silent:
//   * out of bounds: a read one past an allocation, a write at [-1], a write 4 KiB past the end,
//     a dynamic shared memory overrun, a read after cudaFree (at the access, naming the allocation;
//     in ASan builds, ASan's report with the emulator's line naming it);
//   * static __shared__ memory NaN-filled per block like dynamic shared memory;
//   * a __syncthreads() in a branch that half a warp takes while the other half returns;
//   * the race detector (CTXLAB_EMU_RACECHECK): lost updates inside a block (shared and global),
//     lost updates across blocks, a missing barrier, legacy warp-synchronous code, a last-block
//     reduction without __threadfence, a spin-wait on another block's flag.
#include <cmath>
#include <string>

#include "tests/emu/emu_test_util.h"

#include "core/cuda/emu/emu_asan.h"  // CUEMU_ASAN
#if defined(CUEMU_ASAN)
#define EMU_TEST_ASAN 1
#endif

namespace {

// The checks need the access hooks: HOOKED_TEST and REQUIRE_ACCESS_HOOKS (tests/emu/emu_test_util.h).

std::string at(int line) { return std::string("test_emu_checks.cpp:") + std::to_string(line); }

class EmuChecks : public Emu {
 protected:
  void TearDown() override {
    cuemu::set_racecheck(false);
    Emu::TearDown();
  }
  // Runs launch() with the race detector on; returns the fault it reported ("" if none).
  template <class F>
  static std::string with_racecheck(F launch) {
    cuemu::set_racecheck(true);
    launch();
    const cudaError_t e = cudaDeviceSynchronize();
    cuemu::set_racecheck(false);
    std::string m = e == cudaSuccess ? std::string() : cuemu::last_fault();
    if (e != cudaSuccess) {
      EXPECT_EQ(take_error(), cudaErrorLaunchFailure) << m;
    }
    return m;
  }
};

// ---------------------------------------------------------------- out of bounds ----------------

constexpr int kReadPastLine = __LINE__ + 2;
__global__ void read_one_past(const float* x, float* out, int n) {
  out[threadIdx.x] = x[threadIdx.x + (threadIdx.x == 0 ? n : 0)];  // thread 0 reads x[n]
}
constexpr int kWriteBeforeLine = __LINE__ + 2;
__global__ void write_before_start(float* x) {
  x[(int)threadIdx.x - 1] = 1.0f;  // thread 0 writes x[-1]
}
constexpr int kWriteFarLine = __LINE__ + 2;
__global__ void write_far_past(float* x, int n) {
  x[n + 1024] = 1.0f;  // 4 KiB past the end
}
constexpr int kSmemOverrunLine = __LINE__ + 4;
__global__ void smem_overrun(float* out) {
  CTX_DYNAMIC_SHARED(float, s);  // blockDim.x floats
  const int t = threadIdx.x;
  s[t + 1] = (float)t;  // the last thread writes one past the end
  __syncthreads();
  out[t] = s[t];
}
#if !defined(EMU_TEST_ASAN)
struct Borrowed {  // a pointer the launch check does not look into
  const float* p;
};
__global__ void read_borrowed(Borrowed x, float* out) { out[threadIdx.x] = x.p[threadIdx.x]; }

HOOKED_TEST(EmuChecks, ReadOnePastTheEndNamesTheAllocation) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> x(32), out(32);
  CTX_LAUNCH(read_one_past, 1, 32, 0, 0, x.ptr, out.ptr, 32);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("out-of-bounds access in kernel read_one_past"), std::string::npos) << m;
  EXPECT_NE(m.find("thread (0,0,0) reads 4 bytes of global memory at"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kReadPastLine)), std::string::npos) << m;
  EXPECT_NE(m.find("is 0 bytes past the end of allocation #"), std::string::npos) << m;
  EXPECT_NE(m.find("(128 bytes at"), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
}

HOOKED_TEST(EmuChecks, WriteBeforeTheStartIsCaughtAndTheFreeStillWorks) {
  REQUIRE_ACCESS_HOOKS();
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, 64 * sizeof(float)), cudaSuccess);
  CTX_LAUNCH(write_before_start, 1, 64, 0, 0, x);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("thread (0,0,0) writes 4 bytes of global memory at " ), std::string::npos) << m;
  EXPECT_NE(m.find(at(kWriteBeforeLine)), std::string::npos) << m;
  EXPECT_NE(m.find("is 4 bytes before the start of allocation #"), std::string::npos) << m;
  EXPECT_NE(m.find("(256 bytes at"), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaFree(x), cudaSuccess) << "the guard before the allocation was not written: nothing to corrupt";
}

HOOKED_TEST(EmuChecks, WriteFourKibPastTheEndNamesTheAllocation) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> x(100), neighbour(100);
  CTX_LAUNCH(write_far_past, 1, 1, 0, 0, x.ptr, 100);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find(at(kWriteFarLine)), std::string::npos) << m;
  EXPECT_NE(m.find("is 4096 bytes past the end of allocation #"), std::string::npos) << m;
  EXPECT_NE(m.find("(400 bytes at"), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
}

HOOKED_TEST(EmuChecks, DynamicSharedMemoryOverrunIsCaught) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> out(64);
  CTX_LAUNCH(smem_overrun, 1, 64, 64 * sizeof(float), 0, out.ptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("thread (63,0,0) writes 4 bytes of shared memory at"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kSmemOverrunLine)), std::string::npos) << m;
  EXPECT_NE(m.find("0 bytes past the end of the launch's 256 bytes of dynamic shared memory"), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
}

HOOKED_TEST(EmuChecks, ReadAfterFreeNamesTheFreedAllocation) {
  REQUIRE_ACCESS_HOOKS();
  float* x = nullptr;
  ASSERT_EQ(cudaMalloc(&x, 32 * sizeof(float)), cudaSuccess);
  DeviceBuffer<float> out(32);
  ASSERT_EQ(cudaFree(x), cudaSuccess);
  CTX_LAUNCH(read_borrowed, 1, 32, 0, 0, Borrowed{x}, out.ptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("is at offset 0 of freed allocation #"), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
}
TEST_F(EmuChecks, AGuardHitByCodeWithoutHooksIsNamedBeforeTheCrash) {
  // Host code has no hook to check it: the guard's PROT_NONE fault, with the emulator's line.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* x = nullptr;
        cudaMalloc(&x, 64 * sizeof(float));
        x[-1] = 1.0f;
      },
      "memory fault on device memory .* is 4 bytes before the start of allocation #[0-9]+ \\(256 bytes");
}
#else
// ASan builds: no access hooks; the slack and guards are poisoned and ASan reports the access,
// with the emulator's line naming the allocation (__asan_on_error).
TEST_F(EmuChecks, OutOfBoundsAccessesAreAsanReportsNamingTheAllocation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* x = nullptr;
        float* out = nullptr;
        cudaMalloc(&x, 32 * sizeof(float));
        cudaMalloc(&out, 32 * sizeof(float));
        CTX_LAUNCH(read_one_past, 1, 32, 0, 0, x, out, 32);
      },
      "0 bytes past the end of allocation #[0-9]+ \\(128 bytes");
  EXPECT_DEATH(
      {
        float* x = nullptr;
        cudaMalloc(&x, 64 * sizeof(float));
        CTX_LAUNCH(write_before_start, 1, 64, 0, 0, x);
      },
      "4 bytes before the start of allocation #[0-9]+ \\(256 bytes");
  EXPECT_DEATH(
      {
        float* x = nullptr;
        cudaMalloc(&x, 100 * sizeof(float));
        CTX_LAUNCH(write_far_past, 1, 1, 0, 0, x, 100);
      },
      "4096 bytes past the end of allocation #[0-9]+ \\(400 bytes");
  EXPECT_DEATH(
      {
        float* out = nullptr;
        cudaMalloc(&out, 64 * sizeof(float));
        CTX_LAUNCH(smem_overrun, 1, 64, 64 * sizeof(float), 0, out);
      },
      "0 bytes past the end of the launch's 256 bytes of dynamic shared memory");
}
#endif

// ---------------------------------------------------------------- static shared memory ---------

// Block 0 fills the static array; every block then reads it. Only block 0's reads see values:
// each block has its own shared memory, and a block's unwritten shared memory is NaN.
__global__ void static_shared_per_block(float* out) {
  __shared__ float cache[32];
  const int t = threadIdx.x;
  if (blockIdx.x == 0) cache[t] = 1.0f;
  __syncthreads();
  out[blockIdx.x * 32 + t] = cache[t];
}

HOOKED_TEST(EmuChecks, StaticSharedMemoryIsNanFilledPerBlockLikeDynamic) {
  REQUIRE_ACCESS_HOOKS();
  cuemu::set_worker_threads(1);  // both blocks on one OS thread: the second used to read the first's values
  DeviceBuffer<float> out(64);
  for (int launch = 0; launch < 2; ++launch) {
    CTX_LAUNCH(static_shared_per_block, 2, 32, 0, 0, out.ptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cuemu::last_fault();
    const std::vector<float> h = out.download();
    for (int t = 0; t < 32; ++t) {
      EXPECT_EQ(h[t], 1.0f) << t;
      EXPECT_TRUE(std::isnan(h[32 + t])) << "block 1 read block 0's static shared value " << h[32 + t];
    }
  }
  cuemu::set_worker_threads(2);
}

// ---------------------------------------------------------------- barriers ---------------------

constexpr int kHalfWarpBarrierLine = __LINE__ + 6;
__global__ void barrier_in_half_warp_branch(float* out) {
  CTX_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  if (t < 16) {
    s[t] = (float)t;
    __syncthreads();  // lanes 16-31 returned: they never reach it
    out[t] = s[(t + 1) % 16];
  }
}

TEST_F(EmuChecks, BarrierThatReturnedLanesOfAWarpNeverReachIsAnError) {
  for (auto sched : {cuemu::Schedule::Forward, cuemu::Schedule::Reverse, cuemu::Schedule::Shuffle}) {
    cuemu::set_schedule(sched, 3);
    DeviceBuffer<float> out(32);
    CTX_LAUNCH(barrier_in_half_warp_branch, 1, 32, 16 * sizeof(float), 0, out.ptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
    const std::string m = cuemu::last_fault();
    EXPECT_NE(m.find("barrier in divergent code in kernel barrier_in_half_warp_branch"), std::string::npos) << m;
    EXPECT_NE(m.find("in warp 0, threads 16-31 exited since the previous barrier without reaching __syncthreads() at " __FILE__
                     ":" + std::to_string(kHalfWarpBarrierLine)),
              std::string::npos)
        << m;
    EXPECT_NE(m.find("threads 0-15 wait at __syncthreads()"), std::string::npos) << m;
    EXPECT_EQ(take_error(), cudaErrorLaunchFailure);
  }
}

// ---------------------------------------------------------------- the race detector ------------

// Lost updates inside a block: every thread increments one counter without an atomic. A fiber runs
// to its next synchronisation point uninterrupted, so the count is exact under every schedule.
constexpr int kSharedCounterLine = __LINE__ + 5;
__global__ void shared_counter(int* out) {
  CTX_DYNAMIC_SHARED(int, acc);
  if (threadIdx.x == 0) acc[0] = 0;
  __syncthreads();
  acc[0] += 1;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = acc[0];
}
constexpr int kGlobalCounterLine = __LINE__ + 1;
__global__ void global_counter(int* acc) { acc[0] += 1; }
__global__ void atomic_counter(int* acc) { atomicAdd(acc, 1); }

HOOKED_TEST(EmuChecks, LostUpdatesInsideABlockAreRaces) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<int> out(std::vector<int>(1, 0));
  for (auto sched : {cuemu::Schedule::Forward, cuemu::Schedule::Reverse, cuemu::Schedule::Shuffle}) {
    cuemu::set_schedule(sched, 5);
    CTX_LAUNCH(shared_counter, 1, 1024, sizeof(int), 0, out.ptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(out.download()[0], 1024) << "the bug the schedules cannot show";
  }
  cuemu::set_schedule(cuemu::Schedule::Forward);
  std::string m = with_racecheck([&] { CTX_LAUNCH(shared_counter, 1, 1024, sizeof(int), 0, out.ptr); });
  EXPECT_NE(m.find("race hazard in kernel shared_counter"), std::string::npos) << m;
  EXPECT_NE(m.find("(read-after-write) on shared memory: thread (1,0,0) reads 4 bytes at"), std::string::npos) << m;
  EXPECT_NE(m.find("thread (0,0,0) wrote them at"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kSharedCounterLine)), std::string::npos) << m;
  EXPECT_NE(m.find("no __syncthreads() between"), std::string::npos) << m;
  EXPECT_NE(m.find("= dynamic shared memory + 0 (of 4 bytes)"), std::string::npos) << m;

  DeviceBuffer<int> acc(std::vector<int>(1, 0));
  m = with_racecheck([&] { CTX_LAUNCH(global_counter, 1, 1024, 0, 0, acc.ptr); });
  EXPECT_NE(m.find("(read-after-write) on global memory: thread (1,0,0) reads 4 bytes at"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kGlobalCounterLine)), std::string::npos) << m;
  EXPECT_NE(m.find("= allocation #"), std::string::npos) << m;
  EXPECT_NE(m.find("(4 bytes at"), std::string::npos) << m;

  acc.upload(std::vector<int>(1, 0));
  EXPECT_EQ(with_racecheck([&] { CTX_LAUNCH(atomic_counter, 64, 1024, 0, 0, acc.ptr); }), "");
  EXPECT_EQ(acc.download()[0], 64 * 1024);
}

HOOKED_TEST(EmuChecks, LostUpdatesAcrossBlocksAreRaces) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<int> acc(std::vector<int>(1, 0));
  const std::string m = with_racecheck([&] { CTX_LAUNCH(global_counter, 1000, 1, 0, 0, acc.ptr); });
  EXPECT_NE(m.find("race hazard in kernel global_counter"), std::string::npos) << m;
  EXPECT_NE(m.find("on global memory: block ("), std::string::npos) << m;
  EXPECT_NE(m.find("blocks of one launch are not ordered"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kGlobalCounterLine)), std::string::npos) << m;
}

// Blocks 2k and 2k + 1 own the two 16-bit halves of word k: disjoint bytes, no race. The two OS
// threads running them update the word's shadow cell at the same instants, thousands of times; a
// record torn between the two (one block's run id with the other's byte mask) reported a hazard
// that was not there.
__global__ void split_word_updates(volatile unsigned short* x, int reps) {
  for (int r = 0; r < reps; ++r) x[blockIdx.x] = (unsigned short)(x[blockIdx.x] + 1);
}

HOOKED_TEST(EmuChecks, BlocksWritingTheTwoHalvesOfOneWordAtOnceAreNoRace) {
  REQUIRE_ACCESS_HOOKS();
  constexpr int kBlocks = 64, kReps = 20000;
  DeviceBuffer<unsigned short> x(std::vector<unsigned short>(kBlocks, 0));
  EXPECT_EQ(with_racecheck([&] { CTX_LAUNCH(split_word_updates, kBlocks, 1, 0, 0, x.ptr, kReps); }), "");
  EXPECT_EQ(x.download(), std::vector<unsigned short>(kBlocks, (unsigned short)kReps));
}

// The classic tree reduction without its barriers (test_emu_sync.cpp shows that the schedules
// change its result): the race detector names the hazard under the forward schedule alone.
constexpr int kTreeLine = __LINE__ + 7;
__global__ void tree_sum(const float* x, float* out, int with_barrier) {
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

HOOKED_TEST(EmuChecks, MissingBarrierIsARaceUnderTheForwardScheduleAlone) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> x(std::vector<float>(4 * 256, 1.0f)), out(4);
  EXPECT_EQ(with_racecheck([&] { CTX_LAUNCH(tree_sum, 4, 256, 256 * sizeof(float), 0, x.ptr, out.ptr, 1); }), "");
  EXPECT_EQ(out.download(), std::vector<float>(4, 256.0f));
  const std::string m =
      with_racecheck([&] { CTX_LAUNCH(tree_sum, 4, 256, 256 * sizeof(float), 0, x.ptr, out.ptr, 0); });
  EXPECT_NE(m.find("race hazard in kernel tree_sum"), std::string::npos) << m;
  EXPECT_NE(m.find("-after-"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kTreeLine)), std::string::npos) << m;
}

// Legacy warp-synchronous code: the last warp of a reduction without __syncwarp(), relying on
// lockstep execution (gone since Volta). with_syncwarp = 1 is the correct form.
constexpr int kWarpSyncLine = __LINE__ + 7;
__global__ void warp_tail_sum(const float* x, float* out, int with_syncwarp) {
  CTX_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  s[t] = x[t];
  if (with_syncwarp) __syncwarp();
  for (int stride = 16; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    if (with_syncwarp) __syncwarp();
  }
  if (t == 0) out[0] = s[0];
}

HOOKED_TEST(EmuChecks, WarpSynchronousCodeWithoutSyncwarpIsARace) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> x(std::vector<float>(32, 1.0f)), out(1);
  EXPECT_EQ(with_racecheck([&] { CTX_LAUNCH(warp_tail_sum, 1, 32, 32 * sizeof(float), 0, x.ptr, out.ptr, 1); }), "");
  EXPECT_EQ(out.download()[0], 32.0f);
  const std::string m =
      with_racecheck([&] { CTX_LAUNCH(warp_tail_sum, 1, 32, 32 * sizeof(float), 0, x.ptr, out.ptr, 0); });
  EXPECT_NE(m.find("race hazard in kernel warp_tail_sum"), std::string::npos) << m;
  EXPECT_NE(m.find("and no __syncwarp() between these lanes of warp 0"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kWarpSyncLine)), std::string::npos) << m;
}

// A last-block reduction (CUDA's threadFenceReduction sample): each block writes its partial sum,
// counts itself done with atomicInc, and the block that counts last adds the partials. Without
// __threadfence() between the write and the count, the last block may read stale partials.
constexpr int kPartialWriteLine = __LINE__ + 10;
constexpr int kPartialReadLine = __LINE__ + 15;
__global__ void last_block_sum(const float* x, float* partial, unsigned* done, float* out, int with_fence) {
  CTX_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  s[t] = x[blockIdx.x * blockDim.x + t];
  __syncthreads();
  if (t == 0) {
    float sum = 0.0f;
    for (unsigned i = 0; i < blockDim.x; ++i) sum += s[i];
    partial[blockIdx.x] = sum;
    if (with_fence) __threadfence();
    const unsigned ticket = atomicInc(done, gridDim.x);
    if (ticket == gridDim.x - 1) {  // the last block
      float total = 0.0f;
      for (unsigned b = 0; b < gridDim.x; ++b)
        total += partial[b];
      out[0] = total;
      *done = 0;
    }
  }
}

HOOKED_TEST(EmuChecks, LastBlockReductionWithoutThreadfenceIsARace) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> x(std::vector<float>(16 * 64, 1.0f)), partial(16), out(1);
  DeviceBuffer<unsigned> done(std::vector<unsigned>(1, 0));
  auto launch = [&](int fence) {
    CTX_LAUNCH(last_block_sum, 16, 64, 64 * sizeof(float), 0, x.ptr, partial.ptr, done.ptr, out.ptr, fence);
  };
  EXPECT_EQ(with_racecheck([&] { launch(1); }), "");
  EXPECT_EQ(out.download()[0], 1024.0f);
  launch(0);  // without the detector: the right answer, no error
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(out.download()[0], 1024.0f);
  const std::string m = with_racecheck([&] { launch(0); });
  EXPECT_NE(m.find("race hazard in kernel last_block_sum"), std::string::npos) << m;
  EXPECT_NE(m.find("(read-after-write) on global memory"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kPartialReadLine)), std::string::npos) << m;
  EXPECT_NE(m.find(at(kPartialWriteLine)), std::string::npos) << m;
  EXPECT_NE(m.find("__threadfence()"), std::string::npos) << m;
}

// A spin-wait on another block's flag: block 0 waits until block 1 has published its value.
// Nothing guarantees that block 1 runs while block 0 waits (on a GPU either), and the flag and
// the value are plain accesses of two blocks.
constexpr int kSpinLine = __LINE__ + 4;
__global__ void wait_for_other_block(int* flag, int* value, int* out) {
  if (blockIdx.x == 0) {
    volatile int* f = flag;
    while (f[0] == 0) {
    }
    out[0] = value[0];
  } else {
    value[0] = 42;
    *(volatile int*)flag = 1;
  }
}

HOOKED_TEST(EmuChecks, SpinWaitOnAnotherBlockIsCaught) {
  REQUIRE_ACCESS_HOOKS();
  // One OS thread: block 0 runs first and block 1 never does while it waits (it used to hang).
  cuemu::set_worker_threads(1);
  DeviceBuffer<int> flag(std::vector<int>(1, 0)), value(std::vector<int>(1, 0)), out(1);
  CTX_LAUNCH(wait_for_other_block, 2, 1, 0, 0, flag.ptr, value.ptr, out.ptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("spin-wait in kernel wait_for_other_block"), std::string::npos) << m;
  EXPECT_NE(m.find(at(kSpinLine)), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorLaunchFailure);
  // Two OS threads: block 1 may run alongside and the wait ends (it used to pass); the race
  // detector names the flag (or, if block 1 came second on block 0's OS thread, the spin).
  cuemu::set_worker_threads(2);
  flag.upload(std::vector<int>(1, 0));
  m = with_racecheck([&] { CTX_LAUNCH(wait_for_other_block, 2, 1, 0, 0, flag.ptr, value.ptr, out.ptr); });
  EXPECT_TRUE(m.find("race hazard in kernel wait_for_other_block") != std::string::npos ||
              m.find("spin-wait in kernel wait_for_other_block") != std::string::npos)
      << m;
}

}  // namespace
