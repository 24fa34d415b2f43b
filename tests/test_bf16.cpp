// tests/test_bf16.cpp — the bf16 speed mode on the CPU (core/precision.h): the fp32 -> bf16
// rounding (reference bits for ties, NaN, inf, overflow, denormals; the AVX-512 kernel equal to
// the portable one bit for bit), bf16 GEMMs and Linear through Backend held to fp32 references
// with bounds derived from bf16's 8-bit significand and K, the primitive cache staying warm, the
// fp32 default unchanged bit for bit, and the --precision request on this CPU. In CUDA builds
// the same bounds hold the cuBLASLt speed modes (bf16 and tf32; linear with its bias in the
// GEMM's epilogue; emulated device or GPU).
#include <cstdio>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/bf16.h"
#include "core/cpu/bf16_convert.h"
#include "core/fast_paths.h"
#include "core/cpu/flash_attention.h"
#include "core/cpu/gemm.h"
#include "core/threads.h"
#include "core/precision.h"
#include "tests/test_util.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/cuda_runtime.h"  // gemm_lt_stats
#endif

namespace ctx {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(Bf16, ReferenceRoundingBits) {
  struct Case {
    uint32_t in;
    uint16_t out;
    const char* what;
  };
  const Case cases[] = {
      {0x3f800000, 0x3f80, "1.0 exact"},
      {0x3f808000, 0x3f80, "tie between 0x3f80 and 0x3f81: to even (down)"},
      {0x3f818000, 0x3f82, "tie between 0x3f81 and 0x3f82: to even (up)"},
      {0x3f808001, 0x3f81, "just above the tie: up"},
      {0x3f807fff, 0x3f80, "just below the tie: down"},
      {0xbf818000, 0xbf82, "negative tie: to even, by magnitude"},
      {0x3fffffff, 0x4000, "carry into the exponent"},
      {0x7f7fffff, 0x7f80, "FLT_MAX rounds to +inf"},
      {0x7f7f7fff, 0x7f7f, "largest value below the overflow threshold"},
      {0x7f800000, 0x7f80, "+inf"},
      {0xff800000, 0xff80, "-inf"},
      {0x7fc00000, 0x7fff, "quiet NaN: canonical NaN"},
      {0x7f800001, 0x7fff, "signalling NaN with only a low payload bit: still NaN"},
      {0xffc00001, 0x7fff, "negative NaN: canonical NaN"},
      {0x00000000, 0x0000, "+0"},
      {0x80000000, 0x8000, "-0"},
      {0x00000001, 0x0000, "smallest denormal: down to +0"},
      {0x00008000, 0x0000, "denormal tie: to even (0)"},
      {0x00018000, 0x0002, "denormal tie: to even (2)"},
      {0x00008001, 0x0001, "denormal above the tie: smallest bf16 denormal"},
      {0x807fffff, 0x8080, "largest negative denormal rounds to the smallest normal"},
  };
  for (const Case& c : cases)
    EXPECT_EQ(float_to_bf16_rne(from_bits(c.in)), c.out) << std::hex << c.in << ": " << c.what;
  EXPECT_TRUE(std::isnan(bf16_round(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bf16_round(3.0f), 3.0f);
}

// Inputs that hit every path: all 2^16 upper halves with low halves at and around the tie, the
// extremes and random ones; special values interleaved with normal ones inside a vector.
std::vector<float> conversion_inputs() {
  std::vector<float> v;
  std::mt19937 rng(3);
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff};
  for (uint32_t hi = 0; hi < 0x10000; ++hi) {
    for (uint32_t lo : lows) v.push_back(from_bits(hi << 16 | lo));
    v.push_back(from_bits(hi << 16 | (rng() & 0xffff)));
  }
  for (int i = 0; i < 100000; ++i) v.push_back(from_bits(rng()));  // random, mostly normal
  return v;
}

TEST(Bf16, PortableKernelIsTheReference) {
  const std::vector<float> in = conversion_inputs();
  std::vector<uint16_t> out(in.size());
  cpu::convert_f32_to_bf16_portable(in.data(), out.data(), (int64_t)in.size());
  for (size_t i = 0; i < in.size(); ++i)
    ASSERT_EQ(out[i], float_to_bf16_rne(in[i])) << "element " << i;
}

// bf16_values_converted counts the values every thread converts (one slot per thread, summed).
TEST(Bf16, ConversionsAreCountedOnEveryThread) {
  const std::vector<float> in(1000, 1.5f);
  const size_t before = cpu::bf16_values_converted();
  std::vector<std::thread> ts;
  for (int t = 0; t < 3; ++t)
    ts.emplace_back([&] {
      std::vector<uint16_t> out(in.size());
      for (int i = 0; i < 4; ++i) cpu::convert_f32_to_bf16(in.data(), out.data(), (int64_t)in.size());
    });
  for (auto& t : ts) t.join();
  std::vector<uint16_t> out(in.size());
  cpu::convert_f32_to_bf16(in.data(), out.data(), 10);
  EXPECT_EQ(cpu::bf16_values_converted() - before, 3u * 4u * 1000u + 10u);
}

TEST(Bf16, Avx512KernelEqualsPortableBitForBit) {
  std::vector<float> in = conversion_inputs();
  std::vector<uint16_t> ref(in.size() + 64), fast(in.size() + 64, 0xabcd);
  if (!cpu_has_avx512_bf16()) {  // the kernel must refuse rather than run
    EXPECT_FALSE(cpu::convert_f32_to_bf16_avx512(in.data(), fast.data(), (int64_t)in.size()));
    // No skip (CI fails on any skip but the GPU's): what this CPU can check, its refusal, is checked.
    std::printf("this CPU has no avx512_bf16: checked that the AVX-512 kernel refuses\n");
    return;
  }
  // Whole buffer, then odd lengths at odd offsets (tails, unaligned loads and stores).
  cpu::convert_f32_to_bf16_portable(in.data(), ref.data(), (int64_t)in.size());
  ASSERT_TRUE(cpu::convert_f32_to_bf16_avx512(in.data(), fast.data(), (int64_t)in.size()));
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(fast[i], ref[i]) << "element " << i;
  for (int64_t off : {1, 3, 17}) {
    for (int64_t n : {0, 1, 15, 16, 17, 31, 33, 63, 1000}) {
      std::fill(fast.begin(), fast.end(), 0xabcd);
      ASSERT_TRUE(cpu::convert_f32_to_bf16_avx512(in.data() + off, fast.data() + off, n));
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(fast[off + i], float_to_bf16_rne(in[off + i])) << off << " " << n;
      EXPECT_EQ(fast[off + n], 0xabcd) << "wrote past the end: offset " << off << " n " << n;
      EXPECT_EQ(fast[off - 1], 0xabcd) << "wrote before the start";
    }
  }
  // A vector of normal values with one denormal and one NaN (the fix-up path) next to clean ones.
  std::vector<float> mix(96, 1.2345678f);
  mix[5] = from_bits(0x00018000);
  mix[40] = from_bits(0x7fa00001);
  std::vector<uint16_t> m(96);
  ASSERT_TRUE(cpu::convert_f32_to_bf16_avx512(mix.data(), m.data(), 96));
  for (int i = 0; i < 96; ++i) EXPECT_EQ(m[i], float_to_bf16_rne(mix[i])) << i;
}

using testing_util::random_vec;
std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = bf16_round(x);
  return v;
}

// A speed mode under test: bf16 (inputs rounded to nearest even by bf16_round: the bound on the
// rounded inputs holds) or tf32 (CUDA only: inputs rounded to a 10-bit significand on the tensor
// cores; cuBLAS does not document the rounding, so only the bound on the fp32 inputs, with a
// whole unit of the last place, u = 2^-10).
struct Mode {
  Precision p;
  bool tf32;
  double u;            // relative movement of each input
  bool rounds_to_bf16; // the inputs are bf16_round(x): bound (1) applies
  const char* name;
};
const Mode kBf16{Precision::BF16, false, 0x1p-8, true, "bf16"};
const Mode kTf32{Precision::FP32, true, 0x1p-10, false, "tf32"};

// Backend::gemm in a speed mode (default bf16, on the CPU) against two references in double:
//  (1) on the bf16-rounded inputs: a bf16 x bf16 product is exact in fp32 (8 + 8 significand bits
//      <= 24), so only fp32 accumulation separates the two: |c - ref| <= (K + 2) 2^-24 sum|a||b|
//      (+ the same for beta c0). Holds only if the inputs were rounded to nearest even exactly.
//  (2) on the fp32 inputs: each input moves by at most u = 2^-8 relative (8-bit significand),
//      each product by at most 2u + u^2, so |c - ref32| <= (2u + u^2 + (K + 2) 2^-24) |alpha|
//      sum|a||b| + (K + 2) 2^-24 |beta c0| (docs/performance.md, "bf16").
// And (3) some element differs from the exact fp32 GEMM on the same device: the mode was taken.
void check_bf16_gemm(const GemmDesc& g, uint32_t seed, Device dev = Device::CPU, const Mode& mode = kBf16) {
  const int64_t na = (g.batch - 1) * g.stride_a + g.M * g.K, nb = (g.batch - 1) * g.stride_b + g.K * g.N;
  const int64_t nc = (g.batch - 1) * g.stride_c + g.M * g.N;
  const std::vector<float> A = random_vec(na, seed), B = random_vec(nb, seed + 1), C0 = random_vec(nc, seed + 2);
  const std::vector<float> Ar = rounded(A), Br = rounded(B);
  auto to_d = [](const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); };
  std::vector<double> ref32 = to_d(C0), refr = to_d(C0), mag(nc, 0.0);
  cpu::gemm_reference<double>(g, to_d(A).data(), to_d(B).data(), ref32.data());
  cpu::gemm_reference<double>(g, to_d(Ar).data(), to_d(Br).data(), refr.data());
  std::vector<double> Aa(na), Ba(nb);
  for (int64_t i = 0; i < na; ++i) Aa[i] = std::fabs(A[i]);
  for (int64_t i = 0; i < nb; ++i) Ba[i] = std::fabs(B[i]);
  GemmDesc gm = g;
  gm.alpha = 1.f, gm.beta = 0.f;
  cpu::gemm_reference<double>(gm, Aa.data(), Ba.data(), mag.data());

