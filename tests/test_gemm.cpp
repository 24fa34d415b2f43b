// tests/test_gemm.cpp — the fast CPU GEMMs (oneDNN, OpenBLAS) against gemm_reference<float>:
// every transpose pair, odd sizes, alpha/beta, batches with broadcast operands, calls from
// inside a parallel region; the primitive cache; implementation names; the Backend::gemm path.
#include <gtest/gtest.h>

#include <algorithm>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <omp.h>

#include "core/backend.h"
#include "core/bf16.h"
#include "core/cpu/gemm.h"
#include "core/threads.h"
#include "core/determinism.h"
#include "core/error.h"
#include "core/precision.h"
#include "test_util.h"

namespace ctx::cpu {
namespace {

using GemmFn = void (*)(const GemmDesc&, const float*, const float*, float*);

GemmFn gemm_fn(GemmImpl impl) {
  return impl == GemmImpl::OneDNN ? gemm_onednn : gemm_openblas;
}

using testing_util::random_vec;

// One case: the element counts the operands need, given strides (0 = broadcast).
struct Case {
  GemmDesc g;
  int64_t a_elems() const { return g.stride_a * (g.batch - 1) + g.M * g.K; }
  int64_t b_elems() const { return g.stride_b * (g.batch - 1) + g.K * g.N; }
  int64_t c_elems() const { return g.stride_c * (g.batch - 1) + g.M * g.N; }
};

Case make_case(int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha, float beta,
               int64_t batch = 1, bool bcast_a = false, bool bcast_b = false) {
  Case c;
  c.g.M = M, c.g.N = N, c.g.K = K, c.g.trans_a = ta, c.g.trans_b = tb;
  c.g.alpha = alpha, c.g.beta = beta, c.g.batch = batch;
  c.g.stride_a = bcast_a ? 0 : M * K;
  c.g.stride_b = bcast_b ? 0 : K * N;
  c.g.stride_c = M * N;
  return c;
}

// Runs `fn` and the reference on the same inputs and checks every element against an error
// bound derived from K and float eps: each result is a K-term dot product in f32, so
// |c - exact| <= (K + 2) eps (|alpha| sum_k |a||b| + |beta| |c0|) for both; their difference
// is at most twice that. beta == 0 cases start C as NaN: it must not be read.
void check_case(GemmFn fn, const Case& c, uint32_t seed) {
  const GemmDesc& g = c.g;
  const std::vector<float> A = random_vec(c.a_elems(), seed), B = random_vec(c.b_elems(), seed + 1);
  std::vector<float> C0 = random_vec(c.c_elems(), seed + 2);
  std::vector<float> Cref = C0;
  gemm_reference<float>(g, A.data(), B.data(), Cref.data());
  if (g.beta == 0.f) C0.assign(C0.size(), std::numeric_limits<float>::quiet_NaN());
  std::vector<float> C = C0;
  fn(g, A.data(), B.data(), C.data());

  // |A| |B| in double gives the magnitude of each dot product.
  std::vector<double> Aabs(A.size()), Babs(B.size()), mag(C.size(), 0.0);
  for (size_t i = 0; i < A.size(); ++i) Aabs[i] = std::fabs(A[i]);
  for (size_t i = 0; i < B.size(); ++i) Babs[i] = std::fabs(B[i]);
  GemmDesc gm = g;
  gm.alpha = 1.f, gm.beta = 0.f;
  gemm_reference<double>(gm, Aabs.data(), Babs.data(), mag.data());

  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.M * g.N; ++i) {
      const size_t at = (size_t)(b * g.stride_c + i);
      const double c0 = g.beta == 0.f ? 0.0 : std::fabs(C0[at]);
      const double tol =
          2.0 * (g.K + 2) * eps * (std::fabs(g.alpha) * mag[at] + std::fabs(g.beta) * c0) + 1e-30;
      ASSERT_NEAR(C[at], Cref[at], tol)
          << "M=" << g.M << " N=" << g.N << " K=" << g.K << " trans_a=" << g.trans_a
          << " trans_b=" << g.trans_b << " alpha=" << g.alpha << " beta=" << g.beta
          << " batch=" << g.batch << " stride_a=" << g.stride_a << " stride_b=" << g.stride_b
          << " item " << b << " element " << i;
    }
}

class GemmImplTest : public ::testing::TestWithParam<GemmImpl> {
 protected:
  void SetUp() override {
    init_threading();
    if (GetParam() == GemmImpl::OpenBLAS) CTX_REQUIRE_DEP("openblas", openblas_available(), openblas_config());
  }
  GemmFn fn() const { return gemm_fn(GetParam()); }
};

TEST_P(GemmImplTest, TransposesOddSizesAlphaBeta) {
  const int64_t sizes[][3] = {{1, 1, 1}, {3, 17, 65}, {65, 3, 17}, {17, 65, 3},
                              {1, 65, 17}, {33, 1, 129}, {64, 48, 32}, {130, 67, 1}};
  uint32_t seed = 1;
  for (const auto& s : sizes)
    for (int t = 0; t < 4; ++t)
      for (float alpha : {1.f, -0.7f})
        for (float beta : {0.f, 1.f, 0.5f})
          check_case(fn(), make_case(s[0], s[1], s[2], t & 1, t & 2, alpha, beta), seed++);
}

TEST_P(GemmImplTest, LargeEnoughToSplitOverThreads) {
  // Shapes that take the multi-threaded partitions (rows, columns, batch).
  for (int t = 0; t < 4; ++t) {
    check_case(fn(), make_case(257, 96, 128, t & 1, t & 2, 1.f, 0.f), 100 + t);
    check_case(fn(), make_case(20, 301, 200, t & 1, t & 2, 1.f, 1.f), 200 + t);
    check_case(fn(), make_case(70, 33, 64, t & 1, t & 2, 0.5f, 0.5f, 5), 300 + t);
    // one row (a decode step's GEMV), wide enough for the column split over threads
    check_case(fn(), make_case(1, 1031, 1100, t & 1, t & 2, 0.5f, 0.5f), 400 + t);
  }
}

TEST_P(GemmImplTest, BatchedWithBroadcast) {
  uint32_t seed = 1000;
  for (int t = 0; t < 4; ++t)
    for (float beta : {0.f, 1.f, 0.5f}) {
      check_case(fn(), make_case(17, 9, 33, t & 1, t & 2, 1.f, beta, 4), seed++);
      check_case(fn(), make_case(17, 9, 33, t & 1, t & 2, 0.25f, beta, 3, false, true), seed++);
      check_case(fn(), make_case(5, 65, 3, t & 1, t & 2, 1.f, beta, 3, true, false), seed++);
      check_case(fn(), make_case(5, 6, 7, t & 1, t & 2, 1.f, beta, 3, true, true), seed++);
    }
}

TEST_P(GemmImplTest, EmptyAndZeroK) {
  Case c = make_case(4, 5, 0, false, false, 1.f, 0.5f, 2);
  std::vector<float> C(40, 2.f);
  fn()(c.g, nullptr, nullptr, C.data());
  for (float v : C) EXPECT_EQ(v, 1.f);
  c.g.beta = 0.f;
  fn()(c.g, nullptr, nullptr, C.data());
  for (float v : C) EXPECT_EQ(v, 0.f);
  c = make_case(0, 5, 3, false, false, 1.f, 0.f);
  fn()(c.g, nullptr, nullptr, nullptr);  // nothing to do, nothing touched
}

TEST_P(GemmImplTest, CalledFromInsideAParallelRegion) {
  // Per-head attention GEMMs may be issued from our own OpenMP loops: each call must then run
  // correctly on its own thread.
  const Case c = make_case(48, 40, 32, false, true, 0.125f, 0.f);
  const std::vector<float> A = random_vec(c.a_elems() * 8, 7), B = random_vec(c.b_elems() * 8, 8);
  std::vector<float> C((size_t)c.c_elems() * 8), Cref = C;
  for (int h = 0; h < 8; ++h)
    gemm_reference<float>(c.g, A.data() + h * c.a_elems(), B.data() + h * c.b_elems(),
                          Cref.data() + h * c.c_elems());
  const GemmFn f = fn();
  // Repeated: a primitive whose scratchpad is shared by the threads gave wrong values in ~1 of
  // 20 single passes (oneDNN on AVX-512, before user-managed scratchpads: onednn_util.h).
  for (int rep = 0; rep < 40; ++rep) {
    std::fill(C.begin(), C.end(), 0.f);
#pragma omp parallel for num_threads(2)
    for (int h = 0; h < 8; ++h)
      f(c.g, A.data() + h * c.a_elems(), B.data() + h * c.b_elems(), C.data() + h * c.c_elems());
    for (size_t i = 0; i < C.size(); ++i) ASSERT_NEAR(C[i], Cref[i], 1e-4) << "pass " << rep << ", element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Gemm, GemmImplTest,
                         ::testing::Values(GemmImpl::OneDNN, GemmImpl::OpenBLAS),
                         [](const auto& info) { return std::string(gemm_impl_name(info.param)); });

TEST(GemmOneDNN, PrimitiveCacheDoesNotGrowForASeenShape) {
  const Case c = make_case(23, 29, 31, true, false, 0.5f, 1.f);
  const std::vector<float> A = random_vec(c.a_elems(), 1), B = random_vec(c.b_elems(), 2);
  std::vector<float> C = random_vec(c.c_elems(), 3);
  const size_t before = onednn_gemm_cache_size();
  gemm_onednn(c.g, A.data(), B.data(), C.data());
  const size_t after_first = onednn_gemm_cache_size();
  EXPECT_EQ(after_first, before + 1);
  for (int i = 0; i < 3; ++i) gemm_onednn(c.g, A.data(), B.data(), C.data());
  EXPECT_EQ(onednn_gemm_cache_size(), after_first);
  GemmDesc other = c.g;
  other.beta = 0.f;  // a different post-op: a different primitive
  gemm_onednn(other, A.data(), B.data(), C.data());
  EXPECT_EQ(onednn_gemm_cache_size(), after_first + 1);
}

TEST(GemmSelect, NamesRoundTripAndUnknownNamesThrow) {
  for (GemmImpl g : {GemmImpl::Reference, GemmImpl::OneDNN, GemmImpl::OpenBLAS})
    EXPECT_EQ(gemm_impl_from_string(gemm_impl_name(g)), g);
  EXPECT_EQ(gemm_impl_from_string("OneDNN"), GemmImpl::OneDNN);
  try {
    gemm_impl_from_string("mkl");
    FAIL() << "no error for an unknown name";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'mkl'"), std::string::npos) << msg;
    for (const char* name : {"reference", "onednn", "openblas"})
      EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

TEST(GemmSelect, SetOverridesTheDefaultForEveryShape) {
  GemmDesc nn = make_case(2048, 256, 768, false, false, 1.f, 0.f).g;
  GemmDesc dw = make_case(768, 256, 2048, true, false, 1.f, 0.f).g;  // dY^T X
  set_gemm_impl(GemmImpl::Reference);
  EXPECT_EQ(current_gemm_impl(), GemmImpl::Reference);
  EXPECT_EQ(current_gemm_impl(nn), GemmImpl::Reference);
  EXPECT_EQ(current_gemm_impl(dw), GemmImpl::Reference);
  reset_gemm_impl();
  EXPECT_EQ(current_gemm_impl(), default_gemm_impl());
}

TEST(GemmSelect, BuiltInChoiceIsPerShape) {
  CTX_REQUIRE_DEP("openblas", openblas_available(), openblas_config());
  reset_gemm_impl();
  const GemmDesc nn = make_case(2048, 256, 768, false, false, 1.f, 0.f).g;
  const GemmDesc attn = make_case(256, 32, 256, true, false, 1.f, 0.f, 64).g;  // short K
  const GemmDesc dw = make_case(768, 256, 2048, true, false, 1.f, 0.f).g;     // weight gradient
  const GemmDesc gemv = make_case(1, 768, 256, false, true, 1.f, 0.f).g;      // decode step, M = 1
  if (const char* e = std::getenv("CTXLAB_GEMM"); e && *e) {
    // The environment names one implementation: it is the choice for every shape.
    const GemmImpl want = gemm_impl_from_string(e);
    std::printf("CTXLAB_GEMM=%s: checking that it overrides the per-shape choice\n", e);
    for (const GemmDesc& g : {nn, attn, dw, gemv}) EXPECT_EQ(current_gemm_impl(g), want);
    EXPECT_EQ(default_gemm_impl(), want);
    return;
  }
  EXPECT_EQ(default_gemm_impl(), GemmImpl::OneDNN);
  EXPECT_EQ(current_gemm_impl(nn), GemmImpl::OneDNN);
  EXPECT_EQ(current_gemm_impl(attn), GemmImpl::OneDNN);
  EXPECT_EQ(current_gemm_impl(gemv), GemmImpl::OpenBLAS);  // sgemv (gemm_select.cpp)
  EXPECT_NE(openblas_api().sgemv, nullptr) << "the M = 1 path needs cblas_sgemv";
  const bool avx2_only = !__builtin_cpu_supports("avx512f");
  EXPECT_EQ(current_gemm_impl(dw), avx2_only ? GemmImpl::OpenBLAS
                                                                      : GemmImpl::OneDNN);
}

TEST(GemmOpenBLAS, ConfigSaysWhatWasChosen) {
  const std::string cfg = openblas_config();
  if (!openblas_available()) {
    // What a machine without the library sees: the reason, and a clear error from a call.
    EXPECT_NE(cfg.find("unavailable"), std::string::npos) << cfg;
    GemmDesc g;
    g.M = g.N = g.K = 1;
    float a = 1, b = 1, c = 0;
    EXPECT_THROW(gemm_openblas(g, &a, &b, &c), Error);
  }
  CTX_REQUIRE_DEP("openblas", openblas_available(), cfg);
  EXPECT_NE(cfg.find("core type asked"), std::string::npos) << cfg;
  EXPECT_EQ(openblas_api().get_num_threads ? openblas_api().get_num_threads() : 1, 1);
}

TEST(GemmThreading, SetNumThreadsDrivesTheOpenMPPoolAndCachesPerThreadCount) {
  init_threading();
  CTX_REQUIRE_DEP("openblas", openblas_available(), openblas_config());
  const int n = num_threads();
  EXPECT_GE(n, 1);
  EXPECT_THROW(set_num_threads(0), Error);
  // A primitive made for one thread count is not reused for another: each new thread count adds
  // one cache entry for the same shape, a count seen before adds none; results stay right.
  // a shape no other test uses, past the fork threshold (2.0M multiply-adds; core/cpu/parallel.h)
  const Case c = make_case(191, 177, 59, false, false, 1.f, 0.f);
  std::vector<int> seen;
  for (int t : {1, 2, 3, 2, 1}) {
    set_num_threads(t);
    EXPECT_EQ(num_threads(), t);
    EXPECT_EQ(omp_get_max_threads(), t);
    const size_t before = onednn_gemm_cache_size();
    check_case(gemm_onednn, c, 500 + t);
    const bool fresh = std::find(seen.begin(), seen.end(), t) == seen.end();
    EXPECT_EQ(onednn_gemm_cache_size() - before, fresh ? 1u : 0u) << t << " threads, " << (fresh ? "new" : "seen before");
    seen.push_back(t);
    check_case(gemm_openblas, c, 600 + t);
  }
  set_num_threads(n);
}

TEST(GemmBackend, EveryImplThroughBackendGemmMatchesTheReference) {
  // C[b] = A[b] B^T with A [2, 33, 20], B [18, 20] broadcast, through Tensors.
  Tensor A = Tensor::from_vector(random_vec(2 * 33 * 20, 11), {2, 33, 20});
  Tensor B = Tensor::from_vector(random_vec(18 * 20, 12), {18, 20});
  GemmDesc g;
  g.M = 33, g.N = 18, g.K = 20, g.batch = 2, g.trans_b = true;
  g.stride_a = 33 * 20, g.stride_b = 0, g.stride_c = 33 * 18;
  CTX_REQUIRE_DEP("openblas", openblas_available(), openblas_config());
  std::vector<float> want;
  for (GemmImpl impl : {GemmImpl::Reference, GemmImpl::OneDNN, GemmImpl::OpenBLAS}) {
    set_gemm_impl(impl);
    Tensor C = Tensor::empty({2, 33, 18});
    backend(Device::CPU).gemm(g, A, B, C);
    const std::vector<float> got = C.to_vector<float>();
    if (want.empty()) want = got;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5) << gemm_impl_name(impl) << " element " << i;
  }
  reset_gemm_impl();
}

}  // namespace
}  // namespace ctx::cpu

namespace ctx::cpu {
namespace {
// --deterministic's promise (docs/distributed.md): inside a canonical piece every sum is
// independent of the thread count, so 1 thread and 2 threads train bit for bit the same model.
// The GEMMs of a tiny/small piece (1024 rows): forward, dx, and the weight gradient dY^T X (long K),
// plus a batched one, through Backend::gemm's built-in choice under deterministic_algorithms()
// (OpenBLAS, in blocks fixed by the shape: gemm_select.cpp, gemm_openblas.cpp), and the Linear
// forward (bias inside the GEMM), for 1, 2 and 3 threads; in fp32 and with bf16 inputs (the
// bf16 GEMMs then take their widened operands through the same blocks: gemm_onednn.cpp). Without
// the switch neither library holds this here (OpenBLAS's thread-count split on Haswell kernels,
// oneDNN's matmul at 3 threads), so the switch is what the test holds.
std::vector<float> expect_same_bits_for_1_2_3_threads(const std::string& what,
                                                      const std::function<std::vector<float>()>& run) {
  const int n = num_threads();
  std::vector<float> want;
  for (int t : {1, 2, 3}) {
    set_num_threads(t);
    const std::vector<float> got = run();
    if (want.empty()) {
      want = got;
      continue;
    }
    int64_t differ = 0;
    for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0) << what << ": 1 thread vs " << t << " threads";
  }
  set_num_threads(n);
  return want;
}

// What the deterministic path must compute, bit for bit: OpenBLAS's shape-fixed blocks on the
// operands as given (fp32) or rounded to bf16 and widened (bf16). Equality shows the path taken.
std::vector<float> openblas_blocks(const GemmDesc& g, std::vector<float> A, std::vector<float> B, bool bf16,
                                   std::vector<float> C) {
  if (bf16) {
    for (float& v : A) v = bf16_round(v);
    for (float& v : B) v = bf16_round(v);
  }
  gemm_openblas(g, A.data(), B.data(), C.data());
  return C;
}
int64_t count_differ(const std::vector<float>& a, const std::vector<float>& b) {
  int64_t d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += a[i] != b[i];
  return d;
}

class GemmThreading : public ::testing::TestWithParam<Precision> {};

TEST_P(GemmThreading, BitsDoNotDependOnTheThreadCount) {
  init_threading();
  CTX_REQUIRE_DEP("openblas", openblas_available(), openblas_config());
  struct S { int64_t M, N, K; bool ta, tb; int64_t batch; };
  const S shapes[] = {{1024, 192, 64, false, true, 1}, {1024, 64, 192, false, false, 1},
                      {192, 64, 1024, true, false, 1}, {1024, 256, 64, false, true, 1},
                      {64, 256, 1024, true, false, 1}, {256, 64, 1024, true, false, 1},
                      {1024, 768, 256, false, true, 1}, {768, 256, 1024, true, false, 1},
                      {1024, 256, 768, false, false, 1}, {256, 128, 512, true, false, 3}};
  DeterministicScope scope(true);
  PrecisionScope precision(GetParam());
  const bool bf16 = GetParam() == Precision::BF16;
  reset_gemm_impl();
  for (const S& s : shapes) {
    GemmDesc g;
    g.M = s.M, g.N = s.N, g.K = s.K, g.trans_a = s.ta, g.trans_b = s.tb, g.batch = s.batch;
    g.stride_a = s.M * s.K, g.stride_b = s.K * s.N, g.stride_c = s.M * s.N;
    ASSERT_EQ(current_gemm_impl(g), GemmImpl::OpenBLAS) << "deterministic_algorithms() must choose OpenBLAS";
    Tensor A = Tensor::from_vector(random_vec(s.batch * s.M * s.K, 1), {s.batch * s.M * s.K});
    Tensor B = Tensor::from_vector(random_vec(s.batch * s.K * s.N, 2), {s.batch * s.K * s.N});
    const std::string what = str("M=", s.M, " N=", s.N, " K=", s.K, " ta=", s.ta, " tb=", s.tb, " batch=", s.batch);
    const std::vector<float> got = expect_same_bits_for_1_2_3_threads(what, [&] {
      Tensor C = Tensor::zeros({s.batch * s.M * s.N});
      backend(Device::CPU).gemm(g, A, B, C);
      return C.to_vector<float>();
    });
    const std::vector<float> want = openblas_blocks(g, A.to_vector<float>(), B.to_vector<float>(), bf16,
                                                    std::vector<float>((size_t)(s.batch * s.M * s.N), 0.f));
    EXPECT_EQ(count_differ(got, want), 0) << what << ": not the bits of OpenBLAS's shape-fixed blocks";
  }
  for (const auto& [R, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1024, 768, 256}, {1024, 256, 1024}, {1024, 256, 256}}) {
    Tensor x = Tensor::from_vector(random_vec(R * K, 3), {R, K});
    Tensor w = Tensor::from_vector(random_vec(N * K, 4), {N, K});
    Tensor b = Tensor::from_vector(random_vec(N, 5), {N});
    const std::vector<float> got = expect_same_bits_for_1_2_3_threads(str("linear R=", R, " N=", N, " K=", K), [&] {
      Tensor y = Tensor::zeros({R, N});
      backend(Device::CPU).linear(x, w, b, y);
      return y.to_vector<float>();
    });
    GemmDesc g;  // y = bias in every row, then y += x w^T
    g.M = R, g.N = N, g.K = K, g.trans_b = true, g.beta = 1.f;
    std::vector<float> y0((size_t)(R * N));
    const std::vector<float> bv = b.to_vector<float>();
    for (int64_t r = 0; r < R; ++r) std::copy(bv.begin(), bv.end(), y0.begin() + r * N);
    const std::vector<float> want = openblas_blocks(g, x.to_vector<float>(), w.to_vector<float>(), bf16, y0);
    EXPECT_EQ(count_differ(got, want), 0) << "linear R=" << R << ": not the bits of OpenBLAS's shape-fixed blocks";
  }
  reset_gemm_impl();
}

INSTANTIATE_TEST_SUITE_P(Precisions, GemmThreading, ::testing::Values(Precision::FP32, Precision::BF16),
                         [](const auto& info) { return std::string(info.param == Precision::BF16 ? "bf16" : "fp32"); });
}  // namespace
}  // namespace ctx::cpu
