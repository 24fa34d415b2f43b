// tests/emu/emu_test_util.h — helpers of the CUDA emulator's self-tests: a device buffer that
// copies to/from host vectors, and a fixture that resets the emulator's error state and schedule.
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/cuda/compat.h"

template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&ptr, count * sizeof(T)), cudaSuccess);
  }
  DeviceBuffer(const std::vector<T>& h) : DeviceBuffer(h.size()) { upload(h); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const std::vector<T>& h) {
    ASSERT_EQ(h.size(), n);
    ASSERT_EQ(cudaMemcpy(ptr, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// Every test starts with no error, the forward schedule and two OS threads, and ends with no
// pending error unless it cleared the one it planted.
class Emu : public ::testing::Test {
 protected:
  void SetUp() override {
    cuemu::clear_faults();
    cuemu::set_schedule(cuemu::Schedule::Forward);
    cuemu::set_worker_threads(2);
  }
  void TearDown() override {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a test left an error behind: " << cuemu::last_fault();
    cuemu::clear_faults();
    cuemu::set_schedule(cuemu::Schedule::Forward);
  }
  // The error a planted fault left, then a clean state for the rest of the test.
  static cudaError_t take_error() {
    cudaError_t e = cudaGetLastError();
    cuemu::clear_faults();
    return e;
  }
};

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// A test of the emulator's access checks (bounds, static shared memory, the race detector). Where
// the build has the access hooks (CTXLAB_EMU_HOOKED, set by CMakeLists.txt) it is a TEST_F whose
// REQUIRE_ACCESS_HOOKS() fails if the hooks are nonetheless off. Without them (sanitizer builds,
// where ASan checks the bounds instead; -DCTXLAB_EMU_ACCESS_HOOKS=OFF) the body is compiled but
// not registered: nothing runs, and nothing is reported as a skip.
#if defined(CTXLAB_EMU_HOOKED)
#define HOOKED_TEST(fixture, name) TEST_F(fixture, name)
#define REQUIRE_ACCESS_HOOKS() \
  ASSERT_TRUE(cuemu::access_checks()) << "built with the access hooks (CTXLAB_EMU_ACCESS_HOOKS), yet they are off"
#else
#define HOOKED_TEST(fixture, name)                                      \
  struct fixture##_##name##_WithoutHooks : fixture {                    \
    [[maybe_unused]] void TestBody() override;                          \
  };                                                                    \
  void fixture##_##name##_WithoutHooks::TestBody()
#define REQUIRE_ACCESS_HOOKS() (void)0
#endif
