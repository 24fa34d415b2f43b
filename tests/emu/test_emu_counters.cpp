// tests/emu/test_emu_counters.cpp — the emulator's counters (emu_counters.h): sectors per warp
// request of coalesced, strided, looped and divergent global loads; shared-memory wavefronts of a
// conflict-free, a 32-way conflicted and a broadcast access; distinct (DRAM) bytes; the mma hook;
// a cuBLAS call's FLOPs and bytes, a device copy's and a memset's bytes; nothing recorded when the
// counters are off; the same counts under another thread schedule.
#include <vector>

#include "core/cuda/emu/cublas_emu.h"
#include "core/cuda/mma.cuh"
#include "tests/emu/emu_test_util.h"

namespace {
namespace tc = ctx::cuda::tc;

__global__ void copy_coalesced(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x]; }
__global__ void load_stride32(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x * 32]; }
// Four loads at one call site: four requests (the lanes' k-th executions form the k-th).
__global__ void load_looped(const float* in, float* out) {
  float s = 0.0f;
  for (int i = 0; i < 4; ++i) s += in[i * 32 + threadIdx.x];
  out[threadIdx.x] = s;
}
__global__ void load_half_warp(const float* in, float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = in[threadIdx.x];
}
// mode 0: s[lane] (conflict-free), 1: s[lane * 32] (32-way conflict), 2: s[0] (broadcast)
__global__ void shared_pattern(float* out, int mode) {
  CTX_DYNAMIC_SHARED(float, s);  // 32 * 32 floats
  const unsigned t = threadIdx.x;
  const unsigned at = mode == 0 ? t : mode == 1 ? t * 32 : 0;
  if (mode != 2 || t == 0) s[at] = (float)t;
  __syncthreads();
  out[t] = s[at];
}
// A warp's cp.async of 4 rows of 128 contiguous bytes (16 a lane, .cg) into the rows of a padded
// [4, 72] b16 tile (144-byte rows, as the tensor-core attention's tiles), landed by the wait.
__global__ void cp_async_rows(const uint16_t* in, float* out) {
  CTX_DYNAMIC_SHARED(uint16_t, sm);
  tc::AsyncCopies cp;
  const unsigned l = threadIdx.x, r = l / 8, c = l % 8;
  cp.copy<16, true>(sm + r * 72 + c * 8, in + r * 64 + c * 8);
  cp.commit();
  cp.wait<0>();
  out[l] = 0.0f;
}
__global__ void mma_twice(float* out) {
  if (threadIdx.x % 32 == 0) {
    cuemu::count_mma(16, 8, 16, cuemu::MmaType::BF16);
    cuemu::count_mma(16, 8, 8, cuemu::MmaType::TF32);
  }
  out[threadIdx.x] = 0.0f;
}

// Counters on for the test, every record of it in records().
class EmuCounters : public Emu {
 protected:
  void SetUp() override {
    Emu::SetUp();
    cuemu::set_counters(true);
    cuemu::reset_counters();
  }
  void TearDown() override {
    cuemu::set_counters(false);
    cuemu::reset_counters();
    Emu::TearDown();
  }
  // The one record of the kernel named `name`.
  static cuemu::LaunchCounters only(const char* name) {
    cuemu::LaunchCounters found;
    int n = 0;
    for (const cuemu::LaunchCounters& r : cuemu::counter_records())
      if (r.kernel == name) found = r, ++n;
    EXPECT_EQ(n, 1) << "launches of " << name;
    return found;
  }
};

HOOKED_TEST(EmuCounters, CoalescedLoadIsFourSectorsPerRequest) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> in(std::vector<float>(64, 1.0f)), out(64);
  CTX_LAUNCH(copy_coalesced, 1, 64, 0, 0, in.ptr, out.ptr);  // two warps
  const cuemu::LaunchCounters r = only("copy_coalesced");
  EXPECT_EQ(r.grid[0], 1u);
  EXPECT_EQ(r.block[0], 64u);
  EXPECT_EQ(r.ld_requests, 2u);
  EXPECT_EQ(r.ld_sectors, 8u);
  EXPECT_EQ(r.ld_ideal_sectors, 8u);
  EXPECT_EQ(r.st_requests, 2u);
  EXPECT_EQ(r.st_sectors, 8u);
  EXPECT_EQ(r.bytes_read, 256u);
  EXPECT_EQ(r.bytes_written, 256u);
  EXPECT_EQ(r.dram_read_bytes, 256u);
  EXPECT_EQ(r.shared_requests, 0u);
}

