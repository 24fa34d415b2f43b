// tests/test_f32_reference.cpp — the CPU backend's f32 results (forward and backward) agree
// with the f64 reference of the same op within f32 tolerance, for the ops whose f32 paths may
// later route to oneDNN or hand-vectorised kernels: softmax / log-softmax, layer norm, RMS norm,
// cross-entropy and GELU. Shapes cover odd widths, single columns and rows big enough to take
// the OpenMP paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "core/rng.h"
#include "core/threads.h"

using namespace ctx;

namespace {

constexpr double kAtol = 2e-5, kRtol = 2e-4;

Tensor uniform64(Rng& r, const Shape& s, double lo, double hi) {
  Tensor t = Tensor::empty(s, DType::F64);
  r.fill_uniform(t, lo, hi);
  return t;
}

// Worst |f32 - f64| against atol + rtol |f64|; the f64 tensor is the reference.
void expect_close(const Tensor& got32, const Tensor& ref64, const std::string& what, double atol = kAtol) {
  ASSERT_EQ(got32.dtype(), DType::F32) << what;
  ASSERT_EQ(got32.shape(), ref64.shape()) << what;
  int64_t bad = 0, worst = -1;
  double worst_excess = -INFINITY;
  for (int64_t i = 0; i < ref64.numel(); ++i) {
    double a = got32.at(i), b = ref64.at(i);
    double excess = std::fabs(a - b) - (atol + kRtol * std::fabs(b));
    if (!std::isfinite(a) && !(std::isinf(a) && a == b)) excess = INFINITY;
    if (excess > worst_excess) worst_excess = excess, worst = i;
    bad += excess > 0;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << ref64.numel() << " elements off; worst at " << worst
                    << ": f32 " << got32.at(worst) << " vs f64 " << ref64.at(worst);
}

// Runs f on f64 leaves and on their f32 copies, compares outputs, then backpropagates the same
// seed through both and compares every input gradient.
using Fn = std::function<Variable(const std::vector<Variable>&)>;
void compare_f32_f64(const Fn& f, const std::vector<Tensor>& in64, const std::string& what, double atol = kAtol) {
  std::vector<Variable> v64, v32;
  for (auto& t : in64) {
    v64.emplace_back(t.clone(), true);
    v32.emplace_back(t.to(DType::F32), true);
  }
  Variable y64 = f(v64), y32 = f(v32);
  ASSERT_EQ(y32.dtype(), DType::F32) << what;
  expect_close(y32.data(), y64.data(), what + " forward", atol);
  Rng r(1);
  Tensor g64 = uniform64(r, y64.shape(), -1, 1);
  y64.backward(g64);
  y32.backward(g64.to(DType::F32));
  for (size_t i = 0; i < in64.size(); ++i)
    expect_close(v32[i].grad(), v64[i].grad(), what + " grad of input " + std::to_string(i), atol);
}

const std::vector<Shape> kRowShapes = {{1, 1}, {5, 1}, {3, 7}, {4, 64}, {33, 129}, {2, 3, 1000}, {40, 513}};

TEST(F32Reference, Softmax) {
  Rng r(1);
  for (auto& s : kRowShapes) {
    Tensor x = uniform64(r, s, -8, 8);
    compare_f32_f64([](const std::vector<Variable>& v) { return softmax(v[0]); }, {x}, "softmax " + shape_str(s));
    compare_f32_f64([](const std::vector<Variable>& v) { return log_softmax(v[0]); }, {x},
                    "log_softmax " + shape_str(s));
  }
  // large logits (max subtraction) and a row with -inf entries (causal mask)
  Tensor big = uniform64(r, {3, 17}, 300, 400);
  compare_f32_f64([](const std::vector<Variable>& v) { return softmax(v[0]); }, {big}, "softmax large");
  Tensor sq = uniform64(r, {2, 9, 9}, -4, 4);
  compare_f32_f64([](const std::vector<Variable>& v) { return softmax(causal_mask(v[0])); }, {sq},
                  "softmax(causal_mask)");
}

TEST(F32Reference, LayerNorm) {
  Rng r(2);
  for (auto& s : kRowShapes) {
    const int64_t C = s.back();
    Tensor x = uniform64(r, s, -3, 3), w = uniform64(r, {C}, 0.5, 1.5), b = uniform64(r, {C}, -1, 1);
    compare_f32_f64([](const std::vector<Variable>& v) { return layer_norm(v[0], v[1], v[2], 1e-5); }, {x, w, b},
                    "layer_norm " + shape_str(s));
    // A large common offset (mean 300, std ~1.7): a float row sum carries an error of about
    // sqrt(C) * eps * |sum|, so the mean is only good to ~1e-4 here and the tolerance is looser;
    // computing the variance as E[x^2] - E[x]^2 in f32 would be off by ~1e-1 and still fail.
    Tensor xo = x.clone();
    for (int64_t i = 0; i < xo.numel(); ++i) xo.set(i, xo.at(i) + 300.0);
    compare_f32_f64([](const std::vector<Variable>& v) { return layer_norm(v[0], v[1], Variable(), 1e-5); },
                    {xo, w}, "layer_norm (no bias, offset 300) " + shape_str(s), 1e-3);
  }
}

TEST(F32Reference, RmsNorm) {
  Rng r(3);
  for (auto& s : kRowShapes) {
    const int64_t C = s.back();
    Tensor x = uniform64(r, s, -3, 3), w = uniform64(r, {C}, 0.5, 1.5);
    for (int64_t i = 0; i < x.numel(); ++i)  // keep C = 1 rows away from 0 (rstd ~ 1/sqrt(eps))
      if (std::fabs(x.at(i)) < 0.1) x.set(i, 0.1);
    compare_f32_f64([](const std::vector<Variable>& v) { return rms_norm(v[0], v[1], 1e-5); }, {x, w},
                    "rms_norm " + shape_str(s));
  }
}

template <class I>
void check_cross_entropy_f32(uint64_t seed) {
  Rng r(seed);
  for (auto [N, V] : std::vector<std::pair<int64_t, int64_t>>{{1, 2}, {5, 1}, {7, 13}, {16, 1000}, {64, 257}}) {
    Tensor z = uniform64(r, {N, V}, -6, 6);
    std::vector<I> t;
    for (int64_t n = 0; n < N; ++n) t.push_back((I)r.below(V));
    if (N > 1) t[1] = -1;  // ignored row
    Tensor tt = Tensor::from_vector<I>(t, {N});
    compare_f32_f64([tt](const std::vector<Variable>& v) { return cross_entropy(v[0], tt); }, {z},
                    "cross_entropy [" + std::to_string(N) + ", " + std::to_string(V) + "] " + tt.str());
  }
}
TEST(F32Reference, CrossEntropyI32) { check_cross_entropy_f32<int32_t>(4); }
TEST(F32Reference, CrossEntropyI64) { check_cross_entropy_f32<int64_t>(5); }

TEST(F32Reference, GeluTanh) {
  Rng r(6);
  for (auto& s : std::vector<Shape>{{1}, {7}, {3, 129}, {300, 301}}) {
    Tensor x = uniform64(r, s, -6, 6);
    compare_f32_f64([](const std::vector<Variable>& v) { return gelu_tanh(v[0]); }, {x}, "gelu_tanh " + shape_str(s));
  }
  // fixed points: gelu(0) = 0, gelu(large) = x, gelu(-large) = 0
  Tensor p = Tensor::from_vector<float>({0.f, 10.f, -10.f, 1.f}, {4});
  Variable y = gelu_tanh(Variable(p));
  EXPECT_EQ(y.data().at(0), 0.0);
  EXPECT_NEAR(y.data().at(1), 10.0, 1e-5);
  EXPECT_NEAR(y.data().at(2), 0.0, 1e-5);
  EXPECT_NEAR(y.data().at(3), 0.8411919906082768, 1e-6);  // PyTorch gelu(1, approximate='tanh')
}

}  // namespace

// Gradients reduced over rows (norm weights, biases) combine per-thread partial sums in thread
// order: the same bits on every run at any thread count (an `omp critical` add is not, from 3
// threads on). Large enough to take the parallel paths.
TEST(Determinism, RowReductionsRepeatBitForBitAtThreeThreads) {
  const int saved = ctx::num_threads();
  ctx::set_num_threads(3);
  Rng r(77);
  const int64_t N = 4099, C = 64;
  Tensor x = Tensor::empty({N, C});
  r.fill_normal(x, 0.0, 1.0);
  Tensor w = Tensor::empty({C}), seed = Tensor::empty({N, C});
  r.fill_normal(w, 1.0, 0.1);
  r.fill_normal(seed, 0.0, 1.0);
  auto grads = [&] {
    Variable xv(x, true), wv(w, true), bv(Tensor::zeros({C}), true);
    Variable y = layer_norm(xv, wv, bv, 1e-5) + rms_norm(xv, wv, 1e-5);
    Variable s = sum(xv * Variable(seed, false), {0});  // [N, C] -> [C]
    (sum(y * Variable(seed, false)) + sum(s * s)).backward();
    return std::vector<Tensor>{wv.grad().clone(), bv.grad().clone(), xv.grad().clone()};
  };
  auto a = grads();
  for (int rep = 0; rep < 5; ++rep) {
    auto b = grads();
    for (size_t k = 0; k < a.size(); ++k)
      ASSERT_EQ(0, std::memcmp(a[k].data<float>(), b[k].data<float>(), a[k].numel() * sizeof(float))) << k;
  }
  ctx::set_num_threads(saved);
}
