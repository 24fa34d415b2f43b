// tests/test_tensor.cpp — Tensor views, dtypes, the buffer pool and the RNG.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "core/allocator.h"
#include "core/backend.h"
#include "core/rng.h"
#include "core/settings.h"
#include "core/tensor.h"
#include "tests/test_util.h"

using namespace ctx;

TEST(Tensor, ShapeDtypeAndViews) {
  Tensor t = Tensor::zeros({2, 3, 4}, DType::F32);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.dim(), 3);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_EQ(t.str(), "f32[2, 3, 4]");
  for (int64_t i = 0; i < 24; ++i) t.set(i, (double)i);
  Tensor v = t.view({6, -1});
  EXPECT_EQ(v.shape(), (Shape{6, 4}));
  EXPECT_EQ(v.storage(), t.storage());  // free reshape
  Tensor s = t.slice0(1, 2);
  EXPECT_EQ(s.storage(), t.storage());  // free leading-dim slice
  EXPECT_EQ(s.offset(), 12);
  EXPECT_EQ(s.at(0), 12.0);
  Tensor r = t.select0(1).select0(2);
  EXPECT_EQ(r.shape(), (Shape{4}));
  EXPECT_EQ(r.at(1), 21.0);
  s.set(0, -5);  // views share storage
  EXPECT_EQ(t.at(12), -5.0);
}

TEST(Tensor, BadViewsThrow) {
  Tensor t = Tensor::zeros({2, 3});
  EXPECT_THROW(t.view({4, 2}), Error);
  EXPECT_THROW(t.view({-1, -1}), Error);
  EXPECT_THROW(t.slice0(1, 3), Error);
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_THROW(t.at(6), Error);
  EXPECT_THROW(Tensor::empty({2, -1}), Error);
  try {
    t.view({5});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 3]"), std::string::npos) << e.what();
  }
}

// Storage::checked_bound: set on integer tensors only, shared by the views of one storage, dropped
// by the first mutable access (as the host mirror is), so a later write cannot keep the promise.
TEST(Tensor, CheckedBoundIsAnIntegerStoragesPromiseUntilItsNextWrite) {
  Tensor t = Tensor::from_vector(std::vector<int32_t>{3, 0, 4, 1}, {2, 2});
  EXPECT_EQ(t.checked_bound(), -1);
  EXPECT_EQ(Tensor().checked_bound(), -1);
  t.set_checked_bound(5);
  const Tensor& ct = t;
  EXPECT_EQ(ct.raw(), t.storage()->data);  // a read keeps it
  EXPECT_EQ(t.checked_bound(), 5);
  EXPECT_EQ(t.select0(1).checked_bound(), 5);  // the storage's: every view carries it
  EXPECT_EQ(t.view({4}).checked_bound(), 5);
  EXPECT_EQ(t.clone().checked_bound(), -1);    // a copy is not checked
  t.select0(1).data<int32_t>()[0] = 9;         // a mutable access through any view drops it
  EXPECT_EQ(t.checked_bound(), -1);
  t.set_checked_bound(10);
  t.set_checked_bound(-1);  // dropped explicitly
  EXPECT_EQ(t.checked_bound(), -1);
  using testing_util::expect_error;
  expect_error([] { Tensor::zeros({3}, DType::F32).set_checked_bound(4); },
               {"set_checked_bound: f32[3] is not an integer tensor"});
  expect_error([&] { t.set_checked_bound(-2); }, {"set_checked_bound: bound -2 for i32[2, 2] must be >= 0"});
  expect_error([] { Tensor().set_checked_bound(1); }, {"set_checked_bound: undefined tensor"});
}

TEST(Tensor, AllDtypesConvert) {
  Tensor a = Tensor::from_vector<int64_t>({1, -2, 3}, {3});
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    Tensor b = a.to(dt);
    EXPECT_EQ(b.dtype(), dt);
    EXPECT_EQ(b.at(1), -2.0);
    EXPECT_EQ(b.nbytes(), 3 * dtype_size(dt));
  }
}

