// tests/test_ops_gradcheck.cpp — finite-difference gradchecks (f64, PyTorch defaults: eps 1e-6,
// atol 1e-5, rtol 1e-3) for every differentiable op of autograd/ops.h, with seeded random shapes
// that include size-1 and odd dims, plus the autograd engine itself (accumulation, reuse,
// NoGradGuard, freed graphs, retain_graph). Small shapes: the whole file runs in about a second.
#include <gtest/gtest.h>
#include "core/allocator.h"

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/backend.h"
#include "core/fast_paths.h"
#include "core/cpu/dropout_simd.h"
#include "core/rng.h"

using namespace ctx;

namespace {

using Vars = std::vector<Variable>;

// gradcheck + assert, failure message = the per-input summary.
#define GRADCHECK(...)                                \
  do {                                                \
    GradcheckResult res_ = gradcheck(__VA_ARGS__);    \
    ASSERT_TRUE(res_.pass) << res_.summary();         \
  } while (0)

// The odd / size-1 dims every test draws its shapes from.
int64_t odd_dim(Rng& r) {
  static const int64_t kDims[] = {1, 3, 5, 7};
  return kDims[r.below(4)];
}
// Small dims for batch-like axes (keeps 4-D cases cheap).
int64_t small_dim(Rng& r) {
  static const int64_t kDims[] = {1, 2, 3};
  return kDims[r.below(3)];
}

Tensor uniform(Rng& r, const Shape& s, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(s, DType::F64);
  r.fill_uniform(t, lo, hi);
  return t;
}
// Values with |x| in [lo, hi] and a random sign (keeps away from 0: relu, division).
Tensor away_from_zero(Rng& r, const Shape& s, double lo = 0.2, double hi = 1.5) {
  Tensor t = uniform(r, s, lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i)
    if (r.uniform() < 0.5) t.set(i, -t.at(i));
  return t;
}
template <class I>
Tensor index_tensor(const std::vector<I>& v, const Shape& s) {
  return Tensor::from_vector<I>(v, s);
}
std::string S(const Shape& s) { return shape_str(s); }

// ------------------------------------------------------------------ elementwise binary ----

// (a, b) shape pairs: same shape, trailing-dim broadcast, leading [1, c] / [r, 1], both sides
// broadcasting, scalar-shaped, 3-D against 2-D.
std::vector<std::pair<Shape, Shape>> binary_cases(Rng& r) {
  std::vector<std::pair<Shape, Shape>> cases;
  for (int trial = 0; trial < 2; ++trial) {
    int64_t R = odd_dim(r), C = odd_dim(r), B = small_dim(r);
    if (trial == 0) R = 3, C = 5;  // the canonical [3, 5] cases
    std::vector<std::pair<Shape, Shape>> c = {
        {{R, C}, {R, C}}, {{R, C}, {C}},    {{C}, {R, C}},    {{R, C}, {1, C}},
        {{R, C}, {R, 1}}, {{1, C}, {R, C}}, {{R, 1}, {1, C}}, {{R, C}, {}},
        {{}, {R, C}},     {{}, {}},         {{B, R, C}, {R, 1}}, {{1}, {B, R, C}},
    };
    cases.insert(cases.end(), c.begin(), c.end());
  }
  return cases;
}

void check_binary(Variable (*op)(const Variable&, const Variable&), bool b_nonzero, uint64_t seed) {
  Rng r(seed);
  for (auto& [sa, sb] : binary_cases(r)) {
    SCOPED_TRACE(S(sa) + " op " + S(sb));
    Tensor a = uniform(r, sa), b = b_nonzero ? away_from_zero(r, sb, 0.5, 1.5) : uniform(r, sb);
    GRADCHECK([op](const Vars& v) { return op(v[0], v[1]); }, {a, b}, {"a", "b"});
    // one side constant: the other still gets its (reduced) gradient
    GRADCHECK([op](const Vars& v) { return op(v[0], v[1]); }, {a, b}, {"a", "-"});
    GRADCHECK([op](const Vars& v) { return op(v[0], v[1]); }, {a, b}, {"-", "b"});
  }
}

TEST(GradcheckOps, Add) { check_binary(&add, false, 1); }
TEST(GradcheckOps, Sub) { check_binary(&sub, false, 2); }
TEST(GradcheckOps, Mul) { check_binary(&mul, false, 3); }
TEST(GradcheckOps, Div) { check_binary(&div, true, 4); }

TEST(GradcheckOps, BinaryOperatorsAndSameVariable) {
  Rng r(5);
  Tensor a = uniform(r, {odd_dim(r), odd_dim(r)});
  Tensor b = away_from_zero(r, a.shape(), 0.5, 1.5);
  GRADCHECK([](const Vars& v) { return (v[0] + v[1]) * v[0] - v[1] / v[0]; }, {b, b.clone()});
  // x op x: both operand slots accumulate into the same leaf
  GRADCHECK([](const Vars& v) { return add(v[0], v[0]); }, {a});
  GRADCHECK([](const Vars& v) { return mul(v[0], v[0]); }, {a});
  GRADCHECK([](const Vars& v) { return div(v[0], v[0]); }, {b});
  GRADCHECK([](const Vars& v) { return sub(v[0], v[0]); }, {a});
}

// ------------------------------------------------------------------- elementwise unary ----

struct UnaryCase {
  const char* name;
  std::function<Variable(const Variable&)> f;
  double lo, hi;       // input range
  bool away_from_zero;  // |x| in [lo, hi], random sign
};

void check_unary(const UnaryCase& c, uint64_t seed) {
  Rng r(seed);
  for (int trial = 0; trial < 3; ++trial) {
    Shape s;
    int64_t nd = 1 + (int64_t)r.below(3);
    for (int64_t i = 0; i < nd; ++i) s.push_back(odd_dim(r));
    if (trial == 2) s = {};  // scalar-shaped
    SCOPED_TRACE(std::string(c.name) + " " + S(s));
    Tensor x = c.away_from_zero ? away_from_zero(r, s, c.lo, c.hi) : uniform(r, s, c.lo, c.hi);
    auto f = c.f;
    GRADCHECK([f](const Vars& v) { return f(v[0]); }, {x}, {c.name});
  }
}

TEST(GradcheckOps, Neg) { check_unary({"neg", [](const Variable& x) { return neg(x); }, -2, 2, false}, 10); }
TEST(GradcheckOps, Scale) {
  check_unary({"scale", [](const Variable& x) { return scale(x, -2.5); }, -2, 2, false}, 11);
}
TEST(GradcheckOps, AddScalar) {
  check_unary({"add_scalar", [](const Variable& x) { return add_scalar(x, 0.75); }, -2, 2, false}, 12);
}
TEST(GradcheckOps, Exp) { check_unary({"exp", [](const Variable& x) { return exp(x); }, -2, 2, false}, 13); }
TEST(GradcheckOps, Log) { check_unary({"log", [](const Variable& x) { return log(x); }, 0.3, 3, false}, 14); }
TEST(GradcheckOps, Tanh) { check_unary({"tanh", [](const Variable& x) { return tanh(x); }, -2, 2, false}, 15); }
TEST(GradcheckOps, Sin) { check_unary({"sin", [](const Variable& x) { return sin(x); }, -3, 3, false}, 16); }
TEST(GradcheckOps, Cos) { check_unary({"cos", [](const Variable& x) { return cos(x); }, -3, 3, false}, 17); }
TEST(GradcheckOps, Sqrt) { check_unary({"sqrt", [](const Variable& x) { return sqrt(x); }, 0.3, 3, false}, 18); }
TEST(GradcheckOps, Square) {
  check_unary({"square", [](const Variable& x) { return square(x); }, -2, 2, false}, 19);
}
TEST(GradcheckOps, Relu) {  // |x| >= 0.1: never within eps of the kink
  check_unary({"relu", [](const Variable& x) { return relu(x); }, 0.1, 2, true}, 20);
}
TEST(GradcheckOps, GeluTanh) {
  check_unary({"gelu_tanh", [](const Variable& x) { return gelu_tanh(x); }, -4, 4, false}, 21);
}
TEST(GradcheckOps, Pow) {  // positive base, fractional (and negative) exponents
  check_unary({"pow1.7", [](const Variable& x) { return pow(x, 1.7); }, 0.3, 2.5, false}, 22);
  check_unary({"pow0.5", [](const Variable& x) { return pow(x, 0.5); }, 0.3, 2.5, false}, 23);
  check_unary({"pow-1.3", [](const Variable& x) { return pow(x, -1.3); }, 0.3, 2.5, false}, 24);
  check_unary({"pow3", [](const Variable& x) { return pow(x, 3.0); }, -2, 2, false}, 25);
}

TEST(GradcheckOps, Clamp) {
  Rng r(26);
  const double lo = -0.4, hi = 0.6;
  for (int trial = 0; trial < 3; ++trial) {
    Shape s = {odd_dim(r), odd_dim(r)};
    SCOPED_TRACE(S(s));
    Tensor x = uniform(r, s, -1.5, 1.5);
    for (int64_t i = 0; i < x.numel(); ++i)  // keep every value >= 0.05 away from lo and hi
      for (double bound : {lo, hi})
        if (std::fabs(x.at(i) - bound) < 0.05) x.set(i, bound + (x.at(i) < bound ? -0.05 : 0.05));
    GRADCHECK([=](const Vars& v) { return clamp(v[0], lo, hi); }, {x});
    // gradient is exactly 1 inside, 0 outside
    Variable xv(x, true);
    sum(clamp(xv, lo, hi)).backward();
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(xv.grad().at(i), (x.at(i) > lo && x.at(i) < hi) ? 1.0 : 0.0) << "element " << i;
  }
}

// At a bound the derivative is undefined; ctxlab passes the gradient on the closed interval
// [lo, hi] (subgradient 1 at both bounds, and at x = lo = hi): PyTorch's rule from 2018 (#7049)
// through the releases the reference code was written against, and the rule POSENC_SPEC §7.2 asks
// of CoPE's clamp. PyTorch 2.15 (tests/python's torch) gives 0 at scalar bounds instead (the
// minimum-norm subgradient, #184574): docs/ops.md. Finite differences cannot check this: a
// central difference at a kink gives 0.5, hence the exact values.
TEST(GradcheckOps, ClampGradientAtTheBounds) {
  for (DType dt : {DType::F64, DType::F32}) {
    SCOPED_TRACE(dtype_name(dt));
    const double lo = -0.4, hi = 0.6;  // not representable: x and the bounds round alike to dt
    auto next = [dt](double v, double to) {  // the neighbour of v in dt, towards `to`
      return dt == DType::F64 ? std::nextafter(v, to) : (double)std::nextafter((float)v, (float)to);
    };
    const double below = next(lo, -1), above = next(hi, 1);
    Tensor x = Tensor::from_vector<double>({lo, hi, below, above, 0.1, -3.0, 3.0}, {7}).to(dt);
    const std::vector<double> want = {1, 1, 0, 0, 1, 0, 0};
    Variable xv(x, true);
    Variable y = clamp(xv, lo, hi);
    EXPECT_EQ(y.data().at(0), x.at(0)) << "clamp(lo) is lo";
    EXPECT_EQ(y.data().at(1), x.at(1)) << "clamp(hi) is hi";
    sum(y).backward();
    for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(xv.grad().at(i), want[(size_t)i]) << "x = " << x.at(i);
    // a degenerate interval: the one point of it passes the gradient, its neighbours do not
    Variable pv(Tensor::from_vector<double>({hi, next(hi, -1), above}, {3}).to(dt), true);
    sum(clamp(pv, hi, hi)).backward();
    EXPECT_EQ(pv.grad().at(0), 1.0);
    EXPECT_EQ(pv.grad().at(1), 0.0);
    EXPECT_EQ(pv.grad().at(2), 0.0);
  }
}

// ----------------------------------------------------------------------------- dropout ----

TEST(GradcheckOps, DropoutSameMaskForwardAndBackward) {
  Rng data(30);
  const double p = 0.3;
  Tensor x = away_from_zero(data, {7, 9}, 0.5, 1.5);
  Rng rng(99);
  Variable xv(x, true);
  Variable y = dropout(xv, p, true, rng);
  sum(y).backward();
  int64_t zeros = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double m = y.data().at(i) / x.at(i);  // the mask the forward used
    EXPECT_TRUE(std::fabs(m) < 1e-12 || std::fabs(m - 1.0 / (1.0 - p)) < 1e-12) << m;
    EXPECT_NEAR(xv.grad().at(i), m, 1e-12) << "backward used a different mask at " << i;
    zeros += std::fabs(m) < 1e-12;
  }
  EXPECT_GT(zeros, 0);
  EXPECT_LT(zeros, x.numel());
  // the same seed gives the same mask; the rng advances between calls
  Rng rng2(99);
  Variable y2 = dropout(Variable(x), p, true, rng2);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y2.data().at(i), y.data().at(i));
  Variable y3 = dropout(Variable(x), p, true, rng2);
  bool differs = false;
  for (int64_t i = 0; i < x.numel(); ++i) differs = differs || y3.data().at(i) != y.data().at(i);
  EXPECT_TRUE(differs);
}

