// tests/emu/test_emu_memory.cpp — device memory and the runtime API under the emulator:
// NaN-filled 256-byte-aligned allocations, copies with direction and bounds checks and counted by
// direction, double and unknown frees, out-of-bounds writes by a kernel (at the access; ASan's
// report in ASan builds), memset, streams, events, device queries, error strings.
#include <cmath>
#include <cstdint>

#include "tests/emu/emu_test_util.h"

#include "core/cuda/emu/emu_asan.h"  // CUEMU_ASAN
#if defined(CUEMU_ASAN)
#define EMU_TEST_ASAN 1
#endif

TEST_F(Emu, AllocationsAreAlignedNanFilledAndCounted) {
  const cuemu::Stats before = cuemu::stats();
  float* p = nullptr;
  double* q = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 37 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&q, 5 * sizeof(double)), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 256, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(q) % 256, 0u);
  std::vector<float> hp(37);
  std::vector<double> hq(5);
  ASSERT_EQ(cudaMemcpy(hp.data(), p, 37 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(hq.data(), q, 5 * sizeof(double), cudaMemcpyDeviceToHost), cudaSuccess);
  for (float v : hp) EXPECT_TRUE(std::isnan(v));
  for (double v : hq) EXPECT_TRUE(std::isnan(v));
  EXPECT_TRUE(cuemu::is_device_range(p, 37 * sizeof(float)));
  EXPECT_FALSE(cuemu::is_device_range(p, 38 * sizeof(float)));
  const cuemu::Stats mid = cuemu::stats();
  EXPECT_EQ(mid.mallocs - before.mallocs, 2u);
  EXPECT_EQ(mid.live_allocations - before.live_allocations, 2u);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(q), cudaSuccess);
  EXPECT_EQ(cuemu::stats().frees - before.frees, 2u);
  void* z = reinterpret_cast<void*>(1);
  EXPECT_EQ(cudaMalloc(&z, 0), cudaSuccess);
  EXPECT_EQ(z, nullptr);
}

TEST_F(Emu, CopiesCheckDirectionAndBounds) {
  DeviceBuffer<float> d(8), e(8);
  std::vector<float> h(8, 1.0f), back(8, 0.0f);
  EXPECT_EQ(cudaMemcpy(d.ptr, h.data(), 32, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(e.ptr, d.ptr, 32, cudaMemcpyDeviceToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(back.data(), e.ptr, 32, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(back, h);
  // Wrong directions: the planted bugs.
  EXPECT_EQ(cudaMemcpy(d.ptr, h.data(), 32, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
  EXPECT_NE(cuemu::last_fault().find("the source"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(h.data(), d.ptr, 32, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaMemcpy(h.data(), back.data(), 32, cudaMemcpyDeviceToDevice), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidMemcpyDirection);
  // Past the end of an allocation.
  std::vector<float> big(9, 0.0f);
  EXPECT_EQ(cudaMemcpy(d.ptr, big.data(), 36, cudaMemcpyHostToDevice), cudaErrorInvalidValue);
  EXPECT_NE(cuemu::last_fault().find("overruns allocation"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(cudaMemcpyAsync(d.ptr + 4, big.data(), 20, cudaMemcpyHostToDevice, 0), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(h.data(), 0, 8), cudaErrorInvalidValue) << "memset of host memory";
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(d.ptr, 0, 32), cudaSuccess);
  EXPECT_EQ(d.download(), std::vector<float>(8, 0.0f));
}

// Uploads and downloads are counted by where the bytes went, whatever the kind (cudaMemcpyDefault,
// pinned host memory); device -> device copies, memsets and rejected copies are neither.
TEST_F(Emu, CopiesAreCountedByDirection) {
  DeviceBuffer<float> d(8), e(8);
  std::vector<float> h(8, 1.0f);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 32), cudaSuccess);
  const cuemu::Stats before = cuemu::stats();
  EXPECT_EQ(cudaMemcpy(d.ptr, h.data(), 32, cudaMemcpyHostToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(e.ptr, pinned, 16, cudaMemcpyDefault, 0), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(e.ptr, d.ptr, 32, cudaMemcpyDeviceToDevice), cudaSuccess);
  EXPECT_EQ(cudaMemset(d.ptr, 0, 32), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), e.ptr, 8, cudaMemcpyDefault), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), pinned, 4, cudaMemcpyHostToHost), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), d.ptr, 32, cudaMemcpyHostToDevice), cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(take_error(), cudaErrorInvalidMemcpyDirection);
  const cuemu::Stats after = cuemu::stats();
  EXPECT_EQ(after.uploads - before.uploads, 2u);
  EXPECT_EQ(after.upload_bytes - before.upload_bytes, 48u);
  EXPECT_EQ(after.downloads - before.downloads, 1u);
  EXPECT_EQ(after.download_bytes - before.download_bytes, 8u);
  EXPECT_EQ(after.memcpys - before.memcpys, 5u);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST_F(Emu, DoubleFreeAndUnknownPointersAreRejected) {
  float* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  EXPECT_EQ(cudaFree(p + 1), cudaErrorInvalidValue);
  EXPECT_NE(cuemu::last_fault().find("not at its start"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(cudaFree(p), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaErrorInvalidValue);
  EXPECT_NE(cuemu::last_fault().find("double free"), std::string::npos) << cuemu::last_fault();
  int on_stack = 0;
  EXPECT_EQ(cudaFree(&on_stack), cudaErrorInvalidValue);
  EXPECT_NE(cuemu::last_fault().find("not a pointer returned by cudaMalloc"), std::string::npos);
  EXPECT_EQ(cudaFree(nullptr), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
}

// Planted: writes one element past the end of x.
constexpr int kWritePastEndLine = __LINE__ + 4;
__global__ void write_past_end(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n)
    x[i] = 0.0f;  // should be i < n
}

#if defined(EMU_TEST_ASAN)
TEST_F(Emu, OutOfBoundsWriteIsCaughtByAsan) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        float* x = nullptr;
        cudaMalloc(&x, 100 * sizeof(float));
        CTX_LAUNCH(write_past_end, 1, 128, 0, 0, x, 100);
      },
      "AddressSanitizer");
}
#else
HOOKED_TEST(Emu, OutOfBoundsWriteIsReportedAtTheAccess) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<float> x(100), other(100);
  CTX_LAUNCH(write_past_end, 1, 128, 0, 0, x.ptr, 100);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress);
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find("out-of-bounds access in kernel write_past_end"), std::string::npos) << m;
  EXPECT_NE(m.find("thread (100,0,0) writes 4 bytes of global memory at"), std::string::npos) << m;
  EXPECT_NE(m.find("test_emu_memory.cpp:" + std::to_string(kWritePastEndLine)), std::string::npos) << m;
  EXPECT_NE(m.find("0 bytes past the end of allocation #"), std::string::npos) << m;
  EXPECT_NE(m.find("(400 bytes at"), std::string::npos) << m;
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
  CTX_LAUNCH(write_past_end, 1, 100, 0, 0, other.ptr, 99);  // in bounds: no report
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cuemu::last_fault();
}
#endif