HOOKED_TEST(EmuCounters, Stride32LoadIsThirtyTwoSectorsPerRequest) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> in(std::vector<float>(32 * 32, 1.0f)), out(32);
  CTX_LAUNCH(load_stride32, 1, 32, 0, 0, in.ptr, out.ptr);
  const cuemu::LaunchCounters r = only("load_stride32");
  EXPECT_EQ(r.ld_requests, 1u);
  EXPECT_EQ(r.ld_sectors, 32u);
  EXPECT_EQ(r.ld_ideal_sectors, 4u);  // 128 bytes wanted: efficiency 1/8
  EXPECT_EQ(r.st_sectors, 4u);
  EXPECT_EQ(r.dram_read_bytes, 32u * 32u);
}

HOOKED_TEST(EmuCounters, RequestsFollowEachLanesOccurrenceAndActiveLanes) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> in(std::vector<float>(128, 1.0f)), out(32);
  CTX_LAUNCH(load_looped, 1, 32, 0, 0, in.ptr, out.ptr);
  const cuemu::LaunchCounters r = only("load_looped");
  EXPECT_EQ(r.ld_requests, 4u);
  EXPECT_EQ(r.ld_sectors, 16u);
  CTX_LAUNCH(load_half_warp, 1, 32, 0, 0, in.ptr, out.ptr);
  const cuemu::LaunchCounters h = only("load_half_warp");
  EXPECT_EQ(h.ld_requests, 1u);
  EXPECT_EQ(h.ld_sectors, 2u);
  EXPECT_EQ(h.bytes_read, 64u);
}

HOOKED_TEST(EmuCounters, SharedWavefrontsCountBankConflictsNotBroadcasts) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> out(32);
  const size_t smem = 32 * 32 * sizeof(float);
  CTX_LAUNCH(shared_pattern, 1, 32, smem, 0, out.ptr, 0);
  CTX_LAUNCH(shared_pattern, 1, 32, smem, 0, out.ptr, 1);
  CTX_LAUNCH(shared_pattern, 1, 32, smem, 0, out.ptr, 2);
  const std::vector<cuemu::LaunchCounters> r = cuemu::counter_records();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].shared_requests, 2u);  // a store and a load
  EXPECT_EQ(r[0].shared_wavefronts, 2u);
  EXPECT_EQ(r[1].shared_requests, 2u);
  EXPECT_EQ(r[1].shared_wavefronts, 64u);  // 32-way, both ways
  EXPECT_EQ(r[1].shared_ideal_wavefronts, 2u);
  EXPECT_EQ(r[2].shared_requests, 2u);  // lane 0's store, the whole warp's load of one word
  EXPECT_EQ(r[2].shared_wavefronts, 2u);
}

// A 16-byte cp.async is one access a lane on each side, as on the GPU: its 512 contiguous bytes
// are 16 sectors (all of them wanted) and its padded rows take 4 wavefronts, the ideal (counted as
// four 4-byte accesses, the copy read as 64 sectors for 16 and wrote 16 wavefronts for 4).
HOOKED_TEST(EmuCounters, ACpAsyncCopyIsOneAccessOfItsSize) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<uint16_t> in(std::vector<uint16_t>(256, 1));
  DeviceBuffer<float> out(32);
  CTX_LAUNCH(cp_async_rows, 1, 32, 4 * 72 * sizeof(uint16_t), 0, in.ptr, out.ptr);
  const cuemu::LaunchCounters r = only("cp_async_rows");
  EXPECT_EQ(r.ld_requests, 1u);
  EXPECT_EQ(r.ld_sectors, 16u);
  EXPECT_EQ(r.ld_ideal_sectors, 16u);
  EXPECT_EQ(r.shared_requests, 2u);  // the poisoning store at the copy, the landing store at the wait
  EXPECT_EQ(r.shared_wavefronts, 8u);
  EXPECT_EQ(r.shared_ideal_wavefronts, 8u);
  EXPECT_EQ(r.bytes_read, 512u);
}