#ifndef CTXLAB_WITH_CUDA  // a build without the backend only (nothing to skip in a CUDA build)
TEST(Tensor, CudaWithoutBackendIsAClearError) {
  try {
    Tensor::empty({2}, DType::F32, Device::CUDA);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos);
  }
}
#endif

TEST(BufferPool, ReusesBlocksAfterWarmup) {
  auto& pool = BufferPool::host();
  // A "step": allocate the same set of intermediates twice.
  auto step = [] {
    std::vector<Tensor> ts;
    for (int64_t n : {1000, 4096, 77777, 1000, 123})
      ts.push_back(Tensor::empty({n}, DType::F32));
  };
  step();
  auto before = pool.stats();
  for (int i = 0; i < 5; ++i) step();
  auto after = pool.stats();
  EXPECT_EQ(after.system_allocs, before.system_allocs) << "a warm step must not reach malloc";
  EXPECT_GT(after.requests, before.requests);
  EXPECT_EQ(BufferPool::size_class(100), 256u);
  EXPECT_GE(BufferPool::size_class(1000), 1000u);
  EXPECT_LE(BufferPool::size_class(1000), 1250u);
}

TEST(Rng, DeterministicAndKnownValues) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(Rng(42).next_u64(), c.next_u64());
  // Pinned values: any change of the generator breaks reproducibility of every run.
  Rng r(0);
  EXPECT_EQ(r.next_u64(), 11091344671253066420ULL);
  Rng n(7);
  double s = 0, s2 = 0;
  const int N = 200000;
  for (int i = 0; i < N; ++i) {
    double x = n.normal();
    s += x;
    s2 += x * x;
  }
  EXPECT_NEAR(s / N, 0.0, 0.01);
  EXPECT_NEAR(s2 / N, 1.0, 0.01);
  Rng u(9);
  for (int i = 0; i < 1000; ++i) {
    double x = u.uniform(-2, 3);
    EXPECT_GE(x, -2.0);
    EXPECT_LT(x, 3.0);
  }
  // state save / restore continues the same stream
  Rng p(5);
  p.normal();
  auto st = p.state();
  double x1 = p.normal(), x2 = p.normal();
  p.set_state(st);
  EXPECT_EQ(p.normal(), x1);
  EXPECT_EQ(p.normal(), x2);
}

// below(n) draws every value of [0, n) and nothing else, equally often: 70000 draws for n = 7,
// each count within 5 standard deviations (sqrt(70000 (1/7)(6/7)) = 92.6) of 10000; and n = 1
// (and 0) give 0 without drawing.
TEST(Rng, BelowCoversItsRangeUniformly) {
  Rng r(11);
  std::vector<int64_t> count(8, 0);
  for (int i = 0; i < 70000; ++i) {
    const uint64_t v = r.below(7);
    ASSERT_LT(v, 7u);
    ++count[(size_t)v];
  }
  for (int v = 0; v < 7; ++v) EXPECT_NEAR((double)count[(size_t)v], 10000.0, 5 * 92.6) << "value " << v;
  Rng before = r;
  EXPECT_EQ(r.below(1), 0u);
  EXPECT_EQ(r.below(0), 0u);
  EXPECT_EQ(r.next_u64(), before.next_u64());  // below(1) and below(0) drew nothing
}

