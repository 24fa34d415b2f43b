// tests/test_gemv.cpp — the M <= 8 Linear (core/cpu/gemv.h) and the kept bf16 weight copy
// (core/cpu/bf16_convert.h): the fp32 and bf16 GEMV kernels against their reference loops over
// ragged shapes (K tails, row remainders, the threaded split), Backend::linear at one row taking
// them, and a weight converted once until it is written (the convert-once rule of bf16 training
// and decoding), with the backward reusing the forward's copy.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "autograd/ops.h"
#include "autograd/variable.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/bf16.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/cuda_runtime.h"  // gemm_lt_stats
#endif
#include "core/cpu/bf16_convert.h"
#include "core/cpu/gemm.h"
#include "core/cpu/gemv.h"
#include "core/cpu/hsum.h"
#include "core/threads.h"
#include "core/precision.h"
#include "tests/test_util.h"

namespace ctx {
namespace {

constexpr int64_t kGemvMaxRowsForTest = cpu::kGemvMaxRows;

using testing_util::random_vec;

std::vector<uint16_t> to_bits(const std::vector<float>& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = float_to_bf16_rne(v[i]);
  return b;
}

struct Shape2 {
  int64_t N, K;
};
// K: below, at and past the 16 / 32 lanes; N: row remainders of the 4-row blocks; the last one
// large enough (N K >= 2^20) for the rows to split over the threads.
const Shape2 kShapes[] = {{1, 1}, {3, 15}, {4, 16}, {5, 17}, {7, 31}, {9, 32}, {13, 33}, {64, 256},
                          {6, 1000}, {1030, 1024}};

// |y - ref| within the fp32 accumulation bound (K + 2) 2^-24 sum|w x| (+ |b|).
void expect_close(const std::vector<float>& y, const std::vector<float>& ref, const std::vector<double>& mag,
                  int64_t K, const char* what, int64_t N) {
  const double acc = (K + 2) * std::ldexp(1.0, -24);
  for (int64_t n = 0; n < N; ++n)
    ASSERT_NEAR(y[n], ref[n], acc * mag[n] + 1e-30) << what << " N=" << N << " K=" << K << " row " << n;
}

std::vector<double> magnitudes(const std::vector<float>& W, const std::vector<float>& x, const std::vector<float>& b,
                               int64_t N, int64_t K) {
  std::vector<double> m((size_t)N);
  for (int64_t n = 0; n < N; ++n) {
    double s = std::fabs(b[n]);
    for (int64_t k = 0; k < K; ++k) s += std::fabs((double)W[n * K + k] * x[k]);
    m[n] = s;
  }
  return m;
}

// A few rows of X at once (M <= 8, decoding several samples together): each row's outputs are the
// bits of that row alone (M = 1: the same sums in the same order), and near the reference; M = 9
// is left to a GEMM (false, nothing written).
TEST(Gemv, SeveralRowsEqualEachRowAlone) {
  ctx::init_threading();
  const bool bf16 = cpu_has_avx512_bf16();
  uint32_t seed = 100;
  for (const Shape2 s : {Shape2{13, 33}, Shape2{64, 256}, Shape2{1030, 1024}})
    for (int64_t M = 1; M <= kGemvMaxRowsForTest; ++M) {
      const auto W = random_vec(s.N * s.K, seed++), X = random_vec(M * s.K, seed++), b = random_vec(s.N, seed++);
      const auto Wb = to_bits(W);
      for (int pass = 0; pass < (bf16 ? 2 : 1); ++pass) {
        std::vector<float> Y((size_t)(M * s.N), -7.f), one((size_t)s.N), ref((size_t)(M * s.N));
        auto run = [&](const float* x, float* y, int64_t m) {
          return pass == 0 ? cpu::gemv_f32(W.data(), x, b.data(), y, s.N, s.K, m)
                           : cpu::gemv_bf16(Wb.data(), x, b.data(), y, s.N, s.K, m);
        };
        if (!run(X.data(), Y.data(), M)) {  // (bf16 runs only where avx512_bf16 is: pass 1)
          std::printf("this build has no AVX-512F GEMV kernel (not compiled for AVX-512): checked that it refuses\n");
          EXPECT_EQ(Y[0], -7.f) << "nothing written";
          return;
        }
        cpu::gemv_reference(pass == 0 ? W.data() : nullptr, pass == 0 ? nullptr : Wb.data(), X.data(), b.data(),
                            ref.data(), s.N, s.K, M);
        for (int64_t m = 0; m < M; ++m) {
          ASSERT_TRUE(run(X.data() + m * s.K, one.data(), 1));
          for (int64_t n = 0; n < s.N; ++n) {
            ASSERT_EQ(Y[(size_t)(m * s.N + n)], one[(size_t)n])
                << (pass ? "bf16" : "fp32") << " M " << M << " row " << m << " col " << n;
            ASSERT_NEAR(Y[(size_t)(m * s.N + n)], ref[(size_t)(m * s.N + n)],
                        (pass ? 1e-2 : 1e-4) * (1 + std::fabs(ref[(size_t)(m * s.N + n)])));
          }
        }
      }
    }
  std::vector<float> W(64, 1.f), X(9 * 8, 1.f), Y(9 * 8, -7.f);
  EXPECT_FALSE(cpu::gemv_f32(W.data(), X.data(), nullptr, Y.data(), 8, 8, 9));
  EXPECT_EQ(Y[0], -7.f) << "nothing written for M = 9";
}

// The decoder's pack in panels of four rows (gemv_pack_panels): the panel kernels over any range of
// rows [n0, n1) give the bits the row-major kernel gives for the whole matrix, fp32 and bf16,
// M = 1..8, ranges that start and end inside a panel, K and N tails; the pack is the rows' values
// (rounded to bf16 as bf16_copy rounds) with zeros past each row's end.
TEST(Gemv, PanelsOfFourRowsGiveTheRowMajorBits) {
  ctx::init_threading();
  if (!cpu::gemv_available(false)) {
    std::printf("this build has no AVX-512F GEMV kernel: the panel kernels are not run\n");
    return;
  }
  uint32_t seed = 300;
  for (const Shape2 s : {Shape2{1, 1}, Shape2{5, 17}, Shape2{13, 33}, Shape2{30, 40}, Shape2{64, 256}, Shape2{70, 1000}})
    for (const bool bf16 : {false, true}) {
      if (bf16 && !cpu::gemv_available(true)) continue;  // (no avx512_bf16: fp32 alone)
      const auto W = random_vec(s.N * s.K, seed++), b = random_vec(s.N, seed++);
      const int64_t elems = cpu::gemv_panel_elems(s.N, s.K, bf16), V = bf16 ? 32 : 16;
      ASSERT_EQ(elems, (s.N + 3) / 4 * 4 * ((s.K + V - 1) / V * V));
      std::vector<float> P16(bf16 ? 0 : (size_t)elems, -1.f);
      std::vector<uint16_t> P32(bf16 ? (size_t)elems : 0, 0xFFFF);
      cpu::gemv_pack_panels(W.data(), P16.data(), bf16 ? P32.data() : nullptr, s.N, s.K);
      const auto Wb = to_bits(W);
      const int64_t Kv = (s.K + V - 1) / V * V;
      for (int64_t n = 0; n < (s.N + 3) / 4 * 4; ++n)
        for (int64_t k = 0; k < Kv; ++k) {
          const int64_t at = (n / 4) * 4 * Kv + (k / V) * 4 * V + (n % 4) * V + k % V;
          const bool in = n < s.N && k < s.K;
          if (bf16) ASSERT_EQ(P32[(size_t)at], in ? Wb[(size_t)(n * s.K + k)] : 0) << n << " " << k;
          else ASSERT_EQ(P16[(size_t)at], in ? W[(size_t)(n * s.K + k)] : 0.f) << n << " " << k;
        }
      for (int64_t M = 1; M <= kGemvMaxRowsForTest; ++M) {
        const auto X = random_vec(M * s.K, seed++);
        std::vector<uint16_t> XB((size_t)(M * cpu::gemv_bf16_padded(s.K)));
        if (bf16) cpu::gemv_x_bf16(X.data(), XB.data(), s.K, M);
        std::vector<float> want((size_t)(M * s.N));
        ASSERT_TRUE(bf16 ? cpu::gemv_bf16(Wb.data(), X.data(), b.data(), want.data(), s.N, s.K, M)
                         : cpu::gemv_f32(W.data(), X.data(), b.data(), want.data(), s.N, s.K, M));
        // the rows in three ranges, cut inside panels where N allows
        const int64_t c1 = std::min<int64_t>(s.N, 1 + s.N / 3), c2 = std::min<int64_t>(s.N, c1 + 1 + s.N / 2);
        std::vector<float> got((size_t)(M * s.N), -7.f);
        for (const auto& [n0, n1] : {std::pair<int64_t, int64_t>{0, c1}, {c1, c2}, {c2, s.N}}) {
          if (bf16) cpu::gemv_rows_bf16(P32.data(), XB.data(), b.data(), got.data(), s.N, n0, n1, s.K, M);
          else cpu::gemv_rows_f32(P16.data(), X.data(), b.data(), got.data(), s.N, n0, n1, s.K, M);
        }
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_EQ(got[i], want[i]) << (bf16 ? "bf16" : "fp32") << " N " << s.N << " K " << s.K << " M " << M
                                     << " output " << i;
      }
    }
}

TEST(Gemv, F32KernelMatchesReference) {
  ctx::init_threading();
  uint32_t seed = 1;
  for (const Shape2 s : kShapes) {
    const auto W = random_vec(s.N * s.K, seed++), x = random_vec(s.K, seed++), b = random_vec(s.N, seed++);
    std::vector<float> y((size_t)s.N, -7.f), ref((size_t)s.N);
    if (!cpu::gemv_f32(W.data(), x.data(), b.data(), y.data(), s.N, s.K)) {
      std::printf("this build has no AVX-512F GEMV kernel (not compiled for AVX-512): checked that it refuses\n");
      EXPECT_EQ(y[0], -7.f);
      return;
    }
    cpu::gemv_reference(W.data(), nullptr, x.data(), b.data(), ref.data(), s.N, s.K);
    expect_close(y, ref, magnitudes(W, x, b, s.N, s.K), s.K, "f32", s.N);
    // no bias
    cpu::gemv_f32(W.data(), x.data(), nullptr, y.data(), s.N, s.K);
    for (int64_t n = 0; n < s.N; ++n) ref[n] -= b[n];
    expect_close(y, ref, magnitudes(W, x, b, s.N, s.K), s.K, "f32 without bias", s.N);
  }
}

TEST(Gemv, Bf16KernelMatchesReference) {
  ctx::init_threading();
  uint32_t seed = 100;
  for (const Shape2 s : kShapes) {
    const auto W = random_vec(s.N * s.K, seed++), x = random_vec(s.K, seed++), b = random_vec(s.N, seed++);
    const auto Wb = to_bits(W);
    std::vector<float> y((size_t)s.N, -7.f), ref((size_t)s.N), ref32((size_t)s.N);
    if (!cpu::gemv_bf16(Wb.data(), x.data(), b.data(), y.data(), s.N, s.K)) {
      ASSERT_FALSE(cpu_has_avx512_bf16()) << "the bf16 GEMV refused on a CPU with avx512_bf16";
      std::printf("this CPU has no avx512_bf16: checked that the bf16 GEMV refuses\n");
      EXPECT_EQ(y[0], -7.f);
      return;
    }
    // against the bf16 semantics (rounded inputs, exact products, fp32 sums) ...
    cpu::gemv_reference(nullptr, Wb.data(), x.data(), b.data(), ref.data(), s.N, s.K);
    expect_close(y, ref, magnitudes(W, x, b, s.N, s.K), s.K, "bf16", s.N);
    // ... and, from K = 16 on, not the fp32 result: the inputs were rounded
    cpu::gemv_reference(W.data(), nullptr, x.data(), b.data(), ref32.data(), s.N, s.K);
    int differ = 0;
    for (int64_t n = 0; n < s.N; ++n) differ += y[n] != ref32[n];
    if (s.K >= 16) {
      EXPECT_GT(differ, 0) << "bf16 GEMV equals fp32 at N=" << s.N << " K=" << s.K;
    }
  }
}

// Backend::linear with one row takes the GEMV (fp32 and bf16), and agrees with a many-row call
// holding the same row (oneDNN's matmul) within the accumulation bound.
TEST(Gemv, LinearOneRowTakesTheGemv) {
  ctx::init_threading();
  const int64_t K = 96, N = 72;
  const auto x = random_vec(K, 7), w = random_vec(N * K, 8), b = random_vec(N, 9);
  Tensor tx = Tensor::from_vector(x, {1, K}), tw = Tensor::from_vector(w, {N, K}), tb = Tensor::from_vector(b, {N});
  const std::vector<double> mag = magnitudes(w, x, b, N, K);
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    if (p == Precision::BF16 && !ctx::testing_util::cpu_runs_bf16_else_check_refusal()) continue;
    PrecisionScope scope(p);
    Tensor y = Tensor::empty({1, N}, DType::F32);
    backend(Device::CPU).linear(tx, tw, tb, y);
    std::vector<float> ref((size_t)N), got = y.to_vector<float>();
    const auto wb = to_bits(w);
    cpu::gemv_reference(p == Precision::FP32 ? w.data() : nullptr, p == Precision::BF16 ? wb.data() : nullptr,
                        x.data(), b.data(), ref.data(), N, K);
    expect_close(got, ref, mag, K, precision_name(p), N);
    // the same row inside a 3-row call (the GEMM path): equal within the bound
    std::vector<float> x3 = random_vec(3 * K, 10);
    std::copy(x.begin(), x.end(), x3.begin() + K);
    Tensor y3 = Tensor::empty({3, N}, DType::F32);
    backend(Device::CPU).linear(Tensor::from_vector(x3, {3, K}), tw, tb, y3);
    const std::vector<float> all3 = y3.to_vector<float>();
    const std::vector<float> mid(all3.begin() + N, all3.begin() + 2 * N);
    expect_close(got, mid, mag, 2 * K, "one row vs three rows", N);
  }
}

TEST(Bf16Copy, ConvertedOnceUntilWritten) {
  Tensor w = Tensor::from_vector(random_vec(64, 3), {8, 8});
  Tensor row = w.select0(5);  // a view: offset 40 into the same storage
  ASSERT_EQ(cpu::bf16_copy_if_kept(w), nullptr);
  const size_t made = cpu::bf16_copies_made();
  const uint16_t* c = cpu::bf16_copy(w);
  EXPECT_EQ(cpu::bf16_copies_made(), made + 1);
  const Tensor& cw = w;  // reads through a const tensor (a mutable data() would drop the copy)
  for (int64_t i = 0; i < 64; ++i) ASSERT_EQ(c[i], float_to_bf16_rne(cw.data<float>()[i])) << i;
  EXPECT_EQ(cpu::bf16_copy(w), c);                 // kept: no second conversion
  EXPECT_EQ(cpu::bf16_copy(row), c + 40);          // a view reads its elements of the same copy
  EXPECT_EQ(cpu::bf16_copy_if_kept(row), c + 40);
  EXPECT_EQ(cpu::bf16_copies_made(), made + 1);
  row.data<float>()[2] = 3.0f;  // a write through any view drops the copy
  EXPECT_EQ(cpu::bf16_copy_if_kept(w), nullptr);
  const uint16_t* c2 = cpu::bf16_copy(w);
  EXPECT_EQ(cpu::bf16_copies_made(), made + 2);
  EXPECT_EQ(c2[42], float_to_bf16_rne(3.0f));
  Tensor d = Tensor::zeros({4}, DType::F64);
  EXPECT_THROW(cpu::bf16_copy(d), Error);
  EXPECT_EQ(cpu::bf16_copy_if_kept(d), nullptr);
}

// A bf16 Linear's forward converts its weight once and the backward (dx = dy w) reads the same
// copy; an update of the weight (what the optimizer does) makes the next forward convert again.
TEST(Bf16Copy, LinearForwardAndBackwardConvertEachOperandOnce) {
  if (!ctx::testing_util::cpu_runs_bf16_else_check_refusal()) return;
  ctx::init_threading();
  const int64_t R = 24, K = 48, N = 40;
  Variable w(Tensor::from_vector(random_vec(N * K, 21), {N, K}), true);
  Variable b(Tensor::from_vector(random_vec(N, 22), {N}), true);
  Variable x(Tensor::from_vector(random_vec(R * K, 23), {R, K}), true);
  PrecisionScope bf16(Precision::BF16);
  auto step = [&] {
    w.zero_grad(), b.zero_grad(), x.zero_grad();
    Variable y = linear(x, w, b);
    Variable dy = mul(y, y);  // sum(y^2): dy = 2y, a fresh tensor each step
    sum(dy).backward();
    return std::vector<std::vector<float>>{y.data().to_vector<float>(), x.grad().to_vector<float>(),
                                           w.grad().to_vector<float>()};
  };
  const size_t made = cpu::bf16_copies_made();
  size_t values = cpu::bf16_values_converted();
  const auto first = step();
  EXPECT_EQ(cpu::bf16_copies_made(), made + 1) << "forward + backward should convert w once";
  // w, x (kept by the forward for dw), dy (kept for dx and dw): each once, not once per GEMM
  EXPECT_EQ(cpu::bf16_values_converted() - values, (size_t)(N * K + R * K + R * N));
  values = cpu::bf16_values_converted();
  const auto again = step();  // w and x unchanged: their copies are still good; dy is new
  EXPECT_EQ(cpu::bf16_copies_made(), made + 1);
  EXPECT_EQ(cpu::bf16_values_converted() - values, (size_t)(R * N));
  EXPECT_EQ(first, again);
  // a mutable access to w (as an update makes) drops the copy; the next step converts afresh
  w.data().data<float>();
  ASSERT_EQ(cpu::bf16_copy_if_kept(w.data()), nullptr);
  EXPECT_EQ(step(), first);
  EXPECT_EQ(cpu::bf16_copies_made(), made + 2) << "a write to w makes the next forward convert again";
}

#ifdef CTXLAB_WITH_CUDA
// The CUDA twin (bf16 GEMMs through cuBLASLt, core/cuda/cuda_backend.cu's kept_bf16): the forward
// keeps x's and w's bf16 copies, the backward dy's (gemm_operand_reused), so gemm_lt converts none
// of the three GEMMs' six operands itself; new values written into w drop its copy: the next step
// equals one with a fresh w holding those values, bit for bit.
TEST(CudaGemmLt, LinearGemmsReadTheKeptCopies) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  const int64_t R = 24, K = 48, N = 40;
  auto on_gpu = [](const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s).to(Device::CUDA); };
  Variable w(on_gpu(random_vec(N * K, 21), {N, K}), true), b(on_gpu(random_vec(N, 22), {N}), true);
  Variable x(on_gpu(random_vec(R * K, 23), {R, K}), true);
  PrecisionScope bf16(Precision::BF16);
  auto step = [&](Variable& wv) {
    wv.zero_grad(), b.zero_grad(), x.zero_grad();
    Variable y = linear(x, wv, b);
    sum(mul(y, y)).backward();
    return std::vector<std::vector<float>>{y.data().to(Device::CPU).to_vector<float>(),
                                           x.grad().to(Device::CPU).to_vector<float>(),
                                           wv.grad().to(Device::CPU).to_vector<float>()};
  };
  const cuda::GemmLtStats s0 = cuda::gemm_lt_stats();
  const auto first = step(w);
  const cuda::GemmLtStats s1 = cuda::gemm_lt_stats();
  EXPECT_EQ(s1.matmuls - s0.matmuls, 3u);
  EXPECT_EQ(s1.conversions - s0.conversions, 0u) << "a Linear's GEMM converted an operand itself";
  EXPECT_EQ(s1.kept_operands - s0.kept_operands, 6u);
  EXPECT_EQ(step(w), first);
  // new values into w (as the optimizer's update): its copy must not be read again
  const std::vector<float> w_new = random_vec(N * K, 24);
  w.data().copy_from(on_gpu(w_new, {N, K}));
  Variable fresh(on_gpu(w_new, {N, K}), true);
  const auto updated = step(w);
  EXPECT_NE(updated, first);
  EXPECT_EQ(updated, step(fresh)) << "a stale bf16 copy of w was read after w was written";
}