HOOKED_TEST(EmuCounters, CountsAreTheSameUnderAnotherSchedule) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> in(std::vector<float>(128, 1.0f)), out(32);
  CTX_LAUNCH(load_looped, 1, 32, 0, 0, in.ptr, out.ptr);
  cuemu::set_schedule(cuemu::Schedule::Shuffle, 7);
  CTX_LAUNCH(load_looped, 1, 32, 0, 0, in.ptr, out.ptr);
  const std::vector<cuemu::LaunchCounters> r = cuemu::counter_records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].ld_requests, r[0].ld_requests);
  EXPECT_EQ(r[1].ld_sectors, r[0].ld_sectors);
  EXPECT_EQ(r[1].st_sectors, r[0].st_sectors);
}

TEST_F(EmuCounters, MmaHookCountsOncePerWarpInstruction) {
  DeviceBuffer<float> out(3 * 64);
  CTX_LAUNCH(mma_twice, 3, 64, 0, 0, out.ptr);  // 3 blocks x 2 warps
  const cuemu::LaunchCounters r = only("mma_twice");
  EXPECT_EQ(r.mma[(int)cuemu::MmaType::BF16], 6u);
  EXPECT_EQ(r.mma[(int)cuemu::MmaType::TF32], 6u);
  EXPECT_EQ(r.tensor_flops[(int)cuemu::MmaType::BF16], 6.0 * 2 * 16 * 8 * 16);
  EXPECT_EQ(r.tensor_flops[(int)cuemu::MmaType::TF32], 6.0 * 2 * 16 * 8 * 8);
  cuemu::count_mma(16, 8, 16, cuemu::MmaType::BF16);  // outside a kernel: nothing
  EXPECT_EQ(cuemu::counter_records().size(), 1u);
}

TEST_F(EmuCounters, CublasCallsRecordFlopsAndOperandBytes) {
  const int m = 8, n = 4, k = 16;
  DeviceBuffer<float> a(std::vector<float>(m * k, 1.0f)), b(std::vector<float>(k * n, 1.0f)), c(m * n);
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a.ptr, m, b.ptr, k, &zero, c.ptr, m),
            CUBLAS_STATUS_SUCCESS);
  cublasDestroy(h);
  const cuemu::LaunchCounters r = only("cublasSgemm");
  EXPECT_EQ(r.fp32_flops, 2.0 * m * n * k);
  EXPECT_EQ(r.dram_read_bytes, (uint64_t)(m * k + k * n) * 4);  // beta = 0: C not read
  EXPECT_EQ(r.dram_write_bytes, (uint64_t)m * n * 4);
}

TEST_F(EmuCounters, DeviceCopiesAndMemsetsRecordTheirBytes) {
  DeviceBuffer<float> a(std::vector<float>(64, 1.0f)), b(64);  // the upload is not device traffic
  EXPECT_TRUE(cuemu::counter_records().empty());
  ASSERT_EQ(cudaMemcpy(b.ptr, a.ptr, 256, cudaMemcpyDeviceToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(b.ptr, 0, 128), cudaSuccess);
  const cuemu::LaunchCounters c = only("cudaMemcpy (device to device)"), m = only("cudaMemset");
  EXPECT_EQ(c.dram_read_bytes, 256u);
  EXPECT_EQ(c.dram_write_bytes, 256u);
  EXPECT_EQ(m.dram_read_bytes, 0u);
  EXPECT_EQ(m.dram_write_bytes, 128u);
}

TEST_F(EmuCounters, NothingIsRecordedWhenOff) {
  cuemu::set_counters(false);
  DeviceBuffer<float> in(std::vector<float>(32, 1.0f)), out(32);
  CTX_LAUNCH(copy_coalesced, 1, 32, 0, 0, in.ptr, out.ptr);
  EXPECT_TRUE(cuemu::counter_records().empty());
  EXPECT_FALSE(cuemu::counters());
}

}  // namespace