// reduce_sum (the backward of every broadcast) against a naive sum, for reduce / keep patterns
// of ranks 1-5 with sizes that take the serial and the threaded walk, f32 and f64; the threaded
// result is the same bit for bit on a second call.
TEST(ReduceSum, EveryPatternMatchesNaiveSum) {
  Rng rng(21);
  const std::vector<Shape> shapes = {{7},          {5, 3},        {4, 3, 5},      {2, 3, 4, 5},
                                     {8, 8, 64, 32}, {3, 1, 70, 9}, {2, 3, 1, 4, 5}, {300, 300},
                                     {3, 40000}};  // few rows, a long kept run: split by columns
  for (const Shape& xs : shapes) {
    const int64_t nd = (int64_t)xs.size();
    for (int64_t mask = 0; mask < (int64_t(1) << nd); ++mask) {  // bit d set: dim d reduced
      Shape os = xs;
      for (int64_t d = 0; d < nd; ++d)
        if (mask >> d & 1) os[d] = 1;
      for (DType dt : {DType::F64, DType::F32}) {
        SCOPED_TRACE(shape_str(xs) + " -> " + shape_str(os) + (dt == DType::F32 ? " f32" : " f64"));
        Tensor x = Tensor::empty(xs, DType::F64);
        rng.fill_uniform(x, -1.0, 1.0);
        if (dt == DType::F32) x = x.to(DType::F32);
        Tensor out = Tensor::empty(os, dt), again = Tensor::empty(os, dt);
        backend_of(x).reduce_sum(x, out);
        backend_of(x).reduce_sum(x, again);
        std::vector<double> want((size_t)out.numel(), 0.0);
        Shape cs = contiguous_strides(os);
        for (int64_t i = 0; i < x.numel(); ++i) {
          int64_t rem = i, po = 0;
          for (int64_t d = nd - 1; d >= 0; --d) {
            const int64_t id = rem % xs[(size_t)d];
            rem /= xs[(size_t)d];
            if (os[(size_t)d] != 1) po += id * cs[(size_t)d];
          }
          want[(size_t)po] += x.at(i);
        }
        const double terms = (double)(x.numel() / out.numel() + 1);  // rounding grows with the count
        const double tol = (dt == DType::F32 ? 1e-6 : 1e-14) * terms;
        for (int64_t i = 0; i < out.numel(); ++i) {
          ASSERT_NEAR(out.at(i), want[(size_t)i], tol) << "element " << i;
          ASSERT_EQ(out.at(i), again.at(i)) << "element " << i << " differs between two calls";
        }
      }
    }
  }
}

// Host blocks of 2 MiB and more are 2 MiB-aligned and advised as transparent huge pages
// (core/allocator.h): where the kernel's THP mode lets a range ask (madvise or always), the block's
// mapping is eligible (/proc/self/smaps' THPeligible); smaller blocks are not asked.
TEST(BufferPool, BlocksOfTwoMiBAndMoreAskForHugePages) {
  const char* env = setting_env("CTXLAB_HUGE_PAGES");
  const bool on = !env || std::string(env) == "1";
  EXPECT_EQ(BufferPool::huge(BufferPool::kHugePage), on);
  EXPECT_EQ(BufferPool::huge(8 * BufferPool::kHugePage), on);
  EXPECT_FALSE(BufferPool::huge(BufferPool::kHugePage - 1));
  Tensor big = Tensor::empty({3 << 20}, DType::F32);  // 12 MiB
  const auto addr = reinterpret_cast<uintptr_t>(big.data<float>());
  if (!on) return;
  EXPECT_EQ(addr % BufferPool::kHugePage, 0u);
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string m((std::istreambuf_iterator<char>(mode)), std::istreambuf_iterator<char>());
  if (m.find("[never]") != std::string::npos || m.empty()) {
    std::printf("# THP is off on this machine (%s): the 2 MiB alignment alone is checked\n", m.c_str());
    return;
  }
  // the smaps entry of the mapping that holds the block: THPeligible: 1
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  int eligible = -1;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's header line
      inside = addr >= lo && addr < hi;
      continue;
    }
    if (inside && line.rfind("THPeligible:", 0) == 0) eligible = std::atoi(line.c_str() + 12);
  }
  EXPECT_EQ(eligible, 1) << "the block's mapping is not eligible for huge pages (THP mode: " << m << ")";
}