  Tensor tA = Tensor::from_vector(A, {na}).to(dev), tB = Tensor::from_vector(B, {nb}).to(dev);
  Tensor tC = Tensor::from_vector(C0, {nc}).to(dev), tC32 = Tensor::from_vector(C0, {nc}).to(dev);
  {
    PrecisionScope speed(mode.p, mode.tf32);
    backend(dev).gemm(g, tA, tB, tC);
  }
  backend(dev).gemm(g, tA, tB, tC32);
  tC = tC.to(Device::CPU), tC32 = tC32.to(Device::CPU);
  const float* c = tC.data<float>();
  const float* c32 = tC32.data<float>();
  const double acc = (g.K + 2) * std::ldexp(1.0, -24), u = mode.u;
  int differ = 0;
  for (int64_t b = 0; b < g.batch; ++b)
    for (int64_t i = 0; i < g.M * g.N; ++i) {
      const int64_t at = b * g.stride_c + i;
      const double m = std::fabs(g.alpha) * mag[at], cb = std::fabs(g.beta * C0[at]);
      if (mode.rounds_to_bf16) {
        ASSERT_NEAR(c[at], refr[at], acc * (m + cb) + 1e-30)
            << mode.name << " vs rounded inputs: M=" << g.M << " N=" << g.N << " K=" << g.K << " ta=" << g.trans_a
            << " tb=" << g.trans_b << " batch=" << g.batch << " at " << at;
      }
      ASSERT_NEAR(c[at], ref32[at], (2 * u + u * u + acc) * m + acc * cb + 1e-30)
          << mode.name << " vs fp32 inputs: M=" << g.M << " N=" << g.N << " K=" << g.K << " at " << at;
      differ += c[at] != c32[at];
    }
  EXPECT_GT(differ, 0) << mode.name << " GEMM equals the fp32 GEMM everywhere: the " << mode.name
                       << " path was not taken";
}

