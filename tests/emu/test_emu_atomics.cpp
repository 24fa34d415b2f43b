// tests/emu/test_emu_atomics.cpp — atomics under the emulator, with blocks on two OS threads:
// add (int, unsigned, unsigned long long, float, double), max/min, CAS, exchange, and atomicInc's
// wrap rule (old >= val ? 0 : old + 1).
#include <algorithm>

#include "tests/emu/emu_test_util.h"

__global__ void add_all(int* i, unsigned* u, unsigned long long* ull, float* f, double* d) {
  atomicAdd(i, 1);
  atomicAdd(u, 2u);
  atomicAdd(ull, 3ull);
  atomicAdd(f, 1.0f);  // integers below 2^24: exact in any order
  atomicAdd(d, 0.5);
}

TEST_F(Emu, AtomicAddIsExactAcrossBlocksOnSeveralOsThreads) {
  const int blocks = 64, threads = 128, n = blocks * threads;
  DeviceBuffer<int> i(std::vector<int>{0});
  DeviceBuffer<unsigned> u(std::vector<unsigned>{0});
  DeviceBuffer<unsigned long long> ull(std::vector<unsigned long long>{0});
  DeviceBuffer<float> f(std::vector<float>{0.0f});
  DeviceBuffer<double> d(std::vector<double>{0.0});
  CTX_LAUNCH(add_all, blocks, threads, 0, 0, i.ptr, u.ptr, ull.ptr, f.ptr, d.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(i.download()[0], n);
  EXPECT_EQ(u.download()[0], 2u * n);
  EXPECT_EQ(ull.download()[0], 3ull * n);
  EXPECT_EQ(f.download()[0], (float)n);
  EXPECT_EQ(d.download()[0], 0.5 * n);
}

__global__ void max_min_cas_exch(int* mx, int* mn, int* cas_counter, int* exch, int* exch_old) {
  const int id = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = (id * 37) % 1001 - 500;
  atomicMax(mx, v);
  atomicMin(mn, v);
  int old = *cas_counter, seen;
  while ((seen = atomicCAS(cas_counter, old, old + 1)) != old) old = seen;
  exch_old[id] = atomicExch(exch, id);
}

TEST_F(Emu, MaxMinCasAndExchange) {
  const int blocks = 8, threads = 64, n = blocks * threads;
  DeviceBuffer<int> mx(std::vector<int>{-100000}), mn(std::vector<int>{100000}), cnt(std::vector<int>{0});
  DeviceBuffer<int> exch(std::vector<int>{-1}), olds(n);
  CTX_LAUNCH(max_min_cas_exch, blocks, threads, 0, 0, mx.ptr, mn.ptr, cnt.ptr, exch.ptr, olds.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  int want_max = -100000, want_min = 100000;
  for (int id = 0; id < n; ++id) {
    want_max = std::max(want_max, (id * 37) % 1001 - 500);
    want_min = std::min(want_min, (id * 37) % 1001 - 500);
  }
  EXPECT_EQ(mx.download()[0], want_max);
  EXPECT_EQ(mn.download()[0], want_min);
  EXPECT_EQ(cnt.download()[0], n);
  // Exchange: the old values plus the final value are -1 and every id, each once.
  std::vector<int> all = olds.download();
  all.push_back(exch.download()[0]);
  std::sort(all.begin(), all.end());
  for (int k = 0; k <= n; ++k) EXPECT_EQ(all[k], k - 1);
}

__global__ void inc_wraps(unsigned* counter, unsigned* olds, unsigned val) {
  olds[threadIdx.x] = atomicInc(counter, val);
}

TEST_F(Emu, AtomicIncWrapsAsCudaSpecifies) {
  DeviceBuffer<unsigned> counter(std::vector<unsigned>{0}), olds(95);
  CTX_LAUNCH(inc_wraps, 1, 95, 0, 0, counter.ptr, olds.ptr, 9u);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_EQ(counter.download()[0], 95u % 10u);  // cycles 0..9
  std::vector<unsigned> h = olds.download();
  for (int k = 0; k < 95; ++k) EXPECT_EQ(h[k], (unsigned)k % 10u) << k;  // forward schedule: in order
  // Starting above val wraps to 0 at once.
  DeviceBuffer<unsigned> high(std::vector<unsigned>{50}), one(1);
  CTX_LAUNCH(inc_wraps, 1, 1, 0, 0, high.ptr, one.ptr, 9u);
  EXPECT_EQ(high.download()[0], 0u);
  EXPECT_EQ(one.download()[0], 50u);
}