// A GEMM reading `t` (viewed [rows, cols]) under bf16 takes its kept copy (no conversion of it)
// and equals, bit for bit, the same GEMM on a fresh tensor with t's values that gemm_lt converts
// itself: the copy is exactly t rounded to bf16.
void expect_exact_kept_copy(const Tensor& t, int64_t rows, int64_t cols, const char* what) {
  SCOPED_TRACE(what);
  const int64_t N = 24;
  const Tensor w = Tensor::from_vector(random_vec(cols * N, 42), {cols, N}).to(Device::CUDA);
  Backend& be = backend(Device::CUDA);
  GemmDesc g;  // [rows, cols] x [cols, N]
  g.M = rows, g.N = N, g.K = cols;
  Tensor y = Tensor::empty({rows, N}, DType::F32, Device::CUDA), y_fresh = Tensor::empty({rows, N}, DType::F32, Device::CUDA);
  const cuda::GemmLtStats s0 = cuda::gemm_lt_stats();
  be.gemm(g, t, w, y);
  const cuda::GemmLtStats s1 = cuda::gemm_lt_stats();
  EXPECT_EQ(s1.kept_operands - s0.kept_operands, 1u) << "the GEMM did not read the kept copy";
  EXPECT_EQ(s1.conversions - s0.conversions, 1u) << "only w is converted";
  be.gemm(g, t.clone(), w, y_fresh);  // a fresh storage: no copy, converted by gemm_lt
  EXPECT_EQ(y.to(Device::CPU).to_vector<float>(), y_fresh.to(Device::CPU).to_vector<float>())
      << "the kept copy is not the tensor rounded to bf16";
}