GemmDesc desc(int64_t M, int64_t N, int64_t K, bool ta, bool tb, float alpha = 1.f, float beta = 0.f,
              int64_t batch = 1, bool bcast_b = false) {
  GemmDesc g;
  g.M = M, g.N = N, g.K = K, g.trans_a = ta, g.trans_b = tb, g.alpha = alpha, g.beta = beta, g.batch = batch;
  g.stride_a = M * K, g.stride_b = bcast_b ? 0 : K * N, g.stride_c = M * N;
  return g;
}

// Every transpose pair, alpha / beta, long K, batches and a broadcast B, in `mode` on `dev`.
void check_gemm_shapes(Device dev, const Mode& mode) {
  uint32_t seed = 10;
  for (int t = 0; t < 4; ++t) {
    check_bf16_gemm(desc(33, 17, 65, t & 1, t & 2), seed++, dev, mode);
    check_bf16_gemm(desc(128, 96, 256, t & 1, t & 2, -0.7f, 0.5f), seed++, dev, mode);
    check_bf16_gemm(desc(7, 64, 1024, t & 1, t & 2), seed++, dev, mode);  // long K: the accumulation term grows
  }
  check_bf16_gemm(desc(16, 24, 32, false, true, 1.f, 0.f, 5), seed++, dev, mode);        // batched
  check_bf16_gemm(desc(16, 24, 32, false, false, 0.5f, 1.f, 3, true), seed++, dev, mode);  // broadcast B
}

