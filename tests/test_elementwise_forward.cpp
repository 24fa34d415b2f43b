// tests/test_elementwise_forward.cpp — the forward VALUES of every elementwise op (the gradchecks
// in test_ops_gradcheck.cpp only check derivatives against the op's own forward, so a wrong
// forward with a consistent backward would pass there): each op through the autograd API, in f64
// and f32, against libm / closed forms evaluated here in long double, on a grid that includes
// large, tiny, negative and special inputs (0, -0, +-inf, NaN, out-of-domain values).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/ops.h"

namespace ctx {
namespace {

using LD = long double;

struct UnaryCase {
  std::string name;
  std::function<Variable(const Variable&)> op;
  std::function<LD(LD)> ref;  // the closed form, in long double
  double ulps;                // allowed error in units of the dtype's eps, relative to |ref|
  double abs_ulps = 0;        // plus abs_ulps * eps * (1 + |x|) absolute (for finite x)
};

// The inputs: a dense grid over [-12, 12], magnitudes from 1e-30 to 1e30 of both signs, and the
// special values; f32 runs see them rounded to float (the reference uses the rounded value).
std::vector<double> inputs() {
  std::vector<double> x;
  for (int i = -1200; i <= 1200; ++i) x.push_back(i * 0.01 + 0.003);
  for (int e = -30; e <= 30; e += 3)
    for (double m : {1.0, 2.5, 7.1}) {
      x.push_back(m * std::pow(10.0, e));
      x.push_back(-m * std::pow(10.0, e));
    }
  const double inf = std::numeric_limits<double>::infinity();
  for (double s : {0.0, -0.0, 1.0, -1.0, 0.5, inf, -inf, std::nan("")}) x.push_back(s);
  return x;
}

LD gelu_ref(LD x) {
  const LD k = std::sqrt(2.0L / 3.14159265358979323846264338327950288L);
  if (std::isinf(x)) return x > 0 ? x : 0.0L;
  return 0.5L * x * (1.0L + std::tanh(k * (x + 0.044715L * x * x * x)));
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Variable& x) { return neg(x); }, [](LD x) { return -x; }, 0},
      {"scale(-2.5)", [](const Variable& x) { return scale(x, -2.5); }, [](LD x) { return -2.5L * x; }, 0.5},
      {"add_scalar(0.75)", [](const Variable& x) { return add_scalar(x, 0.75); }, [](LD x) { return x + 0.75L; }, 0.5},
      {"exp", [](const Variable& x) { return exp(x); }, [](LD x) { return std::exp(x); }, 4},
      {"log", [](const Variable& x) { return log(x); }, [](LD x) { return std::log(x); }, 4},
      {"tanh", [](const Variable& x) { return tanh(x); }, [](LD x) { return std::tanh(x); }, 4},
      {"sin", [](const Variable& x) { return sin(x); }, [](LD x) { return std::sin(x); }, 4},
      {"cos", [](const Variable& x) { return cos(x); }, [](LD x) { return std::cos(x); }, 4},
      {"sqrt", [](const Variable& x) { return sqrt(x); }, [](LD x) { return std::sqrt(x); }, 1},
      // relu(NaN) is 0 on every backend (x > 0 ? x : 0 here, fmaxf on CUDA); PyTorch gives NaN
      {"relu", [](const Variable& x) { return relu(x); }, [](LD x) { return x > 0 ? x : 0.0L; }, 0},
      {"square", [](const Variable& x) { return square(x); }, [](LD x) { return x * x; }, 1},
      {"pow(3)", [](const Variable& x) { return pow(x, 3.0); }, [](LD x) { return std::pow(x, 3.0L); }, 4},
      {"pow(0.5)", [](const Variable& x) { return pow(x, 0.5); }, [](LD x) { return std::pow(x, 0.5L); }, 4},
      {"pow(-1.5)", [](const Variable& x) { return pow(x, -1.5); }, [](LD x) { return std::pow(x, -1.5L); }, 4},
      {"clamp(-0.5, 2)", [](const Variable& x) { return clamp(x, -0.5, 2.0); },
       [](LD x) { return std::isnan(x) ? x : std::min(std::max(x, -0.5L), 2.0L); }, 0},
      // 0.5 x (1 + tanh u) cancels in the negative tail (tanh u rounds to -1): an absolute error
      // ~eps |x| there, in f64 (reference kernel) as in f32 (fast / oneDNN kernels)
      {"gelu_tanh", [](const Variable& x) { return gelu_tanh(x); }, gelu_ref, 8, 4},
  };
}

