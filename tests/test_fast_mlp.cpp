// tests/test_fast_mlp.cpp — the MLP fast paths: the vectorised tanh-GELU (core/cpu/gelu_fast.h)
// against the double-precision formula and the reference kernel, and the fused Linear node
// (autograd/ops_linear.cpp): f64 gradcheck, f32 fused == matmul + add on every GEMM.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/fast_paths.h"
#include "core/cpu/gelu_fast.h"
#include "core/cpu/gemm.h"
#include "core/cpu/onednn_ops.h"
#include "core/cpu/ref_kernels.h"
#include "core/threads.h"
#include "core/precision.h"
#include "core/rng.h"
#include "test_util.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/cuda_runtime.h"  // gemm_lt_stats
#endif

namespace ctx {
namespace {

// ---- GELU ----
// Which kernel this build's gelu_tanh_fast_f32 is: on a CPU with AVX2 + FMA it must be the vector
// one (the tests below would pass on the scalar loop too; this is what says the vector code ran).
// A build without -march=native (CTXLAB_NATIVE=OFF) compiles only the scalar loop: it then fails
// here unless CTXLAB_ALLOW_MISSING lists "avx2".
TEST(FastGelu, VectorKernelIsTheOneThatRuns) {
  const bool cpu_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  std::printf("CPU AVX2+FMA: %s, gelu_fast_isa(): %s\n", cpu_avx2 ? "yes" : "no", cpu::gelu_fast_isa());
  if (!cpu_avx2) {  // the machine cannot have it: the scalar loop is the right kernel
    EXPECT_STREQ(cpu::gelu_fast_isa(), "scalar");
    return;
  }
  CTX_REQUIRE_DEP("avx2", std::string(cpu::gelu_fast_isa()) == "avx2",
                  "the CPU has AVX2 + FMA but the vector GELU was not compiled (CTXLAB_NATIVE=OFF?)");
}

// The formula in double, written without the cancellation of 1 + tanh(u) and 1 - tanh(u)^2 for
// u << 0 (tanh rounds to -1 there even in double): 0.5 (1 + tanh u) = s = 1 / (1 + e),
// 0.5 (1 - tanh^2 u) = 2 s (1 - s), e = exp(-2u), 1 - s = e s.
double gelu_d(double x) {
  const double u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
  return x / (1 + std::exp(-2 * u));
}
double gelu_grad_d(double x) {
  const double k = 0.7978845608028654, u = k * (x + 0.044715 * x * x * x);
  const double e = std::exp(-2 * u), s = 1 / (1 + e), oms = std::isinf(e) ? 1.0 : e * s;
  return s + 2 * x * s * oms * k * (1 + 3 * 0.044715 * x * x);
}
double gelu_half_one_plus_tanh(double x) {  // the first term of gelu', s
  return 1 / (1 + std::exp(-2 * 0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// A float computation of u = c (x + a x^3) is off by ~|u| ulp, which moves e^(-2u) (hence the
// negative tail, y ~ x e^(-2u)) by ~|2u| ulp relative: the tolerance grows with |u|. Values
// below 1e-30 are compared absolutely (the f32 reference itself returns 0 there).
double gelu_tol(double x, double ref) {
  const double eps = std::numeric_limits<float>::epsilon();
  const double u = std::fabs(0.7978845608028654 * (x + 0.044715 * x * x * x));
  return 4 * eps * (1 + 2 * std::min(u, 100.0)) * std::fabs(ref) + 1e-30;
}

std::vector<float> gelu_inputs() {
  std::vector<float> x;
  for (int i = -200000; i <= 200000; ++i) x.push_back((float)(i * 1e-4));  // [-20, 20]
  for (int e = -40; e <= 38; ++e)  // tiny and large magnitudes
    for (float m : {1.f, 1.5f, 3.3f}) {
      x.push_back(m * std::pow(10.f, (float)e));
      x.push_back(-m * std::pow(10.f, (float)e));
    }
  Rng r(7);
  for (int i = 0; i < 10001; ++i) x.push_back((float)(3 * r.normal()));  // odd n: a tail of 8
  return x;
}

TEST(FastGelu, MatchesTheDoubleFormula) {
  ctx::init_threading();
  const std::vector<float> x = gelu_inputs();
  const int64_t n = (int64_t)x.size();
  std::vector<float> y(n), dy(n, 1.f), dx(n);
  cpu::gelu_tanh_fast_f32(x.data(), y.data(), n);
  cpu::gelu_tanh_backward_fast_f32(x.data(), dy.data(), dx.data(), n);
  double worst_y = 0, worst_g = 0, max_rel_core = 0;
  int64_t compared = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double xi = x[i], yr = gelu_d(xi), gr = gelu_grad_d(xi);
    if (!std::isfinite(yr)) continue;
    ++compared;
    const double ey = std::fabs(y[i] - yr), eg = std::fabs(dx[i] - gr);
    ASSERT_LE(ey, gelu_tol(xi, yr)) << "gelu(" << xi << ") = " << y[i] << ", expected " << yr;
    // The derivative crosses 0 near x = -0.75: there compare with the size of its two terms.
    const double gscale = gelu_half_one_plus_tanh(xi) + std::fabs(gr);
    ASSERT_LE(eg, gelu_tol(xi, gscale) + 1e-30)
        << "gelu'(" << xi << ") = " << dx[i] << ", expected " << gr;
    worst_y = std::max(worst_y, ey / std::max(std::fabs(yr), 1e-30));
    worst_g = std::max(worst_g, eg / std::max(gscale, 1e-30));
    if (std::fabs(xi) <= 3 && std::fabs(xi) > 1e-30)
      max_rel_core = std::max(max_rel_core, std::max(ey / std::fabs(yr), eg / gscale));
  }
  // Where the model's activations live, the relative error is ~1 ulp (documented: 1e-6).
  EXPECT_LT(max_rel_core, 1e-6);
  EXPECT_GT(compared, n - 20) << "the double formula overflowed for too many inputs";
  std::printf("fast gelu (%s): max rel err y %.2e, y' %.2e; |x| <= 3: %.2e\n", cpu::gelu_fast_isa(),
              worst_y, worst_g, max_rel_core);
}

TEST(FastGelu, MatchesTheReferenceKernelAndSpecialValues) {
  const std::vector<float> x = gelu_inputs();
  const int64_t n = (int64_t)x.size();
  Rng r(8);
  std::vector<float> dy(n);
  for (auto& v : dy) v = (float)r.normal();
  std::vector<float> y(n), yr(n), dx(n), dxr(n);
  cpu::gelu_tanh_fast_f32(x.data(), y.data(), n);
  cpu::gelu_tanh_backward_fast_f32(x.data(), dy.data(), dx.data(), n);
  cpu::ref::unary<float>(UnaryOp::GeluTanh, x.data(), yr.data(), n, 0.f, 0.f);
  cpu::ref::unary_backward<float>(UnaryOp::GeluTanh, x.data(), nullptr, dy.data(), dxr.data(), n, 0.f, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(yr[i]) || std::fabs(x[i]) > 1e4) continue;  // the reference overflows x^3
    // The f32 reference cancels in 1 + tanh(u) for x < 0: absolute error ~eps there.
    ASSERT_NEAR(y[i], yr[i], 1e-6 * std::max(1.f, std::fabs(yr[i]))) << "x = " << x[i];
    ASSERT_NEAR(dx[i], dxr[i], 2e-6 * std::max(1.f, std::fabs(dy[i]))) << "x = " << x[i];
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  const std::vector<float> s = {0.f, -0.f, 1e30f, -1e30f, 3e38f, -3e38f, inf, nan, 1e-40f, -1e-40f};
  std::vector<float> sy(s.size()), sd(s.size()), ones(s.size(), 1.f);
  cpu::gelu_tanh_fast_f32(s.data(), sy.data(), (int64_t)s.size());
  cpu::gelu_tanh_backward_fast_f32(s.data(), ones.data(), sd.data(), (int64_t)s.size());
  EXPECT_EQ(sy[0], 0.f);
  EXPECT_EQ(sd[0], 0.5f);
  EXPECT_EQ(sy[1], 0.f);
  EXPECT_EQ(sy[2], 1e30f);   // gelu(large) = x
  EXPECT_EQ(sd[2], 1.f);
  EXPECT_EQ(sy[3], 0.f);     // gelu(-large) = -0
  EXPECT_TRUE(std::signbit(sy[3]));
  EXPECT_EQ(sd[3], 0.f);
  EXPECT_EQ(sy[4], 3e38f);
  EXPECT_EQ(sy[5], 0.f);
  EXPECT_EQ(sy[6], inf);
  EXPECT_EQ(sd[6], 1.f);
  EXPECT_TRUE(std::isnan(sy[7]));  // NaN passes through, forward and backward
  EXPECT_TRUE(std::isnan(sd[7]));
  EXPECT_FLOAT_EQ(sy[8], 0.5f * 1e-40f);
  EXPECT_EQ(sd[8], 0.5f);
}

TEST(FastGelu, BackendUsesTheChosenImplementationAndTheTailIsSame) {
  // Every length 0..40 (all tail sizes), through the backend: equal to the fast kernel or oneDNN.
  for (int64_t n = 1; n <= 40; ++n) {
    Tensor x = Tensor::empty({n});
    Rng r((uint64_t)n);
    r.fill_normal(x, 0, 3);
    Variable y = gelu_tanh(Variable(x));
    std::vector<float> ref(n), chosen(n);
    cpu::ref::unary<float>(UnaryOp::GeluTanh, x.data<float>(), ref.data(), n, 0.f, 0.f);
    // The backend's output is bit for bit the kernel gelu_impl() names (oneDNN may decline a
    // case: then the fast kernel, as cpu_backend.cpp falls back).
    const cpu::GeluImpl gi = cpu::gelu_impl(false);
    if (gi == cpu::GeluImpl::Reference) {
      chosen = ref;
    } else if (gi != cpu::GeluImpl::OneDNN || !cpu::onednn_gelu_tanh_f32(x.data<float>(), chosen.data(), n)) {
      cpu::gelu_tanh_fast_f32(x.data<float>(), chosen.data(), n);
    }
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y.data().at(i), chosen[i]) << "n " << n << " element " << i << ", impl " << (int)gi;
      ASSERT_NEAR(y.data().at(i), ref[i], 1e-6 * std::max(1.f, std::fabs(ref[i]))) << n << " " << i;
    }
  }
}

// ---- fused Linear ----
TEST(FusedLinear, GradcheckF64) {
  set_fast_path(FastPath::Linear, true);
  Rng r(11);
  for (const Shape& xs : {Shape{5, 4}, Shape{2, 3, 4}}) {
    Tensor x = Tensor::empty(xs, DType::F64), w = Tensor::empty({6, 4}, DType::F64),
           b = Tensor::empty({6}, DType::F64);
    r.fill_normal(x, 0, 1);
    r.fill_normal(w, 0, 1);
    r.fill_normal(b, 0, 1);
    auto res = gradcheck(
        [](const std::vector<Variable>& v) { return linear(v[0], v[1], v[2]); },
        {x, w, b}, {"x", "weight", "bias"});
    EXPECT_TRUE(res.pass) << res.summary();
    EXPECT_EQ(linear(Variable(x, true), Variable(w), Variable(b)).op_name(), "linear");
  }
  reset_fast_path(FastPath::Linear);
}

struct LinearOut {
  Tensor y, dx, dw, db;
};
LinearOut run_linear(bool fused, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g) {
  set_fast_path(FastPath::Linear, fused);
  Variable xv(x.clone(), true), wv(w.clone(), true), bv(b.clone(), true);
  Variable y = linear(xv, wv, bv);
  EXPECT_EQ(y.op_name(), fused ? "linear" : "add");
  Variable l = sum(mul(y, Variable(g)));
  l.backward();
  reset_fast_path(FastPath::Linear);
  return {y.data(), xv.grad(), wv.grad(), bv.grad()};
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i)
    ASSERT_NEAR(a.at(i), b.at(i), tol * (1 + std::fabs(b.at(i)))) << what << " at " << i;
}

TEST(FusedLinear, F32FusedEqualsMatmulPlusAddOnEveryGemm) {
  CTX_REQUIRE_DEP("openblas", cpu::openblas_available(), cpu::openblas_config());
  Rng r(12);
  for (auto impl : {cpu::GemmImpl::OneDNN, cpu::GemmImpl::OpenBLAS, cpu::GemmImpl::Reference}) {
    cpu::set_gemm_impl(impl);
    for (const Shape& xs : {Shape{1, 3}, Shape{37, 65}, Shape{4, 64, 96}, Shape{0, 8}}) {
      SCOPED_TRACE(testing::Message() << cpu::gemm_impl_name(impl) << " " << shape_str(xs));
      const int64_t K = xs.back(), N = 2 * K + 1;
      Tensor x = Tensor::empty(xs), w = Tensor::empty({N, K}), b = Tensor::empty({N});
      r.fill_normal(x, 0, 1);
      r.fill_normal(w, 0, 0.2);
      r.fill_normal(b, 0, 1);
      Shape ys = xs;
      ys.back() = N;
      Tensor g = Tensor::empty(ys);
      r.fill_normal(g, 0, 1);
      LinearOut f = run_linear(true, x, w, b, g), u = run_linear(false, x, w, b, g);
      expect_close(f.y, u.y, 1e-5, "y");
      if (x.numel() == 0) continue;
      expect_close(f.dx, u.dx, 1e-5, "dx");
      expect_close(f.dw, u.dw, 1e-4, "dw");
      expect_close(f.db, u.db, 1e-4, "db");
    }
  }
  cpu::reset_gemm_impl();
}

TEST(FusedLinear, WithoutBiasIsMatmulAndShapeErrorsAreReported) {
  Tensor x = Tensor::zeros({2, 3}), w = Tensor::zeros({4, 3}), b = Tensor::zeros({5});
  EXPECT_EQ(linear(Variable(x, true), Variable(w)).op_name(), "matmul");
  EXPECT_THROW(linear(Variable(x, true), Variable(w), Variable(b)), Error);
  EXPECT_THROW(linear(Variable(x, true), Variable(Tensor::zeros({4, 2})), Variable()), Error);
}

// ---- the MLP node: mlp_gelu = linear(gelu_tanh(linear(x, w1, b1)), w2, b2) as one node ----
struct MlpInputs {
  Tensor x, w1, b1, w2, b2;
};
MlpInputs mlp_inputs(DType dt, const Shape& xs, int64_t F, uint64_t seed) {
  Rng r(seed);
  const int64_t C = xs.back();
  MlpInputs in{Tensor::empty(xs, dt), Tensor::empty({F, C}, dt), Tensor::empty({F}, dt), Tensor::empty({C, F}, dt),
               Tensor::empty({C}, dt)};
  for (Tensor* t : {&in.x, &in.w1, &in.b1, &in.w2, &in.b2}) r.fill_normal(*t, 0, 0.7);
  return in;
}

TEST(FusedMlp, GradcheckF64WithEveryInputOrSome) {
  set_fast_path(FastPath::Linear, true);
  set_fast_path(FastPath::MlpGelu, true);  // (opt-in)
  for (const Shape& xs : {Shape{5, 4}, Shape{2, 3, 4}}) {
    const MlpInputs in = mlp_inputs(DType::F64, xs, 6, 21);
    auto all = gradcheck([](const std::vector<Variable>& v) { return mlp_gelu(v[0], v[1], v[2], v[3], v[4]); },
                         {in.x, in.w1, in.b1, in.w2, in.b2}, {"x", "w1", "b1", "w2", "b2"});
    EXPECT_TRUE(all.pass) << all.summary();
    // only x and w2 (b1 without a gradient: dpre with no bias gradient), then only b1
    auto some = gradcheck(
        [&](const std::vector<Variable>& v) {
          return mlp_gelu(v[0], Variable(in.w1), Variable(in.b1), v[1], Variable(in.b2));
        },
        {in.x, in.w2}, {"x", "w2"});
    EXPECT_TRUE(some.pass) << some.summary();
    auto bias_only = gradcheck(
        [&](const std::vector<Variable>& v) {
          return mlp_gelu(Variable(in.x), Variable(in.w1), v[0], Variable(in.w2), Variable(in.b2));
        },
        {in.b1}, {"b1"});
    EXPECT_TRUE(bias_only.pass) << bias_only.summary();
    EXPECT_EQ(mlp_gelu(Variable(in.x, true), Variable(in.w1), Variable(in.b1), Variable(in.w2), Variable(in.b2))
                  .op_name(),
              "mlp_gelu");
  }
  reset_fast_path(FastPath::Linear);
  reset_fast_path(FastPath::MlpGelu);
}

// The node against its composition (linear, gelu_tanh, linear), forward and every gradient, on
// `dev` (inputs copied there, results compared on the host) under precision `p`; with the switch
// off (CTXLAB_FUSED_MLP's default) it is that composition. Returns the largest relative difference.
double node_vs_composition(Device dev, Precision p, double tol) {
  const MlpInputs in = mlp_inputs(DType::F32, {3, 17, 24}, 40, 22);
  Rng r(23);
  Tensor g = Tensor::empty({3, 17, 24});
  r.fill_normal(g, 0, 1);
  PrecisionScope scope(p);
  auto run = [&](bool fused) {
    set_fast_path(FastPath::MlpGelu, fused);
    std::vector<Variable> v;
    for (const Tensor* t : {&in.x, &in.w1, &in.b1, &in.w2, &in.b2}) v.emplace_back(t->to(dev), true);
    Variable y = mlp_gelu(v[0], v[1], v[2], v[3], v[4]);
    EXPECT_EQ(y.op_name(), fused ? "mlp_gelu" : "linear");
    sum(mul(y, Variable(g.to(dev)))).backward();
    reset_fast_path(FastPath::MlpGelu);
    std::vector<Tensor> out{y.data().to(Device::CPU)};
    for (const Variable& x : v) out.push_back(x.grad().to(Device::CPU));
    return out;
  };
  const std::vector<Tensor> f = run(true), u = run(false);
  const char* what[] = {"y", "dx", "dw1", "db1", "dw2", "db2"};
  double worst = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    expect_close(f[i], u[i], tol, what[i]);
    for (int64_t e = 0; e < f[i].numel(); ++e)
      worst = std::max(worst, std::fabs(f[i].at(e) - u[i].at(e)) / (1 + std::fabs(u[i].at(e))));
  }
  return worst;
}