TEST(Bf16, GemmWithinTheBf16BoundOfFp32) {
  ctx::init_threading();
  check_gemm_shapes(Device::CPU, kBf16);
}

// Backend::linear (y = x w^T + b, x [rows..., K]) in `mode` on `dev` within the bounds of
// check_bf16_gemm, the bias counted once (a bias dropped or added twice moves y by |b|, far
// outside them), and different from the fp32 linear: the mode was taken.
void check_linear(Device dev, const Mode& mode, const Shape& xs, int64_t N, uint32_t seed) {
  const int64_t K = xs.back(), R = shape_numel(xs) / K;
  const std::vector<float> x = random_vec(R * K, seed), w = random_vec(N * K, seed + 1), b = random_vec(N, seed + 2);
  Tensor tx = Tensor::from_vector(x, xs).to(dev), tw = Tensor::from_vector(w, {N, K}).to(dev),
         tb = Tensor::from_vector(b, {N}).to(dev);
  Shape ys = xs;
  ys.back() = N;
  Tensor y = Tensor::empty(ys, DType::F32, dev), y32 = Tensor::empty(ys, DType::F32, dev);
  ASSERT_TRUE(backend(dev).has(Fused::Linear));
  {
    PrecisionScope speed(mode.p, mode.tf32);
    backend(dev).linear(tx, tw, tb, y);
  }
  backend(dev).linear(tx, tw, tb, y32);
  y = y.to(Device::CPU), y32 = y32.to(Device::CPU);
  const double u = mode.u, acc = (K + 2) * std::ldexp(1.0, -24);
  int differ = 0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t n = 0; n < N; ++n) {
      double ref = b[n], refr = b[n], mag = 0;
      for (int64_t k = 0; k < K; ++k) {
        ref += (double)x[r * K + k] * w[n * K + k];
        refr += (double)bf16_round(x[r * K + k]) * bf16_round(w[n * K + k]);
        mag += std::fabs((double)x[r * K + k] * w[n * K + k]);
      }
      const float v = y.data<float>()[r * N + n];
      if (mode.rounds_to_bf16) {
        ASSERT_NEAR(v, refr, acc * (mag + std::fabs(b[n])) + 1e-30) << mode.name << " " << r << "," << n;
      }
      ASSERT_NEAR(v, ref, (2 * u + u * u + acc) * mag + acc * std::fabs(b[n]) + 1e-30) << mode.name << " " << r << ","
                                                                                        << n;
      differ += v != y32.data<float>()[r * N + n];
    }
  EXPECT_GT(differ, 0) << mode.name << " Linear equals fp32 Linear: the " << mode.name << " path was not taken";
}

TEST(Bf16, LinearWithinTheBound) {
  ctx::init_threading();
  check_linear(Device::CPU, kBf16, {40, 96}, 72, 1);
}

#ifdef CTXLAB_WITH_CUDA
// The CUDA speed modes (cuBLASLt: bf16 inputs, or tf32 compute with --tf32) within the bounds:
// every GEMM shape of the CPU test, and linear on 2-d and 3-d inputs with odd sizes, its bias
// added in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS, counted by gemm_lt_stats). Asking the
// same shapes again creates no cuBLASLt descriptor and asks no heuristic.
TEST(CudaGemmLt, SpeedModesWithinTheBounds) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  for (const Mode& mode : {kBf16, kTf32}) {
    SCOPED_TRACE(mode.name);
    check_gemm_shapes(Device::CUDA, mode);
    const cuda::GemmLtStats before = cuda::gemm_lt_stats();
    check_linear(Device::CUDA, mode, {40, 96}, 72, 1);
    check_linear(Device::CUDA, mode, {3, 5, 33}, 17, 4);
    const cuda::GemmLtStats mid = cuda::gemm_lt_stats();
    EXPECT_EQ(mid.bias_epilogues - before.bias_epilogues, 2u) << "linear did not add its bias in the epilogue";
    check_gemm_shapes(Device::CUDA, mode);
    check_linear(Device::CUDA, mode, {40, 96}, 72, 1);
    const cuda::GemmLtStats after = cuda::gemm_lt_stats();
    EXPECT_GT(after.matmuls, mid.matmuls + 10);
    EXPECT_EQ(after.descriptors, mid.descriptors) << "a repeated shape created cuBLASLt descriptors";
    EXPECT_EQ(after.heuristics, mid.heuristics) << "a repeated shape asked the heuristic again";
    EXPECT_EQ(after.plans, mid.plans);
  }
}
#endif