// Kernels that write their output's bf16 copy in their own pass (kept_bf16_slot): the
// cross-entropy's backward (dlogits; the target's element after its -dloss, an ignored row's
// zeros), split_heads (q | k | v, one storage) and its backward (dqkv), merge_heads (the output
// projection's input) and its backward (the attention's dout), layer_norm's forward (the next
// Linear's input; both of its kernels) and the tanh GELU both ways (the MLP's inner activation
// and its gradient).
// Each copy is exact, and none was made by a conversion pass (kept_copy_stats).
TEST(CudaGemmLt, KernelsWriteTheirOutputsBf16Copies) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  const int64_t N = 13, V = 37;  // V odd: the one-element-a-thread kernel (GPT-2's 50257 too)
  auto on_gpu = [](const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s).to(Device::CUDA); };
  std::vector<int64_t> tg(N);
  for (int64_t n = 0; n < N; ++n) tg[n] = n == 5 ? -1 : (n * 7) % V;  // row 5 ignored
  const Tensor logits = on_gpu(random_vec(N * V, 41), {N, V});
  const Tensor targets = Tensor::from_vector(tg, {N}).to(Device::CUDA);
  const Tensor dloss = on_gpu(std::vector<float>(N, 1.0f / N), {N});
  Backend& be = backend(Device::CUDA);
  Tensor loss = Tensor::empty({N}, DType::F32, Device::CUDA), lse = Tensor::empty({N}, DType::F32, Device::CUDA);
  be.cross_entropy(logits, targets, loss, lse);
  PrecisionScope bf16(Precision::BF16);
  const cuda::KeptCopyStats k0 = cuda::kept_copy_stats();
  Tensor dz = Tensor::empty({N, V}, DType::F32, Device::CUDA);
  be.cross_entropy_backward(logits, targets, lse, dloss, dz);
  // split_heads: qkv [B, S, 3 H Dh] -> q, k, v [B, H, S, Dh], views of one storage as autograd makes them
  const int64_t B = 2, S = 5, H = 3, Dh = 8, D = H * Dh;
  const Tensor qkv = on_gpu(random_vec(B * S * 3 * D, 43), {B, S, 3 * D});
  Tensor flat = Tensor::empty({3 * B * H * S * Dh}, DType::F32, Device::CUDA);
  const int64_t n = B * H * S * Dh;
  Tensor q = flat.slice0(0, n).view({B, H, S, Dh}), k = flat.slice0(n, 2 * n).view({B, H, S, Dh}),
         v = flat.slice0(2 * n, 3 * n).view({B, H, S, Dh});
  be.split_heads(qkv, H, 0, q, k, v);
  // merge_heads' backward: dout [B, S, D] -> d_o [B, H, S, Dh]
  const Tensor dout = on_gpu(random_vec(B * S * D, 44), {B, S, D});
  Tensor d_o = Tensor::empty({B, H, S, Dh}, DType::F32, Device::CUDA);
  be.merge_heads_backward(dout, d_o);
  // layer_norm's forward, a row of the warp kernel (C <= 1024) and one of the block kernel
  Tensor ln_y[2];
  for (int i = 0; i < 2; ++i) {
    const int64_t C = i == 0 ? 40 : 1030;
    const Tensor x = on_gpu(random_vec(3 * C, 45 + i), {3, C}), w = on_gpu(random_vec(C, 47), {C}),
                 b = on_gpu(random_vec(C, 48), {C});
    Tensor mean = Tensor::empty({3}, DType::F32, Device::CUDA), rstd = Tensor::empty({3}, DType::F32, Device::CUDA);
    ln_y[i] = Tensor::empty({3, C}, DType::F32, Device::CUDA);
    be.layernorm(x, w, b, 1e-5, ln_y[i], mean, rstd);
  }
  // merge_heads' forward: o [B, H, S, Dh] -> merged [B, S, D] (the output projection's input)
  const Tensor o = on_gpu(random_vec(B * H * S * Dh, 49), {B, H, S, Dh});
  Tensor merged = Tensor::empty({B, S, D}, DType::F32, Device::CUDA);
  be.merge_heads(o, merged);
  // split_heads' backward: dq, dk, dv -> dqkv [B, S, 3D] (the QKV Linear's output gradient)
  Tensor dqkv = Tensor::empty({B, S, 3 * D}, DType::F32, Device::CUDA);
  be.split_heads_backward(on_gpu(random_vec(n, 50), {B, H, S, Dh}), on_gpu(random_vec(n, 51), {B, H, S, Dh}),
                          on_gpu(random_vec(n, 52), {B, H, S, Dh}), H, 0, dqkv);
  // the tanh GELU's output and input gradient (the MLP's inner activations); another unary op writes none
  const Tensor pre = on_gpu(random_vec(7 * 33, 53), {7, 33});
  Tensor h = Tensor::empty({7, 33}, DType::F32, Device::CUDA), dpre = Tensor::empty({7, 33}, DType::F32, Device::CUDA),
         ex = Tensor::empty({7, 33}, DType::F32, Device::CUDA);
  be.unary(UnaryOp::GeluTanh, pre, h);
  be.unary_backward(UnaryOp::GeluTanh, pre, Tensor(), on_gpu(random_vec(7 * 33, 54), {7, 33}), dpre);
  be.unary(UnaryOp::Exp, pre, ex);
  const cuda::KeptCopyStats k1 = cuda::kept_copy_stats();
  EXPECT_EQ(k1.written - k0.written, 9u)
      << "dlogits, q | k | v, d_o, two layer_norm outputs, merged, dqkv, GELU's output and input gradient";
  EXPECT_EQ(k1.converted - k0.converted, 0u);
  EXPECT_EQ(ex.storage()->bf16_copy.load(), nullptr) << "exp's output got a copy nobody reads";
  expect_exact_kept_copy(dz, N, V, "dlogits");
  for (const Tensor* t : {&q, &k, &v}) expect_exact_kept_copy(*t, B * H * S, Dh, "q | k | v");
  expect_exact_kept_copy(d_o, B * H * S, Dh, "merge_heads backward");
  expect_exact_kept_copy(ln_y[0], 3, 40, "layer_norm (warp kernel)");
  expect_exact_kept_copy(ln_y[1], 3, 1030, "layer_norm (block kernel)");
  expect_exact_kept_copy(merged, B * S, D, "merge_heads");
  expect_exact_kept_copy(dqkv, B * S, 3 * D, "split_heads backward");
  expect_exact_kept_copy(h, 7, 33, "GELU");
  expect_exact_kept_copy(dpre, 7, 33, "GELU backward");
}