// The mask's draw is two rounds of lowbias32 over 32-bit words (core/dropout_mask.h): known
// answers from an independent implementation (Python integers, the header's formula), the CPU's
// 8-lane draws (core/cpu/dropout_simd.h) equal to the scalar ones across a 2^32 boundary of the
// index, then the statistics of the decisions.
TEST(GradcheckOps, DropoutMaskDrawsAreKnownAndDropAboutP) {
  struct Known {
    uint64_t seed, i;
    uint32_t u;
  };
  for (const Known& k : {Known{0, 0, 0x15b131aaU}, Known{0, 1, 0xc9c0929cU}, Known{0x0123456789ABCDEFull, 7, 0x003a0a7aU},
                         Known{~0ull, (1ull << 32) + 5, 0xb4593159U}, Known{12345, (1ull << 32) - 1, 0x1fcdafe7U}}) {
    DropoutMask at = dropout_mask(0.5, k.seed);
    EXPECT_EQ(at.draw(k.i), k.u) << "seed " << k.seed << " element " << k.i;
    at.threshold = k.u;
    EXPECT_TRUE(at.keep(k.i));
    at.threshold = k.u + 1;
    EXPECT_FALSE(at.keep(k.i));
  }
  {
    const DropoutMask m = dropout_mask(0.3, 0xFEEDull);
    std::vector<uint32_t> u(1000);
    for (uint64_t base : {0ull, 3ull, (1ull << 32) - 501, (7ull << 32) - 3}) {
      cpu::dropout_draws(m, base, (int64_t)u.size(), u.data());
      for (uint64_t c = 0; c < u.size(); ++c) ASSERT_EQ(u[c], m.draw(base + c)) << "base " << base << " c " << c;
    }
  }
  EXPECT_EQ(dropout_mask(1.0 - 1e-12, 1).threshold, 0xFFFFFFFFU);  // p near 1: capped, not wrapped to 0
  {  // masks of seeds one bit apart (low word, high word), and elements 2^32 apart, are unrelated
    const int64_t n = 1 << 20;
    const uint64_t a = 0x9D2C5680A3B1E7F1ull;
    const DropoutMask m = dropout_mask(0.5, a);
    for (const auto& [other, shift] : {std::pair{dropout_mask(0.5, a ^ 1), 0ull}, std::pair{dropout_mask(0.5, a ^ (1ull << 32)), 0ull},
                                      std::pair{dropout_mask(0.5, a), 1ull << 32}}) {
      int64_t agree = 0;
      for (int64_t i = 0; i < n; ++i) agree += m.keep((uint64_t)i) == other.keep((uint64_t)i + shift);
      EXPECT_NEAR((double)agree / n, 0.5, 5 * 0.5 / std::sqrt((double)n)) << "seed " << other.seed << " shift " << shift;
    }
  }
  const int64_t n = 1 << 20;
  Tensor ones = Tensor::empty({n}, DType::F64), y = Tensor::empty({n}, DType::F64);
  backend(Device::CPU).fill(ones, 1.0);
  Rng seeds(77);
  for (double p : {0.1, 0.5, 0.9}) {
    SCOPED_TRACE("p " + std::to_string(p));
    backend(Device::CPU).dropout(ones, dropout_mask(p, seeds.next_u64()), y);
    int64_t dropped = 0, both = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = y.at(i);
      ASSERT_TRUE(v == 0.0 || v == 1.0 / (1.0 - p)) << v;
      dropped += v == 0.0;
      both += i > 0 && v == 0.0 && y.at(i - 1) == 0.0;
    }
    const double sd = std::sqrt(p * (1 - p) / n);  // 5 sd: fails by chance with probability ~6e-7
    EXPECT_NEAR((double)dropped / n, p, 5 * sd);
    EXPECT_NEAR((double)both / (n - 1), p * p, 5 * std::sqrt(p * p * (1 - p * p) / n) * 2);  // neighbours independent
  }
  // NaN * 0 stays NaN (PyTorch's x * mask * scale), so a dropped non-finite value is not hidden
  Tensor nan = Tensor::empty({64}, DType::F32), yn = Tensor::empty({64}, DType::F32);
  backend(Device::CPU).fill(nan, NAN);
  backend(Device::CPU).dropout(nan, dropout_mask(0.5, 3), yn);
  for (int64_t i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(yn.at(i))) << i;
}