#ifdef CTXLAB_WITH_CUDA
// The MLP's GELU epilogues (GELU_AUX_BIAS, DGELU) in `mode` against the composition
// they replace on the same device and mode (linear + the GeluTanh unary; gemm + its backward +
// reduce_sum): the same bf16 products, so equal to a few fp32 roundings, or to the GELU
// approximation the library's epilogue may use (its tanh: 1e-3 relative, below bf16's 2^-8 that
// the next GEMM rounds h to). `taken`: the epilogue ran (gemm_lt_stats counts it); else the
// composition did, bit for bit (N not a multiple of 8: cuBLASLt's aux needs ld % 8 == 0).
void check_mlp_epilogues(const Mode& mode, int64_t R, int64_t K, int64_t N, bool taken) {
  SCOPED_TRACE(str("R ", R, " K ", K, " N ", N));
  Backend& be = backend(Device::CUDA);
  auto dev = [](const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s).to(Device::CUDA); };
  const Tensor x = dev(random_vec(R * K, 31), {R, K}), w = dev(random_vec(N * K, 32), {N, K}),
               b = dev(random_vec(N, 33), {N}), dy = dev(random_vec(R * K, 34), {R, K});
  auto empty = [](int64_t r, int64_t c) { return Tensor::empty({r, c}, DType::F32, Device::CUDA); };
  Tensor pre = empty(R, N), h = empty(R, N), pre2 = empty(R, N), h2 = empty(R, N);
  Tensor dpre = empty(R, N), dpre2 = empty(R, N), dh2 = empty(R, N), dpre_nb = empty(R, N);
  Tensor db = Tensor::empty({N}, DType::F32, Device::CUDA), db2 = Tensor::empty({N}, DType::F32, Device::CUDA), none;
  GemmDesc g;  // dpre [R, N] = dy [R, K] w [K, N]: w read as [K, N] (as the MLP's w2)
  g.M = R, g.N = N, g.K = K;
  const Tensor wkn = w.view({K, N});
  PrecisionScope speed(mode.p, mode.tf32);
  const cuda::GemmLtStats before = cuda::gemm_lt_stats();
  be.linear_gelu(x, w, b, pre, h);
  be.gemm_dgelu(g, dy, wkn, pre, dpre, db);
  be.gemm_dgelu(g, dy, wkn, pre, dpre_nb, none);
  const cuda::GemmLtStats after = cuda::gemm_lt_stats();
  EXPECT_EQ(after.gelu_epilogues - before.gelu_epilogues, taken ? 3u : 0u) << "GELU epilogues run";
  be.linear(x, w, b, pre2);  // the composition
  be.unary(UnaryOp::GeluTanh, pre2, h2);
  be.gemm(g, dy, wkn, dh2);
  be.unary_backward(UnaryOp::GeluTanh, pre, Tensor(), dh2, dpre2);
  be.reduce_sum(dpre2, db2);
  auto host = [](const Tensor& t) { return t.to(Device::CPU); };
  const Tensor P = host(pre), P2 = host(pre2), H = host(h), H2 = host(h2), D = host(dpre), D2 = host(dpre2),
               DN = host(dpre_nb), B = host(db), B2 = host(db2);
  double dmax = 0, bmax = 0;
  for (int64_t e = 0; e < R * N; ++e) dmax = std::max(dmax, std::fabs(D2.at(e)));
  for (int64_t j = 0; j < N; ++j) bmax = std::max(bmax, std::fabs(B2.at(j)));
  const double acc = (K + 2) * std::ldexp(1.0, -24);
  for (int64_t e = 0; e < R * N; ++e) {
    if (!taken) {  // the composition itself
      ASSERT_EQ(P.at(e), P2.at(e));
      ASSERT_EQ(H.at(e), H2.at(e));
      ASSERT_EQ(D.at(e), D2.at(e));
      continue;
    }
    ASSERT_NEAR(P.at(e), P2.at(e), acc * (K + std::fabs(P2.at(e)))) << "pre " << e;
    ASSERT_NEAR(H.at(e), H2.at(e), 1e-3 * (std::fabs(P2.at(e)) + std::fabs(H2.at(e))) + 1e-6) << "h " << e;
    ASSERT_NEAR(D.at(e), D2.at(e), 2e-3 * dmax) << "dpre " << e;
    ASSERT_EQ(DN.at(e), D.at(e)) << "dpre without the bias gradient " << e;
  }
  for (int64_t j = 0; j < N; ++j) ASSERT_NEAR(B.at(j), B2.at(j), taken ? 2e-3 * R * std::max(dmax, bmax / R) : 0.0) << j;
}