// |got - want| within ulps * eps * |want| (+ abs_tol (1 + |x|) in f32), or both NaN, or equal
// infinities; zeros must be zeros (the sign of a zero is not checked). Empty when it holds, else
// what is wrong.
std::string value_error(const UnaryCase& c, DType dt, double x, double got, LD want) {
  const double eps = dt == DType::F64 ? std::numeric_limits<double>::epsilon()
                                      : std::numeric_limits<float>::epsilon();
  const double w = (double)want;
  std::ostringstream os;
  os.precision(17);
  os << c.name << "(" << x << ") " << dtype_name(dt) << ": got " << got << ", expected " << w;
  const std::string what = os.str();
  if (dt == DType::F32 && std::isfinite(w) && std::fabs(w) > std::numeric_limits<float>::max())
    return std::isinf(got) && (got > 0) == (w > 0) ? "" : what + " (f32 overflow)";
  if (std::isnan(w)) return std::isnan(got) ? "" : what;
  if (std::isinf(w)) return got == w ? "" : what;
  double tol = c.ulps * eps * std::fabs(w);
  if (std::isfinite(x)) tol += c.abs_ulps * eps * (1 + std::fabs(x));
  if (dt == DType::F32) tol += 2 * (double)std::numeric_limits<float>::min();  // below f32's normal range
  return std::fabs(got - w) <= tol ? "" : what;
}

class ElementwiseForward : public ::testing::TestWithParam<DType> {};

TEST_P(ElementwiseForward, UnaryOpsMatchLibm) {
  const DType dt = GetParam();
  const std::vector<double> xs = inputs();
  Tensor x64 = Tensor::from_vector(xs, {(int64_t)xs.size()});
  Tensor x = dt == DType::F64 ? x64 : x64.to(dt);
  for (const UnaryCase& c : unary_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor y = c.op(Variable(x)).data();
    ASSERT_EQ(y.dtype(), dt);
    ASSERT_EQ(y.numel(), x.numel());
    int failures = 0;
    for (int64_t i = 0; i < x.numel() && failures < 5; ++i) {
      const double xi = x.at(i);  // the value the op saw (rounded to f32 in f32 runs)
      // gelu(-inf): the limit is 0 and the f32 kernels give it; the f64 reference kernel's
      // 0.5 x (1 + tanh u) is -inf * 0 = NaN there (as PyTorch's tanh-GELU). Not pinned here.
      if (c.name == "gelu_tanh" && std::isinf(xi) && xi < 0) continue;
      const std::string e = value_error(c, dt, xi, y.at(i), c.ref((LD)xi));
      if (!e.empty()) {
        ADD_FAILURE() << e;
        ++failures;
      }
    }
  }
}

TEST_P(ElementwiseForward, BinaryOpsMatchTheirFormulaWithBroadcasting) {
  // a [3, 1, 4] with b [5, 1]: out [3, 5, 4]; every value of one against a + b, a - b, a * b,
  // a / b computed in long double and rounded once (IEEE: exact to half an ulp).
  const DType dt = GetParam();
  std::vector<double> av, bv;
  for (int i = 0; i < 12; ++i) av.push_back((i - 5.5) * 0.37 + (i % 3 == 0 ? 1e6 : 0));
  for (int j = 0; j < 5; ++j) bv.push_back(j == 2 ? -0.0 : (j - 2.2) * 1.9);
  Tensor a = Tensor::from_vector(av, {3, 1, 4}).to(dt), b = Tensor::from_vector(bv, {5, 1}).to(dt);
  struct Bin {
    const char* name;
    Variable (*op)(const Variable&, const Variable&);
    LD (*ref)(LD, LD);
  };
  const Bin bins[] = {{"add", &add, [](LD p, LD q) { return p + q; }},
                      {"sub", &sub, [](LD p, LD q) { return p - q; }},
                      {"mul", &mul, [](LD p, LD q) { return p * q; }},
                      {"div", &div, [](LD p, LD q) { return p / q; }}};
  const double eps = dt == DType::F64 ? std::numeric_limits<double>::epsilon()
                                      : std::numeric_limits<float>::epsilon();
  for (const Bin& op : bins) {
    const Tensor y = op.op(Variable(a), Variable(b)).data();
    ASSERT_EQ(y.shape(), (Shape{3, 5, 4})) << op.name;
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j)
        for (int64_t k = 0; k < 4; ++k) {
          const double p = a.at(i * 4 + k), q = b.at(j);
          const double want = (double)op.ref(p, q), got = y.at((i * 5 + j) * 4 + k);
          if (std::isinf(want) || std::isnan(want)) {  // x / -0
            EXPECT_EQ(std::isnan(got), std::isnan(want)) << op.name << "(" << p << ", " << q << ")";
            if (!std::isnan(want)) {
              EXPECT_EQ(got, want) << op.name << "(" << p << ", " << q << ")";
            }
            continue;
          }
          EXPECT_LE(std::fabs(got - want), 0.5 * eps * std::fabs(want))
              << op.name << "(" << p << ", " << q << ") " << dtype_name(dt) << ": got " << got;
        }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, ElementwiseForward, ::testing::Values(DType::F64, DType::F32),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace ctx