TEST(FusedMlp, F32NodeEqualsTheComposition) {
  node_vs_composition(Device::CPU, Precision::FP32, 2e-5);
  const MlpInputs in = mlp_inputs(DType::F32, {2, 4}, 6, 1);
  EXPECT_THROW(mlp_gelu(Variable(in.x), Variable(in.w1), Variable(in.b1), Variable(in.w1), Variable(in.b2)), Error)
      << "w2 of the wrong shape";
}

#ifdef CTXLAB_WITH_CUDA
// On CUDA under --precision bf16 the node runs cuBLASLt's GELU epilogues (counted): the same
// bf16 products as the composition, so equal to the GELU approximation the library may use.
TEST(FusedMlp, CudaBf16NodeRunsTheEpiloguesAndMatchesTheComposition) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  const uint64_t before = cuda::gemm_lt_stats().gelu_epilogues;
  const double worst = node_vs_composition(Device::CUDA, Precision::BF16, 3e-3);
  EXPECT_EQ(cuda::gemm_lt_stats().gelu_epilogues - before, 2u) << "GELU_AUX_BIAS forward, DGELU backward";
  std::printf("mlp_gelu on cuda (bf16): largest relative difference from the composition %.3g\n", worst);
}
#endif

}  // namespace
}  // namespace ctx