TEST(GradcheckOps, Dropout) {
  Rng r(31);
  for (int trial = 0; trial < 3; ++trial) {
    Shape s = {odd_dim(r), odd_dim(r), odd_dim(r)};
    SCOPED_TRACE(S(s));
    Tensor x = uniform(r, s);
    Rng rng(0);
    // reseed inside the function: every evaluation draws the same mask
    GRADCHECK([&rng](const Vars& v) { rng.seed_with(1234); return dropout(v[0], 0.4, true, rng); }, {x});
  }
}

TEST(GradcheckOps, DropoutEvalIsIdentity) {
  Rng r(32);
  Tensor x = uniform(r, {odd_dim(r), 5});
  Rng rng(3);
  auto before = rng.state();
  Variable xv(x, true);
  Variable y = dropout(xv, 0.5, false, rng);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y.data().at(i), x.at(i));
  EXPECT_EQ(rng.state().s, before.s);  // eval draws nothing
  Variable y0 = dropout(xv, 0.0, true, rng);  // p = 0 is identity too
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(y0.data().at(i), x.at(i));
  GRADCHECK([&rng](const Vars& v) { return dropout(v[0], 0.5, false, rng); }, {x});
  GRADCHECK([&rng](const Vars& v) { return dropout(v[0], 0.0, true, rng); }, {x});
}

// ------------------------------------------------------------------------------ matmul ----

// Stored shape of an operand: batch + (rows, cols) or (cols, rows) when transposed.
Shape mm_shape(const Shape& batch, bool t, int64_t rows, int64_t cols) {
  Shape s = batch;
  s.push_back(t ? cols : rows);
  s.push_back(t ? rows : cols);
  return s;
}

void check_matmul(const Shape& abatch, const Shape& bbatch, uint64_t seed) {
  Rng r(seed);
  for (int tt = 0; tt < 4; ++tt) {
    const bool ta = tt & 1, tb = tt & 2;
    const int64_t M = odd_dim(r), K = odd_dim(r), N = odd_dim(r);
    Shape sa = mm_shape(abatch, ta, M, K), sb = mm_shape(bbatch, tb, K, N);
    SCOPED_TRACE(S(sa) + (ta ? "^T" : "") + " @ " + S(sb) + (tb ? "^T" : ""));
    Tensor a = uniform(r, sa), b = uniform(r, sb);
    // the forward against a plain loop
    Variable out = matmul(Variable(a), Variable(b), ta, tb);
    Shape batch = abatch.size() >= bbatch.size() ? abatch : bbatch;
    Shape expect = batch;
    expect.push_back(M);
    expect.push_back(N);
    ASSERT_EQ(out.shape(), expect);
    const int64_t nb = shape_numel(batch);
    const bool a_shared = abatch.empty() && !bbatch.empty(), b_shared = bbatch.empty() && !abatch.empty();
    for (int64_t q = 0; q < nb; ++q)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k) {
            int64_t ao = a_shared ? 0 : q * M * K, bo = b_shared ? 0 : q * K * N;
            double av = a.at(ao + (ta ? k * M + i : i * K + k));
            double bv = b.at(bo + (tb ? j * K + k : k * N + j));
            s += av * bv;
          }
          ASSERT_NEAR(out.data().at((q * M + i) * N + j), s, 1e-12);
        }
    GRADCHECK([ta, tb](const Vars& v) { return matmul(v[0], v[1], ta, tb); }, {a, b}, {"a", "b"});
    // only one side requiring grad takes other branches of the backward; spot-check those
    GradcheckOptions few;
    few.max_elements = 5;
    GRADCHECK([ta, tb](const Vars& v) { return matmul(v[0], v[1], ta, tb); }, {a, b}, {"a", "-"}, few);
    GRADCHECK([ta, tb](const Vars& v) { return matmul(v[0], v[1], ta, tb); }, {a, b}, {"-", "b"}, few);
  }
}

TEST(GradcheckOps, Matmul2D) {
  for (uint64_t s = 0; s < 3; ++s) check_matmul({}, {}, 40 + s);
}
TEST(GradcheckOps, MatmulBatched3D) {
  Rng r(41);
  for (int i = 0; i < 2; ++i) {
    int64_t B = small_dim(r);
    check_matmul({B}, {B}, 50 + i);
  }
  check_matmul({1}, {1}, 52);
}
TEST(GradcheckOps, MatmulBatched4D) {
  check_matmul({2, 3}, {2, 3}, 60);
  check_matmul({1, 2}, {1, 2}, 61);
}
TEST(GradcheckOps, MatmulSharedB) {  // b 2-D, used by every batch item of a
  check_matmul({3}, {}, 70);
  check_matmul({2, 3}, {}, 71);
  check_matmul({1}, {}, 72);
}
TEST(GradcheckOps, MatmulSharedA) {  // a 2-D, used by every batch item of b
  check_matmul({}, {3}, 80);
  check_matmul({}, {2, 2}, 81);
  check_matmul({}, {1}, 82);
}

TEST(GradcheckOps, Linear) {
  Rng r(90);
  for (int trial = 0; trial < 3; ++trial) {
    int64_t in = odd_dim(r), out = odd_dim(r);
    Shape xs = trial == 0 ? Shape{odd_dim(r), in} : Shape{small_dim(r), odd_dim(r), in};
    SCOPED_TRACE(S(xs) + " -> " + std::to_string(out));
    Tensor x = uniform(r, xs), w = uniform(r, {out, in}), b = uniform(r, {out});
    GRADCHECK([](const Vars& v) { return linear(v[0], v[1], v[2]); }, {x, w, b}, {"x", "w", "bias"});
    GRADCHECK([](const Vars& v) { return linear(v[0], v[1]); }, {x, w}, {"x", "w"});
    Variable y = linear(Variable(x), Variable(w));
    Shape ys = xs;
    ys.back() = out;
    EXPECT_EQ(y.shape(), ys);
  }
}

// -------------------------------------------------------------------------- reductions ----

TEST(GradcheckOps, SumAndMean) {
  Rng r(100);
  for (int trial = 0; trial < 2; ++trial) {
    Shape s = {odd_dim(r), small_dim(r), odd_dim(r)};
    if (trial == 0) s = {3, 1, 5};
    Tensor x = uniform(r, s);
    SCOPED_TRACE(S(s));
    GRADCHECK([](const Vars& v) { return sum(v[0]); }, {x});
    GRADCHECK([](const Vars& v) { return mean(v[0]); }, {x});
    const std::vector<std::vector<int64_t>> dim_sets = {{0}, {1}, {2}, {-1}, {-2}, {0, 2}, {-3, -1}, {0, 1, 2}, {}};
    for (auto& dims : dim_sets)
      for (bool keep : {false, true}) {
        SCOPED_TRACE("dims size " + std::to_string(dims.size()) + (keep ? " keepdim" : ""));
        GRADCHECK([&](const Vars& v) { return sum(v[0], dims, keep); }, {x});
        GRADCHECK([&](const Vars& v) { return mean(v[0], dims, keep); }, {x});
      }
    // shapes and values
    Variable xv(x);
    EXPECT_EQ(sum(xv, {1}, true).shape(), (Shape{s[0], 1, s[2]}));
    EXPECT_EQ(sum(xv, {-1}).shape(), (Shape{s[0], s[1]}));
    EXPECT_EQ(mean(xv).shape(), Shape{});
    double tot = 0;
    for (int64_t i = 0; i < x.numel(); ++i) tot += x.at(i);
    EXPECT_NEAR(sum(xv).data().item(), tot, 1e-12);
    EXPECT_NEAR(mean(xv).data().item(), tot / x.numel(), 1e-12);
  }
  // 4-D, scalar-shaped
  Tensor x4 = uniform(r, {2, odd_dim(r), 1, 3});
  GRADCHECK([](const Vars& v) { return mean(v[0], {1, -1}, true); }, {x4});
  GRADCHECK([](const Vars& v) { return sum(v[0], {0, 2}); }, {x4});
  Tensor x0 = uniform(r, {});
  GRADCHECK([](const Vars& v) { return sum(v[0]); }, {x0});
}