TEST_F(Emu, StickyFaultPersistsUntilCleared) {
  std::vector<float> host(1);
  CTX_LAUNCH(write_past_end, 1, 1, 0, 0, host.data(), 1);  // a host pointer: sticky
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  float* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 4), cudaErrorIllegalAddress) << "calls fail after a sticky fault, as on hardware";
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaMalloc(&p, 4), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

TEST_F(Emu, StreamsAndEvents) {
  cudaStream_t s;
  cudaEvent_t a, b;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  float ms = -1.0f;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaErrorInvalidResourceHandle) << "not recorded yet";
  DeviceBuffer<float> x(256);
  EXPECT_EQ(cudaEventRecord(a, s), cudaSuccess);
  CTX_LAUNCH(write_past_end, 2, 128, 0, s, x.ptr, 255);
  EXPECT_EQ(cudaEventRecord(b, s), cudaSuccess);
  EXPECT_EQ(cudaEventSynchronize(b), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s, b, 0), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  EXPECT_GE(ms, 0.0f);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(b), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);
  CTX_LAUNCH(write_past_end, 1, 1, 0, s, x.ptr, 0);  // a destroyed stream
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

TEST_F(Emu, DeviceQueriesDescribeOneEmulatedH100LikeDevice) {
  int n = 0, dev = -1;
  EXPECT_EQ(cudaGetDeviceCount(&n), cudaSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaGetDevice(&dev), cudaSuccess);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cudaSetDevice(1), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
  cudaDeviceProp p;
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_NE(std::string(p.name).find("emulated"), std::string::npos);
  EXPECT_EQ(p.warpSize, 32);
  EXPECT_EQ(p.maxThreadsPerBlock, 1024);
  EXPECT_EQ(p.sharedMemPerBlockOptin, 227u * 1024u);
  EXPECT_EQ(p.major, 9);
  int sms = 0;
  EXPECT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(sms, p.multiProcessorCount);
  EXPECT_STREQ(cudaGetErrorName(cudaErrorInvalidConfiguration), "cudaErrorInvalidConfiguration");
  EXPECT_STREQ(cudaGetErrorString(cudaErrorInvalidValue), "invalid argument");
}

TEST_F(Emu, DeviceResetFreesEverything) {
  float* p = nullptr;
  ASSERT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  ASSERT_GE(cuemu::stats().live_allocations, 1u);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cuemu::stats().live_allocations, 0u);
  EXPECT_FALSE(cuemu::is_device_pointer(p));
}

// Planted: a float4 load from an address that is 4-byte but not 16-byte aligned (faults on a GPU).
__global__ void misaligned_float4(const float* x, float* out) {
  const float4 v = *reinterpret_cast<const float4*>(x + 1);
  out[0] = v.x + v.y + v.z + v.w;
}

#if defined(EMU_TEST_ASAN)  // the sanitizer build (CTXLAB_SANITIZE) has UBSan's alignment check too
static void launch_misaligned_float4() {
  float* x = nullptr;
  float* out = nullptr;
  cudaMalloc(&x, 8 * sizeof(float));
  cudaMalloc(&out, sizeof(float));
  CTX_LAUNCH(misaligned_float4, 1, 1, 0, 0, x, out);
}

TEST_F(Emu, MisalignedVectorLoadIsCaughtByUbsan) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(launch_misaligned_float4(), "misaligned address");
}
#endif