// Both speed modes, an MLP-like shape and a short one, then a shape the epilogues cannot take
// (N % 8 != 0) composed instead; a repeated shape makes no new cuBLASLt plan.
TEST(CudaGemmLt, MlpGeluEpiloguesMatchTheComposition) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  for (const Mode& mode : {kBf16, kTf32}) {
    SCOPED_TRACE(mode.name);
    check_mlp_epilogues(mode, 40, 48, 64, true);
    check_mlp_epilogues(mode, 3, 17, 8, true);
    check_mlp_epilogues(mode, 9, 16, 12, false);
    const uint64_t plans = cuda::gemm_lt_stats().plans;
    check_mlp_epilogues(mode, 40, 48, 64, true);
    EXPECT_EQ(cuda::gemm_lt_stats().plans, plans) << "a repeated shape made a new plan";
  }
}
#endif

TEST(Bf16, WarmGemmCreatesNoPrimitive) {
  ctx::init_threading();
  const GemmDesc g = desc(64, 48, 80, false, true);
  check_bf16_gemm(g, 77);  // creates the bf16 (and fp32) primitives for this shape
  const size_t n = cpu::onednn_gemm_cache_size();
  for (int i = 0; i < 3; ++i) check_bf16_gemm(g, 78 + i);
  EXPECT_EQ(cpu::onednn_gemm_cache_size(), n);
}

// The fp32 default is what ctxlab computed before the setting existed, bit for bit: Backend::gemm
// and linear at the default precision equal the plain oneDNN fp32 GEMM (the path they took
// before), also after a bf16 scope has come and gone, and f64 is never touched by bf16.
TEST(Bf16, Fp32DefaultUnchangedBitwise) {
  ctx::init_threading();
  ASSERT_EQ(gemm_precision(), Precision::FP32);
  ASSERT_FALSE(gemm_allow_tf32());
  const GemmDesc g = desc(37, 29, 70, false, true, 1.f, 0.f);
  const std::vector<float> A = random_vec(37 * 70, 5), B = random_vec(29 * 70, 6);
  std::vector<float> direct(37 * 29);
  cpu::set_gemm_impl(cpu::GemmImpl::OneDNN);
  cpu::gemm_onednn(g, A.data(), B.data(), direct.data());
  Tensor tA = Tensor::from_vector(A, {37, 70}), tB = Tensor::from_vector(B, {29, 70});
  Tensor before = Tensor::empty({37, 29}, DType::F32), after = Tensor::empty({37, 29}, DType::F32);
  backend(Device::CPU).gemm(g, tA, tB, before);
  {
    PrecisionScope bf16(Precision::BF16);
    Tensor t = Tensor::empty({37, 29}, DType::F32);
    backend(Device::CPU).gemm(g, tA, tB, t);
  }
  EXPECT_EQ(gemm_precision(), Precision::FP32);
  backend(Device::CPU).gemm(g, tA, tB, after);
  cpu::reset_gemm_impl();
  EXPECT_EQ(std::memcmp(before.data<float>(), direct.data(), direct.size() * 4), 0);
  EXPECT_EQ(std::memcmp(after.data<float>(), direct.data(), direct.size() * 4), 0);
  // f64 under bf16: exact as ever
  Tensor dA = tA.to(DType::F64), dB = tB.to(DType::F64);
  Tensor d1 = Tensor::empty({37, 29}, DType::F64), d2 = Tensor::empty({37, 29}, DType::F64);
  backend(Device::CPU).gemm(g, dA, dB, d1);
  {
    PrecisionScope bf16(Precision::BF16);
    backend(Device::CPU).gemm(g, dA, dB, d2);
  }
  EXPECT_EQ(std::memcmp(d1.data<double>(), d2.data<double>(), 37 * 29 * 8), 0);
}