// ------------------------------------------------------------------------------- shape ----

TEST(GradcheckOps, Reshape) {
  Rng r(110);
  for (int trial = 0; trial < 3; ++trial) {
    int64_t a = odd_dim(r), b = odd_dim(r), c = odd_dim(r);
    Tensor x = uniform(r, {a, b, c});
    SCOPED_TRACE(S(x.shape()));
    GRADCHECK([=](const Vars& v) { return reshape(v[0], {c, a * b}); }, {x});
    GRADCHECK([=](const Vars& v) { return reshape(v[0], {-1}); }, {x});
    GRADCHECK([=](const Vars& v) { return reshape(v[0], {a, 1, -1}); }, {x});
    // reshape then a non-trivial op, so the view's gradient flows into a real consumer
    GRADCHECK([=](const Vars& v) { return mul(reshape(v[0], {b * c, a}), reshape(v[0], {b * c, a})); }, {x});
    Variable y = reshape(Variable(x), {-1, c});
    EXPECT_EQ(y.shape(), (Shape{a * b, c}));
    EXPECT_EQ(y.data().storage(), x.storage());  // a free view
  }
}

TEST(GradcheckOps, Permute) {
  Rng r(120);
  const std::vector<std::vector<int64_t>> perms3 = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                                     {1, 2, 0}, {2, 0, 1}, {2, 1, 0}, {-1, 0, -2}};
  Tensor x3 = uniform(r, {odd_dim(r), 3, odd_dim(r)});
  for (auto& p : perms3) {
    SCOPED_TRACE(S(x3.shape()) + " perm " + S(p));
    GRADCHECK([&](const Vars& v) { return permute(v[0], p); }, {x3});
  }
  const std::vector<std::vector<int64_t>> perms4 = {{0, 2, 1, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {0, 1, 3, 2}};
  Tensor x4 = uniform(r, {2, odd_dim(r), 3, odd_dim(r)});
  for (auto& p : perms4) {
    SCOPED_TRACE(S(x4.shape()) + " perm " + S(p));
    GRADCHECK([&](const Vars& v) { return permute(v[0], p); }, {x4});
  }
  // value check: y[i, j, k] = x[k, i, j] for perm {2, 0, 1}
  Tensor x = uniform(r, {2, 3, 4});
  Variable y = permute(Variable(x), {2, 0, 1});
  ASSERT_EQ(y.shape(), (Shape{4, 2, 3}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t k = 0; k < 3; ++k) EXPECT_EQ(y.data().at((i * 2 + j) * 3 + k), x.at((j * 3 + k) * 4 + i));
}

TEST(GradcheckOps, Transpose) {
  Rng r(130);
  Tensor x = uniform(r, {odd_dim(r), 2, odd_dim(r), 3});
  for (auto dd : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {-1, -2}, {0, 3}, {1, 2}, {2, 2}}) {
    const int64_t d0 = dd.first, d1 = dd.second;
    SCOPED_TRACE(std::to_string(d0) + "," + std::to_string(d1));
    GRADCHECK([=](const Vars& v) { return transpose(v[0], d0, d1); }, {x});
  }
  Tensor m = uniform(r, {odd_dim(r), odd_dim(r)});
  GRADCHECK([](const Vars& v) { return transpose(v[0], 0, 1); }, {m});
}

TEST(GradcheckOps, Slice) {
  Rng r(140);
  for (int trial = 0; trial < 2; ++trial) {
    Shape s = {odd_dim(r) + 2, small_dim(r) + 2, odd_dim(r) + 2};  // >= 3: room for a window
    Tensor x = uniform(r, s);
    for (int64_t dim : {0, 1, 2, -1}) {
      int64_t n = s[dim < 0 ? dim + 3 : dim];
      for (auto be : std::vector<std::pair<int64_t, int64_t>>{{0, n}, {1, n - 1}, {n - 1, n}, {0, 1}}) {
        const int64_t b = be.first, e = be.second;
        SCOPED_TRACE(S(s) + " dim " + std::to_string(dim) + " [" + std::to_string(b) + ", " +
                     std::to_string(e) + ")");
        GRADCHECK([=](const Vars& v) { return slice(v[0], dim, b, e); }, {x});
      }
    }
  }
  // The free-view case (every dim before the sliced one has size 1) and the copying case.
  Tensor xf = uniform(r, {1, 1, 7, 3});
  Variable vf(xf);
  Variable sv = slice(vf, 2, 2, 5);
  EXPECT_EQ(sv.data().storage(), xf.storage()) << "expected a free view";
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(sv.data().at(i * 3 + j), xf.at((2 + i) * 3 + j));
  GRADCHECK([](const Vars& v) { return slice(v[0], 2, 2, 5); }, {xf});
  GRADCHECK([](const Vars& v) { return slice(v[0], 0, 0, 1); }, {xf});
  GRADCHECK([](const Vars& v) { return slice(v[0], -1, 1, 2); }, {xf});  // not free: copies
  // a free view followed by an op that reads it, and two slices of the same input
  GRADCHECK([](const Vars& v) { return mul(slice(v[0], 2, 0, 3), slice(v[0], 2, 4, 7)); }, {xf});
  Tensor x2 = uniform(r, {5, 3});
  Variable s0 = slice(Variable(x2), 0, 1, 3);
  EXPECT_EQ(s0.data().storage(), x2.storage());
  Variable s1 = slice(Variable(x2), 1, 1, 3);
  EXPECT_NE(s1.data().storage(), x2.storage());
  GRADCHECK([](const Vars& v) { return add(slice(v[0], 0, 1, 3), transpose(slice(v[0], 1, 0, 2), 0, 1)); },
            {uniform(r, {3, 3})});
}

TEST(GradcheckOps, Concat) {
  Rng r(150);
  for (int trial = 0; trial < 2; ++trial) {
    Shape base = {odd_dim(r), small_dim(r), odd_dim(r)};
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      int64_t d = dim < 0 ? dim + 3 : dim;
      std::vector<Tensor> xs;
      for (int i = 0; i < 3; ++i) {
        Shape s = base;
        s[d] = odd_dim(r);
        xs.push_back(uniform(r, s));
      }
      SCOPED_TRACE(S(xs[0].shape()) + S(xs[1].shape()) + S(xs[2].shape()) + " dim " + std::to_string(dim));
      GRADCHECK([=](const Vars& v) { return concat({v[0], v[1], v[2]}, dim); }, xs, {"x0", "x1", "x2"});
      GradcheckOptions few;
      few.max_elements = 5;
      GRADCHECK([=](const Vars& v) { return concat({v[0], v[1], v[2]}, dim); }, xs, {"x0", "-", "x2"}, few);
      Variable y = concat({Variable(xs[0]), Variable(xs[1]), Variable(xs[2])}, dim);
      EXPECT_EQ(y.size(d), xs[0].size(d) + xs[1].size(d) + xs[2].size(d));
    }
  }
  // the same input twice
  Tensor x = uniform(r, {3, odd_dim(r)});
  GRADCHECK([](const Vars& v) { return concat({v[0], v[0], v[0]}, 1); }, {x});
}

TEST(GradcheckOps, Expand) {
  Rng r(160);
  for (int trial = 0; trial < 3; ++trial) {
    int64_t a = odd_dim(r), b = odd_dim(r), c = 2 + (int64_t)r.below(3);
    std::vector<std::pair<Shape, Shape>> cases = {
        {{a, 1}, {a, b}}, {{1, b}, {a, b}}, {{b}, {c, a, b}}, {{1, 1}, {c, a, b}},
        {{a, 1, b}, {a, c, b}}, {{}, {a, b}}, {{a, b}, {a, b}}};
    for (auto& [from, to] : cases) {
      SCOPED_TRACE(S(from) + " -> " + S(to));
      Tensor x = uniform(r, from);
      GRADCHECK([to = to](const Vars& v) { return expand(v[0], to); }, {x});
    }
  }
}

// ---------------------------------------------------------------------------- indexing ----