// The flat AdamW under bf16 writes the parameters' bf16 copy with their update when its chunks cover
// the whole buffer: each weight (a view of the buffer) is then read from it by its GEMMs, exactly
// the rounding of the new values; with a gap between the chunks it writes none (the elements of
// the gap would have no rounding) and the old values' copy is gone.
TEST(CudaGemmLt, FlatAdamWWritesTheParametersBf16Copy) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  auto on_gpu = [](const std::vector<float>& v, const Shape& s) { return Tensor::from_vector(v, s).to(Device::CUDA); };
  const int64_t rows = 12, cols = 40, n = rows * cols;
  Backend& be = backend(Device::CUDA);
  PrecisionScope bf16(Precision::BF16);
  AdamWHyper h;
  h.lr = 0.05;
  for (bool gap : {false, true}) {
    SCOPED_TRACE(gap ? "chunks with a gap" : "chunks covering the buffer");
    Tensor p = on_gpu(random_vec(n, 60), {n}), m = on_gpu(std::vector<float>(n, 0.f), {n}),
           v = on_gpu(std::vector<float>(n, 0.f), {n});
    const Tensor g = on_gpu(random_vec(n, 61), {n});
    const std::vector<FlatChunk> chunks = {{0, 5 * cols, true}, {5 * cols + (gap ? 3 : 0), n, false}};
    Tensor w = p.view({rows, cols}).slice0(5, rows);  // a weight: a view of part of the buffer
    const cuda::KeptCopyStats k0 = cuda::kept_copy_stats();
    be.adamw_flat(p, g, m, v, chunks, h, Tensor());
    EXPECT_EQ(cuda::kept_copy_stats().written - k0.written, gap ? 0u : 1u);
    if (gap) {
      EXPECT_EQ(p.storage()->bf16_copy.load(), nullptr);
      continue;
    }
    expect_exact_kept_copy(w, rows - 5, cols, "a weight view after the update");
    expect_exact_kept_copy(p.view({rows, cols}), rows, cols, "the whole buffer");
    // the values as ref::adamw computes them (the update itself is unchanged by the copy)
    PrecisionScope fp32(Precision::FP32);
    Tensor pc = on_gpu(random_vec(n, 60), {n}).to(Device::CPU), mc = Tensor::zeros({n}), vc = Tensor::zeros({n});
    backend(Device::CPU).adamw_flat(pc, g.to(Device::CPU), mc, vc, chunks, h, Tensor());
    const auto got = p.to(Device::CPU).to_vector<float>(), want = pc.to_vector<float>();
    for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[(size_t)i], want[(size_t)i], 1e-6f) << i;
  }
}
#endif

