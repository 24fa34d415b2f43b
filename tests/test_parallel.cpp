// tests/test_parallel.cpp — the one fork threshold of the CPU kernels (core/cpu/parallel.h): a
// region forks only past kParallelMinWork and never from inside another region, and the oneDNN
// primitives of work below it are made (and run) for one thread whatever the pool's size; a
// region that does not fork never enters the OpenMP runtime (CTX_OMP_IF), counted by wrapping
// libgomp's GOMP_parallel below.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <omp.h>

#include <atomic>
#include <cmath>
#include <vector>

#include "core/backend.h"
#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/team.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "test_util.h"

// GCC's `#pragma omp parallel` (and `parallel for` with a static schedule) calls libgomp's
// GOMP_parallel, whether or not the region forks. This definition in the test executable takes the
// calls of the library linked into it, counts them and hands them on to libgomp's.
namespace {
std::atomic<int64_t> g_gomp_parallel{0};
}
extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned num_threads, unsigned flags) {
  using Fn = void (*)(void (*)(void*), void*, unsigned, unsigned);
  static const Fn next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "GOMP_parallel"));
  g_gomp_parallel.fetch_add(1, std::memory_order_relaxed);
  next(fn, data, num_threads, flags);
}
namespace ctx::testing_util {
int64_t gomp_parallel_calls() { return g_gomp_parallel.load(); }
}  // namespace ctx::testing_util

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

// The CPU kernels ask CTX_OMP_IF, not the pragma's `if` clause: a region that does not fork (tiny
// work, or called from inside another region: the decoder's team) runs as plain code, without the
// team of one and the futex wake libgomp spends on an `if (false)` region. Each kernel here is
// counted alone on a tiny input, outside any region and inside a 2-thread team; a kernel past the
// threshold still forks (the counter sees it: the wrapper is live).
TEST(ParallelThreshold, ARegionThatDoesNotForkNeverEntersTheOpenMpRuntime) {
  with_threads(2, [] {
    Backend& be = backend(Device::CPU);
    const Tensor x = Tensor::from_vector(testing_util::random_vec(4 * 32, 1), {4, 32});
    const Tensor a = Tensor::from_vector(testing_util::random_vec(4 * 32, 2), {4, 32});
    const Tensor w = Tensor::from_vector(testing_util::random_vec(32, 3), {32});
    const Tensor q = Tensor::from_vector(testing_util::random_vec(2 * 8 * 16, 4), {1, 2, 8, 16});
    const Tensor big = Tensor::from_vector(testing_util::random_vec(cpu::kParallelMinWork * 2, 5),
                                           {cpu::kParallelMinWork * 2});
    Tensor y = Tensor::empty({4, 32}), mean = Tensor::empty({4}), rstd = Tensor::empty({4});
    Tensor o = Tensor::empty({1, 2, 8, 16}), lse = Tensor::empty({1, 2, 8});
    Tensor ybig = Tensor::empty({cpu::kParallelMinWork * 2});
    AttnDims d;
    d.B = 1, d.H = 2, d.T = 8, d.S = 8, d.Dh = 16, d.scale = 0.25;
    const std::vector<std::pair<const char*, std::function<void()>>> kernels = {
        {"add", [&] { be.binary(BinaryOp::Add, x, a, y); }},
        {"gelu", [&] { be.unary(UnaryOp::GeluTanh, x, y); }},
        {"exp", [&] { be.unary(UnaryOp::Exp, x, y); }},
        {"softmax", [&] { be.softmax(x, y, false); }},
        {"layernorm", [&] { be.layernorm(x, w, w, 1e-5, y, mean, rstd); }},
        {"rmsnorm", [&] { be.rmsnorm(x, w, 1e-5, y, rstd); }},
        {"copy_strided", [&] { be.copy_strided(x, Strided{0, {32, 1}}, y, Strided{0, {1, 4}}, {4, 8}, false); }},
        {"attention", [&] { be.attention_forward(d, q, q, q, Tensor(), o, lse, AttnRel{}); }},
    };
    for (const auto& [name, f] : kernels) {
      int64_t before = testing_util::gomp_parallel_calls();
      f();
      EXPECT_EQ(testing_util::gomp_parallel_calls() - before, 0) << name << ", outside any region";
      before = testing_util::gomp_parallel_calls();
      run_team(2, [&](const Team& t) {
        if (t.rank() == 0) f();  // one thread's call inside the team
      });
      EXPECT_EQ(testing_util::gomp_parallel_calls() - before, 1) << name << ", inside a team (its own region only)";
    }
    // a kernel whose threads own fixed column blocks (the norm's weight gradient: colsum_tree), run
    // by the team's second thread, writes every column (its block index is not the team's rank)
    be.layernorm(x, w, w, 1e-5, y, mean, rstd);
    Tensor dx = Tensor::empty({4, 32}), dw1 = Tensor::zeros({32}), db1 = Tensor::zeros({32});
    Tensor dw2 = Tensor::zeros({32}), db2 = Tensor::zeros({32});
    be.layernorm_backward(a, x, w, mean, rstd, dx, dw1, db1);
    run_team(2, [&](const Team& t) {
      if (t.rank() == 1) be.layernorm_backward(a, x, w, mean, rstd, dx, dw2, db2);
    });
    for (int64_t c = 0; c < 32; ++c) {
      EXPECT_EQ(dw2.data<float>()[c], dw1.data<float>()[c]) << "dw column " << c << " from rank 1 of a team";
      EXPECT_EQ(db2.data<float>()[c], db1.data<float>()[c]) << "db column " << c << " from rank 1 of a team";
    }
    const int64_t before = testing_util::gomp_parallel_calls();
    be.unary(UnaryOp::Exp, big, ybig);  // past the threshold: forks
    EXPECT_EQ(testing_util::gomp_parallel_calls() - before, 1) << "a region that pays forks once";
    for (int64_t i = 0; i < big.numel(); i += 4099)
      EXPECT_FLOAT_EQ(ybig.data<float>()[i], std::exp(big.data<float>()[i]));
  });
}

}  // namespace
