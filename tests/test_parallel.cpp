// tests/test_parallel.cpp — the one fork threshold of the CPU kernels (core/cpu/parallel.h): a
// region forks only past kParallelMinWork and never from inside another region, and the oneDNN
// primitives of work below it are made (and run) for one thread whatever the pool's size.
#include <gtest/gtest.h>

#include <omp.h>

#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/threads.h"
#include "test_util.h"

namespace {
using namespace ctx;
using ctx::cpu::kParallelMinWork;
using ctx::cpu::parallel_pays;
using ctx::cpu::threads_for;

// Runs the body with the pool set to `n` threads, then restores the count.
template <class F>
void with_threads(int n, F&& body) {
  init_threading();
  const int saved = num_threads();
  set_num_threads(n);
  body();
  set_num_threads(saved);
}

TEST(ParallelThreshold, ThreadsForFollowsTheWorkAndNesting) {
  with_threads(2, [] {
    EXPECT_EQ(threads_for(0), 1);
    EXPECT_EQ(threads_for(kParallelMinWork - 1), 1);
    EXPECT_FALSE(parallel_pays(kParallelMinWork - 1));
    EXPECT_EQ(threads_for(kParallelMinWork), 2);
    EXPECT_TRUE(parallel_pays(kParallelMinWork));
    int inside = -1;
#pragma omp parallel num_threads(2)
    {
#pragma omp single
      inside = threads_for(kParallelMinWork * 1000);  // nested: the caller's thread only
    }
    EXPECT_EQ(inside, 1);
  });
  with_threads(1, [] { EXPECT_EQ(threads_for(kParallelMinWork * 1000), 1); });
}

// A tiny f32 GEMM's oneDNN primitive is made for one thread under any pool size: the second pool
// size adds no cache entry for the same shape (a fork per call would cost more than the product).
// A GEMM past the threshold gets one primitive per thread count (GemmThreading in test_gemm.cpp).
TEST(ParallelThreshold, TinyOneDnnGemmIsMadeForOneThread) {
  GemmDesc g;
  g.M = 13, g.N = 11, g.K = 7;  // 1001 multiply-adds; a shape no other test uses
  ASSERT_LT(g.M * g.N * g.K / 16, kParallelMinWork);
  const std::vector<float> A = testing_util::random_vec(g.M * g.K, 3), B = testing_util::random_vec(g.K * g.N, 4);
  std::vector<float> want((size_t)(g.M * g.N)), got(want.size());
  cpu::gemm_reference(g, A.data(), B.data(), want.data());
  size_t entries = 0;
  for (int t : {2, 1, 2}) {
    with_threads(t, [&] {
      const size_t before = cpu::onednn_gemm_cache_size();
      cpu::gemm_onednn(g, A.data(), B.data(), got.data());
      entries += cpu::onednn_gemm_cache_size() - before;
    });
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5f) << t << " threads, element " << i;
  }
  EXPECT_EQ(entries, 1u);
}

}  // namespace