template <class I>
void check_embedding(uint64_t seed) {
  Rng r(seed);
  for (int trial = 0; trial < 3; ++trial) {
    int64_t V = odd_dim(r) + 2, D = odd_dim(r);
    Shape ids_shape = trial == 0 ? Shape{6} : Shape{2, 5};
    std::vector<I> ids;
    for (int64_t i = 0; i < shape_numel(ids_shape); ++i) ids.push_back((I)r.below(V));
    ids[1] = ids[0];  // repeated ids: the backward must scatter-add, not overwrite
    ids[3] = ids[0];
    Tensor idt = index_tensor(ids, ids_shape);
    Tensor w = uniform(r, {V, D});
    SCOPED_TRACE("V " + std::to_string(V) + " D " + std::to_string(D) + " ids " + idt.str());
    GRADCHECK([idt](const Vars& v) { return embedding(v[0], idt); }, {w}, {"weight"});
    // the gradient of a repeated row is the number of times it occurs (seed of ones)
    Variable wv(w, true);
    Variable y = embedding(wv, idt);
    Shape ys = ids_shape;
    ys.push_back(D);
    ASSERT_EQ(y.shape(), ys);
    sum(y).backward();
    for (int64_t v = 0; v < V; ++v) {
      int64_t count = 0;
      for (auto id : ids) count += id == (I)v;
      for (int64_t d = 0; d < D; ++d) EXPECT_EQ(wv.grad().at(v * D + d), (double)count);
    }
  }
}
TEST(GradcheckOps, EmbeddingI32) { check_embedding<int32_t>(170); }
TEST(GradcheckOps, EmbeddingI64) { check_embedding<int64_t>(171); }

TEST(GradcheckOps, IndexSelect) {
  Rng r(180);
  for (int trial = 0; trial < 2; ++trial) {
    Shape s = {odd_dim(r) + 1, odd_dim(r) + 1, odd_dim(r) + 1};
    Tensor x = uniform(r, s);
    for (int64_t dim : {0, 1, 2, -1}) {
      int64_t n = s[dim < 0 ? dim + 3 : dim];
      std::vector<int64_t> idx = {n - 1, 0, n - 1, (int64_t)r.below(n), 0};  // repeats
      for (bool i32 : {false, true}) {
        Tensor it = i32 ? Tensor::from_vector<int64_t>(idx, {5}).to(DType::I32)
                        : Tensor::from_vector<int64_t>(idx, {5});
        SCOPED_TRACE(S(s) + " dim " + std::to_string(dim) + " " + it.str());
        GRADCHECK([=](const Vars& v) { return index_select(v[0], dim, it); }, {x});
      }
    }
  }
}

TEST(GradcheckOps, ScatterAdd) {
  Rng r(190);
  for (int trial = 0; trial < 2; ++trial) {
    Shape s = {odd_dim(r) + 1, odd_dim(r) + 1, odd_dim(r)};
    for (int64_t dim : {0, 1, 2, -1}) {
      int64_t d = dim < 0 ? dim + 3 : dim;
      int64_t n = s[d];
      std::vector<int32_t> idx = {(int32_t)(n - 1), 0, (int32_t)(n - 1), 0};  // repeated targets
      Tensor it = Tensor::from_vector<int32_t>(idx, {4});
      Shape ss = s;
      ss[d] = 4;
      Tensor x = uniform(r, s), src = uniform(r, ss);
      SCOPED_TRACE(S(s) + " src " + S(ss) + " dim " + std::to_string(dim));
      GRADCHECK([=](const Vars& v) { return scatter_add(v[0], dim, it, v[1]); }, {x, src}, {"x", "src"});
      GRADCHECK([=](const Vars& v) { return scatter_add(v[0], dim, it, v[1]); }, {x, src}, {"-", "src"});
      // forward: repeated indices accumulate
      Variable y = scatter_add(Variable(x), dim, it, Variable(src));
      if (d == 0 && n > 1) {
        int64_t row = s[1] * s[2];
        for (int64_t k = 0; k < row; ++k) {
          EXPECT_NEAR(y.data().at(k), x.at(k) + src.at(row + k) + src.at(3 * row + k), 1e-12);
          EXPECT_NEAR(y.data().at((n - 1) * row + k), x.at((n - 1) * row + k) + src.at(k) + src.at(2 * row + k),
                      1e-12);
        }
      }
    }
  }
}

TEST(GradcheckOps, Where) {
  Rng r(200);
  for (int trial = 0; trial < 3; ++trial) {
    int64_t a = odd_dim(r), b = odd_dim(r);
    Tensor x = uniform(r, {a, b}), y = uniform(r, {a, b});
    Tensor m_full = Tensor::empty({a, b}, DType::I32), m_row = Tensor::empty({b}, DType::F64),
           m_col = Tensor::empty({a, 1}, DType::I64);
    for (int64_t i = 0; i < m_full.numel(); ++i) m_full.set(i, (double)(r.below(2)));
    for (int64_t i = 0; i < b; ++i) m_row.set(i, (double)(r.below(2)));
    for (int64_t i = 0; i < a; ++i) m_col.set(i, (double)(r.below(2)));
    for (const Tensor& m : {m_full, m_row, m_col}) {
      SCOPED_TRACE(S({a, b}) + " mask " + m.str());
      GRADCHECK([m](const Vars& v) { return where(m, v[0], v[1]); }, {x, y}, {"a", "b"});
      GRADCHECK([m](const Vars& v) { return where(m, v[0], v[0]); }, {x});
    }
    Variable o = where(m_full, Variable(x), Variable(y));
    for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(o.data().at(i), m_full.at(i) != 0 ? x.at(i) : y.at(i));
  }
}

TEST(GradcheckOps, MaskedFill) {
  Rng r(210);
  for (int trial = 0; trial < 3; ++trial) {
    int64_t a = odd_dim(r), b = odd_dim(r), c = odd_dim(r);
    Tensor x = uniform(r, {a, b, c});
    Tensor m = Tensor::empty({b, 1}, DType::I32);  // broadcast over a and c
    for (int64_t i = 0; i < b; ++i) m.set(i, (double)(r.below(2)));
    SCOPED_TRACE(S(x.shape()) + " mask " + m.str());
    GRADCHECK([m](const Vars& v) { return masked_fill(v[0], m, -0.75); }, {x});
    // masked positions hold the value and get gradient 0
    Variable xv(x, true);
    Variable y = masked_fill(xv, m, -0.75);
    sum(y).backward();
    for (int64_t i = 0; i < x.numel(); ++i) {
      bool masked = m.at((i / c) % b) != 0;
      EXPECT_EQ(y.data().at(i), masked ? -0.75 : x.at(i));
      EXPECT_EQ(xv.grad().at(i), masked ? 0.0 : 1.0);
    }
  }
}

TEST(GradcheckOps, CausalMask) {
  Rng r(220);
  struct Case { int64_t B, T, S, diag; };
  std::vector<Case> cases;
  for (int trial = 0; trial < 2; ++trial) {
    int64_t T = odd_dim(r), extra = odd_dim(r);
    cases.push_back({small_dim(r), T, T, 0});              // square
    cases.push_back({small_dim(r), T, T + extra, extra});  // T < S: memory prefix, diag = S - T
    cases.push_back({1, T + 1, T + 1, 1});                 // square, looser mask
  }
  for (auto& c : cases) {
    SCOPED_TRACE("B " + std::to_string(c.B) + " T " + std::to_string(c.T) + " S " + std::to_string(c.S) +
                 " diag " + std::to_string(c.diag));
    Tensor x = uniform(r, {c.B, c.T, c.S}, -2, 2);
    // the mask output has -inf: gradcheck through softmax, as attention does
    const int64_t diag = c.diag;
    GRADCHECK([diag](const Vars& v) { return softmax(causal_mask(v[0], diag)); }, {x});
    Variable xv(x, true);
    Variable m = causal_mask(xv, diag);
    Variable p = softmax(m);
    // seed: arbitrary weights; masked positions must get exactly 0
    Tensor seed = uniform(r, p.shape());
    p.backward(seed);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.T; ++i)
        for (int64_t j = 0; j < c.S; ++j) {
          int64_t k = (b * c.T + i) * c.S + j;
          if (j > i + diag) {
            EXPECT_TRUE(std::isinf(m.data().at(k)) && m.data().at(k) < 0) << "position " << k;
            EXPECT_EQ(p.data().at(k), 0.0);
            EXPECT_EQ(xv.grad().at(k), 0.0);
          } else {
            EXPECT_EQ(m.data().at(k), x.at(k));
          }
        }
  }
}