// The fused attention's products under --precision bf16 with CTXLAB_BF16_ATTENTION=1 (opt-in;
// core/cpu/flash_attention.cpp: q k^T, p v and the backward's four products take bf16 inputs,
// fp32 sums); off (the default), the attention is fp32 bit for bit. Against the fp32 kernels:
// o within the bound of bf16 rounding (each score moves by at most e_i = scale max_j sum_d
// |q_id k_jd| 2^-8, so each row's weights by a factor within e^(+-2 e_i); p and v by 2^-8 each:
// |do_i| <= max|v| (2^-7 + 2 e_i) + fp32 slack), the gradients within 2% of their tensor's max
// (the ctxlab grads test's 3e-2 per tensor, at the model's scale), and not equal to fp32: the
// bf16 products ran. Shapes: several query and key tiles (BC = BR = 64) with partial ones, a
// window, a bias, and Dh not a multiple of the vector (zero-padded rows).
TEST(Bf16, FusedAttentionWithinTheBf16Bound) {
  if (!ctx::testing_util::cpu_runs_bf16_else_check_refusal()) return;
  ctx::init_threading();
  struct Opt {  // the bf16 products are opt-in (CTXLAB_BF16_ATTENTION=1)
    Opt() { set_fast_path(FastPath::Bf16Attention, true); }
    ~Opt() { reset_fast_path(FastPath::Bf16Attention); }
  };
  struct C { int64_t B, H, T, Dh, window; bool bias; };
  uint32_t seed = 300;
  for (const C c : {C{1, 2, 130, 32, 0, false}, C{2, 1, 100, 20, 37, true}, C{1, 1, 64, 64, 0, true}}) {
    AttnDims d;
    d.B = c.B, d.H = c.H, d.T = c.T, d.S = c.T, d.Dh = c.Dh, d.window = c.window;
    d.scale = 1.0 / std::sqrt((double)c.Dh);
    const Shape qs{c.B, c.H, c.T, c.Dh};
    const int64_t n = c.B * c.H * c.T * c.Dh;
    Tensor q = Tensor::from_vector(random_vec(n, seed++), qs), k = Tensor::from_vector(random_vec(n, seed++), qs);
    Tensor v = Tensor::from_vector(random_vec(n, seed++), qs), go = Tensor::from_vector(random_vec(n, seed++), qs);
    Tensor bias = c.bias ? Tensor::from_vector(random_vec(c.H * c.T * c.T, seed++), {c.H, c.T, c.T}) : Tensor();
    struct Out { std::vector<float> o, dq, dk, dv; };
    auto run = [&](Precision p) {
      PrecisionScope scope(p);
      Tensor o = Tensor::empty(qs), lse = Tensor::empty({c.B, c.H, c.T});
      Tensor dq = Tensor::empty(qs), dk = Tensor::empty(qs), dv = Tensor::empty(qs), db;
      AttnRelGrad drel;
      backend(Device::CPU).attention_forward(d, q, k, v, bias, o, lse, AttnRel{});
      backend(Device::CPU).attention_backward(d, q, k, v, bias, o, lse, go, dq, dk, dv, db, AttnRel{}, drel);
      return Out{o.to_vector<float>(), dq.to_vector<float>(), dk.to_vector<float>(), dv.to_vector<float>()};
    };
    const Out a = run(Precision::FP32);
    // by default --precision bf16 leaves the attention products in fp32: the same bits as fp32
    set_fast_path(FastPath::Bf16Attention, false);
    const Out off = run(Precision::BF16);
    EXPECT_TRUE(off.o == a.o && off.dq == a.dq && off.dk == a.dk && off.dv == a.dv)
        << "CTXLAB_BF16_ATTENTION off: the attention changed under --precision bf16";
    Out b;
    {
      Opt on;
      b = run(Precision::BF16);
    }
    const std::vector<float> qv = q.to_vector<float>(), kv = k.to_vector<float>(), vv = v.to_vector<float>();
    double vmax = 0;
    for (float x : vv) vmax = std::max(vmax, (double)std::fabs(x));
    const double u = std::ldexp(1.0, -8);
    int differ = 0;
    for (int64_t bh = 0; bh < c.B * c.H; ++bh)
      for (int64_t i = 0; i < c.T; ++i) {
        double e = 0;  // this row's score bound
        for (int64_t j = 0; j <= i; ++j) {
          double m = 0;
          for (int64_t x = 0; x < c.Dh; ++x) m += std::fabs((double)qv[(bh * c.T + i) * c.Dh + x] * kv[(bh * c.T + j) * c.Dh + x]);
          e = std::max(e, d.scale * m * u);
        }
        const double tol = vmax * (2 * u + 2 * (std::exp(2 * e) - 1)) + 1e-5;
        for (int64_t x = 0; x < c.Dh; ++x) {
          const size_t at = (size_t)((bh * c.T + i) * c.Dh + x);
          ASSERT_NEAR(b.o[at], a.o[at], tol) << "o at " << at << " T=" << c.T << " Dh=" << c.Dh;
          differ += b.o[at] != a.o[at];
        }
      }
    EXPECT_GT(differ, 0) << "bf16 attention equals fp32: the bf16 products did not run";
    auto check = [&](const std::vector<float>& x, const std::vector<float>& ref, const char* what) {
      double mx = 0, err = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        mx = std::max(mx, (double)std::fabs(ref[i]));
        err = std::max(err, (double)std::fabs(x[i] - ref[i]));
      }
      EXPECT_LE(err, 0.02 * mx) << what << " T=" << c.T << " Dh=" << c.Dh << " window " << c.window;
      EXPECT_GT(err, 0.0) << what << ": bf16 equals fp32";
      std::printf("  attention T=%lld Dh=%lld window %lld: %s max |bf16 - fp32| = %.2e of max %.2e\n",
                  (long long)c.T, (long long)c.Dh, (long long)c.window, what, err, mx);
    };
    check(b.dq, a.dq, "dq");
    check(b.dk, a.dk, "dk");
    check(b.dv, a.dv, "dv");
  }
}

