// tests/emu/test_emu_launch.cpp — launches under the emulator: built-in indices in 1-3 dimensions,
// by-value parameters, dynamic shared memory (NaN at every block start), static __shared__, the
// hardware launch limits (cudaErrorInvalidConfiguration / InvalidValue through cudaGetLastError),
// cudaFuncSetAttribute, host pointers as arguments, the launch counters.
#include <cmath>

#include "tests/emu/emu_test_util.h"

// out[linear thread id over the grid] = packed (threadIdx, blockIdx); blockDim/gridDim checked.
__global__ void write_ids(int* out, dim3 expect_block, dim3 expect_grid, int* bad) {
  if (blockDim.x != expect_block.x || blockDim.y != expect_block.y || blockDim.z != expect_block.z ||
      gridDim.x != expect_grid.x || gridDim.y != expect_grid.y || gridDim.z != expect_grid.z)
    atomicAdd(bad, 1);
  const int tpb = blockDim.x * blockDim.y * blockDim.z;
  const int t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  out[b * tpb + t] = (int)(threadIdx.x | threadIdx.y << 5 | threadIdx.z << 10 | blockIdx.x << 15 |
                           blockIdx.y << 20 | blockIdx.z << 25);
}

TEST_F(Emu, EveryThreadOfA3dGridSeesItsIndices) {
  const dim3 block(4, 3, 2), grid(3, 2, 2);
  const int total = 4 * 3 * 2 * 3 * 2 * 2;
  DeviceBuffer<int> out(std::vector<int>(total, -1));
  DeviceBuffer<int> bad(std::vector<int>(1, 0));
  CTX_LAUNCH(write_ids, grid, block, 0, 0, out.ptr, block, grid, bad.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int> h = out.download();
  EXPECT_EQ(bad.download()[0], 0);
  int i = 0;
  for (unsigned bz = 0; bz < 2; ++bz)
    for (unsigned by = 0; by < 2; ++by)
      for (unsigned bx = 0; bx < 3; ++bx)
        for (unsigned tz = 0; tz < 2; ++tz)
          for (unsigned ty = 0; ty < 3; ++ty)
            for (unsigned tx = 0; tx < 4; ++tx, ++i)
              ASSERT_EQ(h[i], (int)(tx | ty << 5 | tz << 10 | bx << 15 | by << 20 | bz << 25)) << "slot " << i;
}

// Each thread modifies its own copy of a by-value parameter.
__global__ void by_value(int* out, int v) {
  v += (int)threadIdx.x;
  out[threadIdx.x] = v;
}

TEST_F(Emu, ParametersAreCopiedPerThread) {
  DeviceBuffer<int> out(64);
  CTX_LAUNCH(by_value, 1, 64, 0, 0, out.ptr, 100);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h = out.download();
  for (int i = 0; i < 64; ++i) EXPECT_EQ(h[i], 100 + i);
}

// Block b: thread 0 records whether the dynamic shared memory is all NaN on entry, then dirties it.
__global__ void smem_fresh(int* nan_on_entry, int n) {
  CTX_DYNAMIC_SHARED(float, s);
  __syncthreads();
  if (threadIdx.x == 0) {
    int all_nan = 1;
    for (int i = 0; i < n; ++i) all_nan &= std::isnan(s[i]) ? 1 : 0;
    nan_on_entry[blockIdx.x] = all_nan;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) s[i] = 1.0f;
}

TEST_F(Emu, DynamicSharedMemoryIsNanAtEveryBlockStart) {
  cuemu::set_worker_threads(1);  // every block reuses the same OS thread's buffer
  const int n = 1000, blocks = 5;
  DeviceBuffer<int> flags(std::vector<int>(blocks, 0));
  CTX_LAUNCH(smem_fresh, blocks, 64, n * sizeof(float), 0, flags.ptr, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  for (int f : flags.download()) EXPECT_EQ(f, 1);
}

// Static __shared__: one array per block, shared by its threads.
__global__ void static_shared_sum(int* out) {
  __shared__ int tile[128];
  tile[threadIdx.x] = (int)threadIdx.x + (int)blockIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) {
    int s = 0;
    for (int i = 0; i < (int)blockDim.x; ++i) s += tile[i];
    out[blockIdx.x] = s;
  }
}

TEST_F(Emu, StaticSharedMemoryIsSharedWithinABlock) {
  DeviceBuffer<int> out(8);
  CTX_LAUNCH(static_shared_sum, 8, 128, 0, 0, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> h = out.download();
  for (int b = 0; b < 8; ++b) EXPECT_EQ(h[b], 127 * 128 / 2 + 128 * b);
}

__global__ void noop(float* p) {
  if (p && threadIdx.x == 1) p[0] = 0.0f;  // only with two or more threads
}

TEST_F(Emu, LaunchLimitsAreEnforcedAsOnHardware) {
  const uint64_t launches = cuemu::stats().launches;
  CTX_LAUNCH(noop, 1, 2048, 0, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a configuration error is not sticky";
  CTX_LAUNCH(noop, 1, dim3(32, 32, 2), 0, 0, nullptr);  // 2048 threads in 3 dimensions
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CTX_LAUNCH(noop, 1, dim3(1, 1, 65), 0, 0, nullptr);  // z <= 64
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CTX_LAUNCH(noop, 0, 32, 0, 0, nullptr);  // empty grid
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  CTX_LAUNCH(noop, dim3(1, 65536), 32, 0, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidConfiguration);
  EXPECT_NE(cuemu::last_fault().find("grid"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(cuemu::stats().launches, launches) << "rejected launches do not run";
  CTX_LAUNCH(noop, dim3(1, 65535), 1, 0, 0, nullptr);  // the limits themselves are fine
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CTX_LAUNCH(noop, 1, 1024, 0, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  CTX_LAUNCH(noop, 1, dim3(1, 16, 64), 0, 0, nullptr);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

__global__ void big_smem(float* out) {
  CTX_DYNAMIC_SHARED(float, s);
  s[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  if (threadIdx.x == 0) out[0] = s[blockDim.x - 1];
}

TEST_F(Emu, DynamicSharedMemoryAbove48KiBNeedsTheAttribute) {
  DeviceBuffer<float> out(1);
  const size_t bytes = 64 * 1024;
  CTX_LAUNCH(big_smem, 1, 256, bytes, 0, out.ptr);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_NE(cuemu::last_fault().find("cudaFuncSetAttribute"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024),
            cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  ASSERT_EQ(cudaFuncSetAttribute(big_smem, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes), cudaSuccess);
  CTX_LAUNCH(big_smem, 1, 256, bytes, 0, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(out.download()[0], 255.0f);
  CTX_LAUNCH(big_smem, 1, 256, bytes + 4, 0, out.ptr);  // past the raised limit
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

TEST_F(Emu, HostPointerArgumentIsAStickyFault) {
  std::vector<float> host(4, 0.0f);
  CTX_LAUNCH(noop, 1, 1, 0, 0, host.data());
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress) << "sticky: still reported";
  EXPECT_NE(cuemu::last_fault().find("argument #0"), std::string::npos) << cuemu::last_fault();
  EXPECT_NE(cuemu::last_fault().find("noop"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(host[0], 0.0f) << "the kernel did not run";
  cuemu::clear_faults();
  DeviceBuffer<float> dev(4);
  CTX_LAUNCH(noop, 1, 1, 0, 0, dev.ptr + 4);  // one past the end is still the allocation's pointer
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Emu, CountersSeeMallocsFreesAndLaunches) {
  cuemu::reset_stats();
  {
    DeviceBuffer<float> a(10), b(20);
    CTX_LAUNCH(noop, 1, 1, 0, 0, a.ptr);
    CTX_LAUNCH(noop, 3, 1, 0, 0, b.ptr);
  }
  const cuemu::Stats s = cuemu::stats();
  EXPECT_EQ(s.mallocs, 2u);
  EXPECT_EQ(s.frees, 2u);
  EXPECT_EQ(s.launches, 2u);
}