// The backward writes dw straight into a preassigned gradient slot (the trainer's flat buffer),
// and adds into an existing gradient: the same values as the unfused composition, both ways.
TEST(LinearGradTarget, WritesTheSlotAndAccumulates) {
  const int64_t R = 6, K = 5, N = 4;
  for (Precision p : {Precision::FP32, Precision::BF16}) {
    PrecisionScope scope(p);
    Variable w(Tensor::from_vector(random_vec(N * K, 31), {N, K}), true);
    Variable b(Tensor::from_vector(random_vec(N, 32), {N}), true);
    Variable x(Tensor::from_vector(random_vec(R * K, 33), {R, K}), true);
    // two Linears share w and b: the second adds to the gradient the first wrote
    auto run = [&] { sum(mul(linear(x, w, b), linear(x, w, b))).backward(); };
    auto requests = [] { return BufferPool::host().stats().requests; };
    run();  // warm-up (one-time allocations out of the count)
    w.zero_grad(), b.zero_grad(), x.zero_grad();
    uint64_t r0 = requests();
    run();
    const uint64_t fresh = requests() - r0;
    const auto w1 = w.grad().to_vector<float>(), b1 = b.grad().to_vector<float>();
    // a slot with stale contents: overwritten, not added to
    Tensor slot_w = Tensor::full({N, K}, 7.0), slot_b = Tensor::full({N}, -3.0);
    w.zero_grad(), b.zero_grad();
    w.impl()->grad_slot = slot_w, b.impl()->grad_slot = slot_b;
    r0 = requests();
    run();
    EXPECT_EQ(requests() - r0 + 2, fresh) << "dw and db should be written into their slots, not allocated";
    EXPECT_EQ(w.grad().storage(), slot_w.storage()) << "dw not written into the slot";
    EXPECT_EQ(b.grad().storage(), slot_b.storage());
    EXPECT_EQ(w.grad().to_vector<float>(), w1);
    EXPECT_EQ(b.grad().to_vector<float>(), b1);
    run();  // a second backward without zero_grad adds
    const auto w2 = w.grad().to_vector<float>(), b2 = b.grad().to_vector<float>();
    for (size_t i = 0; i < w1.size(); ++i) EXPECT_NEAR(w2[i], 2 * w1[i], 1e-5f * (1 + std::fabs(w1[i])));
    for (size_t i = 0; i < b1.size(); ++i) EXPECT_NEAR(b2[i], 2 * b1[i], 1e-5f * (1 + std::fabs(b1[i])));
  }
}

}  // namespace
}  // namespace ctx

// hsum_tree_x4 (core/cpu/hsum.h) is four hsum_tree<float, 64> calls bit for bit: the GEMV's pass of
// four rows reduces its accumulators together.
TEST(Gemv, FourLaneSumsAtOnceAreFourTrees) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::uniform_int_distribution<int> e(-30, 30);
  for (int trial = 0; trial < 2000; ++trial) {
    alignas(64) float v[64];
    for (float& x : v) x = std::ldexp(u(rng), e(rng));  // magnitudes apart: the order shows
    float got[4];
    ctx::cpu::hsum_tree_x4(v, got);
    for (int r = 0; r < 4; ++r) ASSERT_EQ(got[r], (ctx::cpu::hsum_tree<float, 64>(v + 16 * r))) << trial << " row " << r;
  }
}