// Which bf16 GEMM this CPU runs: oneDNN's bf16 matmul wherever it has AVX-512 (native VDPBF16PS,
// or oneDNN's own emulation on AVX-512 without avx512_bf16); without AVX-512 oneDNN has none and
// the operands' bf16 bits are widened to fp32 for the fp32 primitive (gemm_onednn.cpp). Either way
// GemmWithinTheBf16BoundOfFp32 holds the arithmetic; this holds the probe to the CPU's flags, and
// the emulated path to an exact reference: fp32 GEMM of the rounded inputs, bit for bit.
TEST(Bf16, GemmPathFollowsTheCpu) {
  ctx::init_threading();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  EXPECT_EQ(cpu::onednn_bf16_matmul_available(), avx512);
  std::printf("this CPU: %s\n", avx512 ? "oneDNN bf16 matmul" : "no AVX-512: bf16 operands widened to fp32");
  if (avx512) return;  // the native kernels' sums differ from the fp32 primitive's order
  const GemmDesc g = desc(48, 40, 96, false, true);
  const std::vector<float> A = random_vec(48 * 96, 5), B = random_vec(96 * 40, 6);
  Tensor tA = Tensor::from_vector(A, {48 * 96}), tB = Tensor::from_vector(B, {96 * 40});
  Tensor rA = Tensor::from_vector(rounded(A), {48 * 96}), rB = Tensor::from_vector(rounded(B), {96 * 40});
  Tensor c16 = Tensor::zeros({48 * 40}), cr = Tensor::zeros({48 * 40});
  {
    PrecisionScope bf16(Precision::BF16);
    backend(Device::CPU).gemm(g, tA, tB, c16);
  }
  cpu::gemm_onednn(g, rA.data<float>(), rB.data<float>(), cr.data<float>());
  const std::vector<float> got = c16.to_vector<float>(), want = cr.to_vector<float>();
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "element " << i;
}

TEST(Bf16, PrecisionRequestOnThisCpu) {
  EXPECT_EQ(precision_from_string("bf16"), Precision::BF16);
  EXPECT_EQ(precision_from_string("fp32"), Precision::FP32);
  try {
    precision_from_string("fp16");
    FAIL() << "fp16 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32 or bf16"), std::string::npos) << e.what();
  }
  const std::string note = apply_precision_request(Precision::BF16, false, Device::CPU);
  if (cpu_has_avx512_bf16()) {
    EXPECT_EQ(note, "");
    EXPECT_EQ(gemm_precision(), Precision::BF16);
  } else {
    EXPECT_EQ(note, "--precision bf16: this CPU has no avx512_bf16; running fp32 instead");
    EXPECT_EQ(gemm_precision(), Precision::FP32);
  }
  const std::string tf = apply_precision_request(Precision::FP32, true, Device::CPU);
  EXPECT_NE(tf.find("--tf32: no effect on the CPU"), std::string::npos) << tf;
  EXPECT_FALSE(gemm_allow_tf32());
  EXPECT_EQ(apply_precision_request(Precision::BF16, true, Device::CUDA), "");  // honoured on CUDA
  EXPECT_EQ(gemm_precision(), Precision::BF16);
  EXPECT_TRUE(gemm_allow_tf32());
  apply_precision_request(Precision::FP32, false, Device::CPU);  // leave the default behind
  EXPECT_EQ(gemm_precision(), Precision::FP32);
}

}  // namespace
}  // namespace ctx