// Sliding-window mask: row i keeps keys j in (i + diag - window, i + diag]; gradients only there.
TEST(GradcheckOps, CausalMaskWindow) {
  Rng r(221);
  struct Case { int64_t B, T, S, diag, window; };
  const std::vector<Case> cases = {{2, 5, 5, 0, 1}, {1, 7, 7, 0, 3}, {2, 4, 9, 5, 2}, {1, 6, 6, 0, 6}, {1, 3, 3, 0, 10}};
  for (auto& c : cases) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " S " + std::to_string(c.S) + " window " + std::to_string(c.window));
    Tensor x = uniform(r, {c.B, c.T, c.S}, -2, 2);
    const int64_t diag = c.diag, w = c.window;
    GRADCHECK([diag, w](const Vars& v) { return softmax(causal_mask(v[0], diag, w)); }, {x});
    Variable xv(x, true);
    Variable m = causal_mask(xv, diag, w);
    sum(m * Variable(uniform(r, m.shape()), false)).backward();
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t i = 0; i < c.T; ++i) {
        int64_t kept = 0;
        for (int64_t j = 0; j < c.S; ++j) {
          int64_t k = (b * c.T + i) * c.S + j;
          bool visible = j <= i + diag && j > i + diag - w;
          kept += visible;
          if (visible) {
            EXPECT_EQ(m.data().at(k), x.at(k));
          } else {
            EXPECT_TRUE(std::isinf(m.data().at(k))) << "position " << k;
            EXPECT_EQ(xv.grad().at(k), 0.0);
          }
        }
        EXPECT_EQ(kept, std::min(w, i + diag + 1));
      }
  }
  EXPECT_THROW(causal_mask(Variable(uniform(r, {2, 2}), false), 0, -1), Error);
}

// causal_softmax is softmax(causal_mask(x)) in one node: the same values (bit for bit: the same
// kernels), gradients by finite differences, exactly 0 where masked, one node instead of two.
TEST(GradcheckOps, CausalSoftmaxIsSoftmaxOfTheMaskInOneNode) {
  Rng r(223);
  struct Case { int64_t B, T, S, diag, window; };
  const std::vector<Case> cases = {{2, 5, 5, 0, 0}, {1, 4, 9, 5, 0}, {2, 7, 7, 0, 3}, {1, 4, 9, 5, 2}, {1, 1, 6, 5, 0}};
  for (auto& c : cases) {
    SCOPED_TRACE("T " + std::to_string(c.T) + " S " + std::to_string(c.S) + " diag " + std::to_string(c.diag) +
                 " window " + std::to_string(c.window));
    Tensor x = uniform(r, {c.B, c.T, c.S}, -2, 2);
    const int64_t diag = c.diag, w = c.window;
    GRADCHECK([diag, w](const Vars& v) { return causal_softmax(v[0], diag, w); }, {x});
    Variable a(x, true), b(x, true);
    Variable pa = causal_softmax(a, diag, w), pb = softmax(causal_mask(b, diag, w));
    EXPECT_EQ(pa.op_name(), "causal_softmax");
    EXPECT_EQ(pb.op_name(), "softmax");
    Tensor seed = uniform(r, pa.shape());
    pa.backward(seed);
    pb.backward(seed);
    for (int64_t k = 0; k < x.numel(); ++k) {
      EXPECT_EQ(pa.data().at(k), pb.data().at(k)) << "value " << k;
      EXPECT_NEAR(a.grad().at(k), b.grad().at(k), 1e-15) << "gradient " << k;
      const int64_t i = (k / c.S) % c.T, j = k % c.S;
      const bool visible = j <= i + diag && (w == 0 || j > i + diag - w);
      if (!visible) {
        EXPECT_EQ(a.grad().at(k), 0.0) << "masked position " << k;
      }
    }
  }
  // f32: the CPU's masked softmax (core/cpu/softmax_fast.h: its own vector exp over the visible
  // columns) against oneDNN's softmax of the -inf-filled copy: within a few ulps in the forward
  // (two exp approximations, two summation orders), masked entries exactly 0 in both; the backward
  // sums only the visible columns (another order than the whole row's), so its gradient is held
  // to a few ulps of the row's largest term
  {
    Tensor x32 = uniform(r, {2, 3, 64, 64}, -3, 3).to(DType::F32);
    Variable a(x32, true), b(x32, true);
    Variable pa = causal_softmax(a, 0, 9), pb = softmax(causal_mask(b, 0, 9));
    Tensor seed = uniform(r, pa.shape()).to(DType::F32);
    pa.backward(seed);
    pb.backward(seed);
    int64_t differ = 0;
    double worst = 0, worst_value = 0;
    for (int64_t k = 0; k < x32.numel(); ++k) {
      const double va = pa.data().at(k), vb = pb.data().at(k);
      differ += (va == 0) != (vb == 0);
      worst_value = std::max(worst_value, std::abs(va - vb) / std::max(vb, 1e-30));
      worst = std::max(worst, std::abs(a.grad().at(k) - b.grad().at(k)));
    }
    EXPECT_EQ(differ, 0) << "f32 entries zero in one and not in the other";
    EXPECT_LE(worst_value, 8 * 6e-8) << "f32 values against the two-node composition (relative)";
    EXPECT_LE(worst, 64 * 6e-8) << "f32 gradient against the two-node composition (|y| <= 1, |seed| <= 1, 64 columns)";
  }
  EXPECT_THROW(causal_softmax(Variable(uniform(r, {2, 2}), false), 0, -1), Error);
  EXPECT_THROW(causal_softmax(Variable(uniform(r, {4}), false)), Error);
}

// -------------------------------------------------------------------------- nn ops ----

TEST(GradcheckOps, Softmax) {
  Rng r(230);
  for (int trial = 0; trial < 3; ++trial) {
    Shape s = trial == 0 ? Shape{odd_dim(r)} : Shape{odd_dim(r), small_dim(r), odd_dim(r)};
    SCOPED_TRACE(S(s));
    Tensor x = uniform(r, s, -3, 3);
    GRADCHECK([](const Vars& v) { return softmax(v[0]); }, {x});
  }
  // rows sum to 1; large logits do not overflow
  Tensor big = uniform(r, {3, 5}, 500, 800);
  Variable y = softmax(Variable(big));
  for (int64_t i = 0; i < 3; ++i) {
    double s = 0;
    for (int64_t j = 0; j < 5; ++j) s += y.data().at(i * 5 + j);
    EXPECT_NEAR(s, 1.0, 1e-12);
  }
}

TEST(GradcheckOps, LogSoftmax) {
  Rng r(240);
  for (int trial = 0; trial < 3; ++trial) {
    Shape s = trial == 0 ? Shape{odd_dim(r)} : Shape{odd_dim(r), small_dim(r), odd_dim(r)};
    SCOPED_TRACE(S(s));
    Tensor x = uniform(r, s, -3, 3);
    GRADCHECK([](const Vars& v) { return log_softmax(v[0]); }, {x});
  }
}

TEST(GradcheckOps, LayerNorm) {
  Rng r(250);
  for (int trial = 0; trial < 4; ++trial) {
    int64_t C = trial == 0 ? 1 : odd_dim(r) + (trial == 1 ? 2 : 0);
    Shape s = trial < 2 ? Shape{odd_dim(r), C} : Shape{small_dim(r), odd_dim(r), C};
    SCOPED_TRACE(S(s));
    Tensor x = uniform(r, s, -2, 2), w = uniform(r, {C}, 0.5, 1.5), b = uniform(r, {C});
    GRADCHECK([](const Vars& v) { return layer_norm(v[0], v[1], v[2], 1e-5); }, {x, w, b}, {"x", "w", "b"});
    GRADCHECK([](const Vars& v) { return layer_norm(v[0], v[1], Variable(), 1e-5); }, {x, w}, {"x", "w"});
  }
  // value, against the definition written out here: y = (x - mean) / sqrt(var + eps) * w + b with
  // the biased variance, on rows whose variance (~3e-5) is of the order of eps = 1e-5, so that
  // eps moves y by ~10% (at unit variance it moves it by 5e-6 and a wrong eps hides in tolerances)
  const int64_t N = 6, C = 11;
  const double eps = 1e-5;
  Tensor x = uniform(r, {N, C}, -0.01, 0.01), w = uniform(r, {C}, 0.5, 1.5), b = uniform(r, {C});
  Tensor y = layer_norm(Variable(x), Variable(w), Variable(b), eps).data();
  for (int64_t n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c) mean += x.at(n * C + c) / (double)C;
    for (int64_t c = 0; c < C; ++c) var += (x.at(n * C + c) - mean) * (x.at(n * C + c) - mean) / (double)C;
    ASSERT_GT(var, eps) << "row " << n << ": eps must matter, not dominate";
    ASSERT_LT(var, 10 * eps) << "row " << n;
    for (int64_t c = 0; c < C; ++c) {
      const double want = (x.at(n * C + c) - mean) / std::sqrt(var + eps) * w.at(c) + b.at(c);
      EXPECT_NEAR(y.at(n * C + c), want, 1e-12) << "row " << n << " column " << c;
    }
  }
}

