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