TEST(GradcheckOps, RmsNorm) {
  Rng r(260);
  for (int trial = 0; trial < 4; ++trial) {
    int64_t C = trial == 0 ? 1 : odd_dim(r) + (trial == 1 ? 2 : 0);
    Shape s = trial < 2 ? Shape{odd_dim(r), C} : Shape{small_dim(r), odd_dim(r), C};
    SCOPED_TRACE(S(s));
    Tensor x = away_from_zero(r, s, 0.2, 2), w = uniform(r, {C}, 0.5, 1.5);
    GRADCHECK([](const Vars& v) { return rms_norm(v[0], v[1], 1e-5); }, {x, w}, {"x", "w"});
  }
}

// The residual add fused into the norm (add_layer_norm / add_rms_norm, FastPath::AddNorm) in a
// pre-norm chain of two blocks, where every way a norm's input gradient can meet the residual
// stream's happens: x's first gradient (the last norm), x's gradient held only by x (summed in
// place), and x's gradient shared with another variable (add's dy passed to both inputs: summed
// into a new tensor). Gradchecked with the switch on and off, and the two give the same values.
TEST(GradcheckOps, AddNormFusesTheResidualAddBothWays) {
  Rng r(265);
  const Shape s{2, 3, 5};
  Tensor x = uniform(r, s, -2, 2), a1 = uniform(r, s, -1, 1), a2 = uniform(r, s, -1, 1);
  Tensor w = uniform(r, {5}, 0.5, 1.5), b = uniform(r, {5});
  for (bool rms : {false, true}) {
    auto chain = [rms](const Vars& v) {
      auto norm = [&](const Variable& p, const Variable& q) {
        return rms ? add_rms_norm(p, q, v[3], 1e-5) : add_layer_norm(p, q, v[3], v[4], 1e-5);
      };
      auto [h, y] = norm(v[0], v[1]);           // h = x + a1, y = norm(h)
      auto [h2, y2] = norm(h, mul(y, v[2]));    // the block's output into the next norm
      auto plain = [&](const Variable& p) { return rms ? rms_norm(p, v[3], 1e-5) : layer_norm(p, v[3], v[4], 1e-5); };
      Variable last = plain(mul(y, y));  // its input has no other gradient: the norm's is the first
      return add(add(mul(plain(h2), y2), h2), add(tanh(y), last));
    };
    std::vector<Tensor> got[2];
    for (int fused : {0, 1}) {
      SCOPED_TRACE(str(rms ? "rms" : "layer", " fused ", fused));
      set_fast_path(FastPath::AddNorm, fused == 1);
      std::vector<Tensor> ins{x, a1, a2, w};
      std::vector<std::string> names{"x", "a1", "a2", "w"};
      if (!rms) ins.push_back(b), names.push_back("b");
      GRADCHECK(chain, ins, names);
      Vars v;
      for (const Tensor& t : ins) v.push_back(Variable(t.clone(), true));
      sum(chain(v)).backward();
      for (const Variable& p : v) got[fused].push_back(p.grad());
    }
    reset_fast_path(FastPath::AddNorm);
    for (size_t i = 0; i < got[0].size(); ++i)
      for (int64_t k = 0; k < got[0][i].numel(); ++k)
        EXPECT_NEAR(got[1][i].at(k), got[0][i].at(k), 1e-12) << "input " << i << " element " << k;
  }
}

template <class I>
void check_cross_entropy(uint64_t seed) {
  Rng r(seed);
  for (int trial = 0; trial < 3; ++trial) {
    int64_t N = odd_dim(r) + 1, V = odd_dim(r) + 1;
    std::vector<I> t;
    for (int64_t i = 0; i < N; ++i) t.push_back((I)r.below(V));
    t[N - 1] = -1;  // ignored
    Tensor tt = Tensor::from_vector<I>(t, {N});
    Tensor z = uniform(r, {N, V}, -3, 3);
    SCOPED_TRACE("logits " + S({N, V}) + " targets " + tt.str());
    GRADCHECK([tt](const Vars& v) { return cross_entropy(v[0], tt); }, {z}, {"logits"});
    // value: mean of lse - z[target] over the non-ignored rows; ignored row gets zero gradient
    Variable zv(z, true);
    Variable loss = cross_entropy(zv, tt);
    EXPECT_EQ(loss.shape(), Shape{});
    double tot = 0;
    for (int64_t n = 0; n < N - 1; ++n) {
      double mx = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, z.at(n * V + v));
      for (int64_t v = 0; v < V; ++v) s += std::exp(z.at(n * V + v) - mx);
      tot += std::log(s) + mx - z.at(n * V + t[n]);
    }
    EXPECT_NEAR(loss.data().item(), tot / (double)(N - 1), 1e-12);
    loss.backward();
    for (int64_t v = 0; v < V; ++v) EXPECT_EQ(zv.grad().at((N - 1) * V + v), 0.0);
  }
}
TEST(GradcheckOps, CrossEntropyI32) { check_cross_entropy<int32_t>(270); }
TEST(GradcheckOps, CrossEntropyI64) { check_cross_entropy<int64_t>(271); }

// The weighted form (GPT::masked_loss): sum_n w[n] * (lse - z[target]) over the non-ignored
// rows; an ignored row (even with a weight) and a zero-weight row get zero gradient.
TEST(GradcheckOps, CrossEntropyWeighted) {
  Rng r(272);
  for (int trial = 0; trial < 3; ++trial) {
    const int64_t N = odd_dim(r) + 2, V = odd_dim(r) + 1;
    std::vector<int64_t> t;
    std::vector<double> w;
    for (int64_t i = 0; i < N; ++i) {
      t.push_back((int64_t)r.below(V));
      w.push_back(r.uniform(0.1, 2.0));
    }
    t[N - 1] = -1;  // ignored, weight 0.5 all the same
    w[N - 1] = 0.5;
    w[0] = 0;       // kept, weight 0
    const Tensor tt = Tensor::from_vector<int64_t>(t, {N}), wt = Tensor::from_vector<double>(w, {N});
    const Tensor z = uniform(r, {N, V}, -3, 3);
    SCOPED_TRACE("logits " + S({N, V}));
    GRADCHECK([tt, wt](const Vars& v) { return cross_entropy(v[0], tt, wt); }, {z}, {"logits"});
    Variable zv(z, true);
    Variable loss = cross_entropy(zv, tt, wt);
    double tot = 0;
    for (int64_t n = 0; n < N - 1; ++n) {
      double mx = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, z.at(n * V + v));
      for (int64_t v = 0; v < V; ++v) s += std::exp(z.at(n * V + v) - mx);
      tot += w[(size_t)n] * (std::log(s) + mx - z.at(n * V + t[(size_t)n]));
    }
    EXPECT_NEAR(loss.data().item(), tot, 1e-12);
    loss.backward();
    for (int64_t v = 0; v < V; ++v) {
      EXPECT_EQ(zv.grad().at((N - 1) * V + v), 0.0);
      EXPECT_EQ(zv.grad().at(v), 0.0);
    }
  }
}

// A small attention-like composition: every op's gradient flowing through the others.
TEST(GradcheckOps, Composition) {
  Rng r(280);
  const int64_t B = 2, T = 3, D = 5;
  Tensor x = uniform(r, {B, T, D}), wq = uniform(r, {D, D}), wk = uniform(r, {D, D}),
         g = uniform(r, {D}, 0.5, 1.5);
  GRADCHECK(
      [&](const Vars& v) {
        Variable h = rms_norm(v[0], v[3], 1e-5);
        Variable q = linear(h, v[1]), k = linear(h, v[2]);
        Variable s = scale(matmul(q, k, false, true), 1.0 / std::sqrt((double)D));
        Variable p = softmax(causal_mask(s));
        Variable o = matmul(p, h);
        return gelu_tanh(add(o, v[0]));
      },
      {x, wq, wk, g}, {"x", "wq", "wk", "g"});
}

// ------------------------------------------------------------------ autograd engine ----

// add's dy goes to both inputs without a copy: two intermediates then share one gradient's
// storage, and accumulating into one of them must not change the other (out of place). The
// residual stream's pattern: s = a + b, t = s + a; dt/dx with a = 2x, b = 3x is 7.
TEST(Autograd, SharedGradientsAreNeverAddedToInPlace) {
  Rng r(301);
  Tensor x = uniform(r, {4, 6});
  Variable xv(x, true);
  Variable a = scale(xv, 2.0), b = scale(xv, 3.0);
  Variable t = add(add(a, b), a);
  const uint64_t r0 = BufferPool::host().stats().requests;
  sum(t).backward();
  const uint64_t requests = BufferPool::host().stats().requests - r0;
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(xv.grad().at(i), 7.0) << "element " << i;
  // 6: the seed, sum's broadcast, a's out-of-place sum, scale's two results, one more for
  // x's first; copying each passed-through gradient (the rule before) made 8
  EXPECT_LE(requests, 6u) << "a passed-through gradient was copied";
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCalls) {
  Rng r(300);
  Tensor x = uniform(r, {3, 5});
  Variable xv(x, true);
  sum(mul(xv, xv)).backward();         // 2x
  sum(scale(xv, 3.0)).backward();      // + 3
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(xv.grad().at(i), 2 * x.at(i) + 3, 1e-12);
  xv.zero_grad();
  EXPECT_FALSE(xv.grad().defined());
  sum(xv).backward();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(xv.grad().at(i), 1.0);
}

TEST(Autograd, VariableUsedTwiceInOneGraph) {
  Rng r(310);
  Tensor x = uniform(r, {4, 3});
  Variable xv(x, true);
  // y = sum(x * x) + sum(exp(x)) + sum(x): dy/dx = 2x + exp(x) + 1
  Variable h = mul(xv, xv);
  Variable y = add(add(sum(h), sum(exp(xv))), sum(xv));
  y.backward();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(xv.grad().at(i), 2 * x.at(i) + std::exp(x.at(i)) + 1, 1e-12);
  // an intermediate used twice (diamond): z = sum(h * h + h), dz/dx = (2h + 1) * 2x
  Variable xv2(x, true);
  Variable h2 = mul(xv2, xv2);
  Variable z = sum(add(mul(h2, h2), h2));
  z.backward();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double hx = x.at(i) * x.at(i);
    EXPECT_NEAR(xv2.grad().at(i), (2 * hx + 1) * 2 * x.at(i), 1e-12);
  }
}

TEST(Autograd, NoGradGuardRecordsNothing) {
  Tensor x = Tensor::full({2, 3}, 1.5, DType::F64);
  Variable xv(x, true);
  {
    NoGradGuard ng;
    EXPECT_FALSE(grad_enabled());
    Variable y = sum(mul(xv, exp(xv)));
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.op_name(), "leaf");
    EXPECT_THROW(y.backward(), Error);
    {
      NoGradGuard nested;
      EXPECT_FALSE(grad_enabled());
    }
    EXPECT_FALSE(grad_enabled());  // the inner guard restores the outer state
  }
  EXPECT_TRUE(grad_enabled());
  Variable y = sum(mul(xv, xv));
  EXPECT_TRUE(y.requires_grad());
  EXPECT_EQ(y.op_name(), "sum");
  // inputs that do not require grad record nothing either
  Variable c(x, false);
  EXPECT_FALSE(mul(c, c).requires_grad());
  // detach cuts the graph
  Variable d = mul(xv, xv).detach();
  EXPECT_FALSE(d.requires_grad());
}

TEST(Autograd, SecondBackwardThroughFreedGraphThrows) {
  Tensor x = Tensor::full({3}, 2.0, DType::F64);
  Variable xv(x, true);
  Variable h = mul(xv, xv);
  Variable y = sum(h);
  y.backward();
  try {
    y.backward();
    FAIL() << "second backward did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("freed"), std::string::npos) << e.what();
  }
  // a new graph built on an intermediate of the freed one also reports it
  Variable y2 = sum(h);
  try {
    y2.backward();
    FAIL() << "backward through a freed intermediate did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("freed"), std::string::npos) << e.what();
  }
  // the leaf's gradient is untouched by the failed calls
  for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(xv.grad().at(i), 4.0);
}

TEST(Autograd, RetainGraphTwiceDoublesGrad) {
  Rng r(320);
  Tensor x = uniform(r, {2, 5});
  Variable xv(x, true);
  Variable y = sum(mul(tanh(xv), xv));
  y.backward(Tensor(), true);
  Tensor once = xv.grad().clone();
  y.backward(Tensor(), true);
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(xv.grad().at(i), 2 * once.at(i), 1e-12);
  y.backward();  // a third, freeing
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_NEAR(xv.grad().at(i), 3 * once.at(i), 1e-12);
  EXPECT_THROW(y.backward(), Error);
}

TEST(Autograd, LeafBackwardTwiceAccumulates) {
  // a leaf has no graph to free: calling backward on it again just accumulates
  Tensor x = Tensor::full({2, 2}, 3.0, DType::F64);
  Variable xv(x, true);
  Tensor seed = Tensor::full({2, 2}, 0.5, DType::F64);
  xv.backward(seed);
  xv.backward(seed);
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(xv.grad().at(i), 1.0);
  // the same through an op that returns its input (dropout in eval mode)
  Rng rng(1);
  Variable y = dropout(xv, 0.5, false, rng);
  y.backward(seed);
  sum(xv).backward();
  for (int64_t i = 0; i < 4; ++i) EXPECT_EQ(xv.grad().at(i), 2.5);
}

TEST(Autograd, EmptyTensorsDoNotCrash) {
  // zero-sized operands: forward and backward run (gradients are zero-sized or zero)
  Variable a(Tensor::zeros({0, 3}, DType::F64), true), b(Tensor::zeros({3, 2}, DType::F64), true);
  Variable y = matmul(a, b);
  EXPECT_EQ(y.shape(), (Shape{0, 2}));
  sum(y).backward();
  EXPECT_EQ(a.grad().shape(), (Shape{0, 3}));
  ASSERT_EQ(b.grad().shape(), (Shape{3, 2}));
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(b.grad().at(i), 0.0);
  Variable c(Tensor::zeros({2, 0}, DType::F64), true), d(Tensor::zeros({0, 4}, DType::F64), true);
  Variable z = matmul(c, d);  // inner dim 0: a [2, 4] of zeros
  EXPECT_EQ(z.shape(), (Shape{2, 4}));
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(z.data().at(i), 0.0);
  sum(z).backward();
  EXPECT_EQ(c.grad().shape(), (Shape{2, 0}));
  Variable e(Tensor::zeros({0, 5}, DType::F64), true);
  sum(softmax(e)).backward();
  sum(layer_norm(e, Variable(Tensor::full({5}, 1.0, DType::F64), true), Variable(), 1e-5)).backward();
  EXPECT_EQ(e.grad().shape(), (Shape{0, 5}));
}

TEST(Autograd, NonScalarBackwardNeedsSeed) {
  Tensor x = Tensor::full({2, 3}, 1.0, DType::F64);
  Variable xv(x, true);
  Variable y = scale(xv, 2.0);
  EXPECT_THROW(y.backward(), Error);
  Tensor seed = Tensor::full({2, 3}, 0.5, DType::F64);
  y.backward(seed);
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(xv.grad().at(i), 1.0);
  EXPECT_THROW(scale(xv, 2.0).backward(Tensor::full({3}, 1.0, DType::F64)), Error);  // wrong seed shape
}

TEST(Autograd, GradcheckCatchesAWrongGradient) {
  // gradcheck itself must fail on a wrong backward (here: an op recorded with a bad closure)
  Rng r(330);
  Tensor x = uniform(r, {3, 2});
  GradcheckResult res = gradcheck(
      [](const Vars& v) {
        Tensor y = v[0].data().clone();
        for (int64_t i = 0; i < y.numel(); ++i) y.set(i, y.at(i) * y.at(i));
        Variable xin = v[0];
        return make_result(y, "bad_square", {xin}, [xin](const Tensor& g) {
          accumulate_grad(*xin.impl(), g);  // should be 2x * g
        });
      },
      {x});
  EXPECT_FALSE(res.pass);
  EXPECT_NE(res.summary().find("FAIL"), std::string::npos) << res.summary();
}

}  // namespace
