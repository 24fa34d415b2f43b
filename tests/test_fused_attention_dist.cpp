// tests/test_fused_attention_dist.cpp — the distance-table bias of fused attention
// (RelTerms::dist_bias / AttnRel::dist_bias: logit_ij += table[h, i + (S - T) - j]) on the CPU:
// the fused op and the composed version against the same attention given the table expanded by
// hand into a bias [H, T, S] (output and every gradient; the table's gradient against the hand
// reduction of dbias by distance), over shapes with S > T, windows, several 64-key tiles and with
// content-position terms alongside; f64 gradchecks w.r.t. the table; entries no (i, j) reaches
// (distances >= S, or >= window) get exactly zero gradient; argument errors name the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/ops_attention.h"
#include "core/rng.h"
#include "tests/test_util.h"

using namespace ctx;
using ctx::testing_util::expect_error;
using ctx::testing_util::rel_err;
using ctx::testing_util::uniform_tensor;

namespace {

struct Case {
  int64_t B, H, T, S, Dh, window, extra;  // table [H, S + extra]
  bool qrel;                              // a content-position term alongside (qrel by distance)
  std::string str() const {
    return "B" + std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) + " S" + std::to_string(S) +
           " Dh" + std::to_string(Dh) + " window " + std::to_string(window) + " n S+" + std::to_string(extra) +
           (qrel ? " qrel" : "");
  }
};

int64_t dist(const Case& c, int64_t i, int64_t j) { return std::max<int64_t>(i + c.S - c.T - j, 0); }

// table [H, n] -> bias [H, T, S] by hand
Tensor expand(const Case& c, const Tensor& table) {
  const int64_t n = table.size(1);
  Tensor b = Tensor::empty({c.H, c.T, c.S}, table.dtype());
  for (int64_t h = 0; h < c.H; ++h)
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.S; ++j) b.set((h * c.T + i) * c.S + j, table.at(h * n + dist(c, i, j)));
  return b;
}
// dbias [H, T, S] -> dtable [H, n] by hand (masked entries hold 0)
Tensor reduce(const Case& c, const Tensor& dbias, int64_t n) {
  Tensor t = Tensor::zeros({c.H, n}, dbias.dtype());
  for (int64_t h = 0; h < c.H; ++h)
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.S; ++j) {
        const int64_t x = h * n + dist(c, i, j);
        t.set(x, t.at(x) + dbias.at((h * c.T + i) * c.S + j));
      }
  return t;
}

struct Inputs {
  Tensor q, k, v, table, qrel, qidx, g;
};
Inputs make_inputs(const Case& c, DType dt, uint64_t seed) {
  Rng r(seed);
  Inputs x;
  x.q = uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, dt, -1.5, 1.5);
  x.k = uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt, -1.5, 1.5);
  x.v = uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt);
  x.table = uniform_tensor(r, {c.H, c.S + c.extra}, dt, -3.0, 1.0);
  x.g = uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, dt);
  if (c.qrel) {
    x.qrel = uniform_tensor(r, {c.B, c.H, c.T, c.S}, dt, -2.0, 2.0);
    x.qidx = Tensor::empty({c.T, c.S}, DType::I32);
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j < c.S; ++j) x.qidx.data<int32_t>()[i * c.S + j] = (int32_t)dist(c, i, j);
  }
  return x;
}

struct Outcome {
  Variable q, k, v, table, bias, qrel, o;
};
// by = 0: the table (fused), 1: the table (composed), 2: the hand-expanded bias (fused)
Outcome run(const Case& c, const Inputs& in, int by) {
  auto leaf = [](const Tensor& t) { return t.defined() ? Variable(t.clone(), true) : Variable(); };
  Outcome x{leaf(in.q), leaf(in.k), leaf(in.v), Variable(), Variable(), leaf(in.qrel), Variable()};
  RelTerms rel;
  rel.qrel = x.qrel;
  rel.qidx = in.qidx;
  if (by == 2) x.bias = leaf(expand(c, in.table));
  else rel.dist_bias = x.table = leaf(in.table);
  const double scale = 1.0 / std::sqrt((double)c.Dh);
  x.o = by == 1 ? causal_attention_composed(x.q, x.k, x.v, x.bias, scale, c.window, rel)
                : fused_causal_attention(x.q, x.k, x.v, x.bias, scale, c.window, rel);
  x.o.backward(in.g);
  return x;
}

std::vector<Case> all_cases() {
  return {{1, 1, 1, 1, 4, 0, 0, false},   {2, 3, 5, 5, 7, 0, 3, false},  {2, 2, 9, 13, 16, 3, 1, false},
          {1, 2, 70, 70, 8, 0, 0, false}, {2, 1, 67, 131, 5, 20, 2, false}, {1, 2, 130, 130, 33, 0, 5, true},
          {2, 2, 9, 13, 16, 0, 0, true}};
}

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.at(i)));
  return m;
}

void compare(const Case& c, DType dt, double tol, uint64_t seed) {
  SCOPED_TRACE(c.str() + (dt == DType::F32 ? " f32" : " f64"));
  const Inputs in = make_inputs(c, dt, seed);
  const Outcome ref = run(c, in, 2);
  for (int by : {0, 1}) {
    SCOPED_TRACE(by == 0 ? "fused" : "composed");
    const Outcome x = run(c, in, by);
    if (by == 0) {
      EXPECT_EQ(x.o.op_name(), "fused_causal_attention");
    }
    // One key (S == 1): every softmax row is the constant 1, so the logits' gradients (dq, dk,
    // dqrel, dtable) are exactly zero and both sides hold only rounding noise, which differs with
    // the build's code generation: held to zero on dv's scale instead of to each other.
    const double scale = max_abs(ref.v.grad());
    auto logit_grad = [&](const Tensor& a, const Tensor& b) {
      return c.S == 1 ? std::max(max_abs(a), max_abs(b)) / scale : rel_err(a, b);
    };
    EXPECT_LE(rel_err(x.o.data(), ref.o.data()), tol) << "output";
    EXPECT_LE(logit_grad(x.q.grad(), ref.q.grad()), tol) << "dq";
    EXPECT_LE(logit_grad(x.k.grad(), ref.k.grad()), tol) << "dk";
    EXPECT_LE(rel_err(x.v.grad(), ref.v.grad()), tol) << "dv";
    if (c.qrel) {
      EXPECT_LE(logit_grad(x.qrel.grad(), ref.qrel.grad()), tol) << "dqrel";
    }
    EXPECT_LE(logit_grad(x.table.grad(), reduce(c, ref.bias.grad(), in.table.size(1))), tol) << "dtable";
  }
}

TEST(FusedAttentionDist, MatchesTheExpandedBiasF32) {
  uint64_t seed = 10;
  for (const Case& c : all_cases()) compare(c, DType::F32, 2e-5, seed++);
}

TEST(FusedAttentionDist, MatchesTheExpandedBiasF64) {
  uint64_t seed = 40;
  for (const Case& c : all_cases()) compare(c, DType::F64, 1e-10, seed++);
}

TEST(FusedAttentionDist, GradcheckF64WithRespectToTheTable) {
  for (const Case& c : {Case{2, 2, 4, 6, 3, 0, 2, false}, Case{1, 2, 5, 5, 4, 2, 0, false},
                        Case{1, 1, 3, 7, 2, 0, 1, true}}) {
    SCOPED_TRACE(c.str());
    const Inputs in = make_inputs(c, DType::F64, 77);
    std::vector<Tensor> leaves = {in.q, in.k, in.v, in.table};
    std::vector<std::string> names = {"q", "k", "v", "table"};
    for (const bool fused : {true, false}) {
      GradcheckResult res = gradcheck(
          [&](const std::vector<Variable>& x) {
            RelTerms rel;
            rel.dist_bias = x[3];
            if (c.qrel) rel.qrel = Variable(in.qrel, false), rel.qidx = in.qidx;
            return fused ? fused_causal_attention(x[0], x[1], x[2], Variable(), 0.7, c.window, rel)
                         : causal_attention_composed(x[0], x[1], x[2], Variable(), 0.7, c.window, rel);
          },
          leaves, names);
      EXPECT_TRUE(res.pass) << (fused ? "fused: " : "composed: ") << res.summary();
    }
  }
}

TEST(FusedAttentionDist, UnreachedDistancesGetZeroGradient) {
  // S = 6, window 3, n = 9: only distances 0..2 are visible
  const Case c{1, 2, 4, 6, 3, 3, 3, false};
  const Inputs in = make_inputs(c, DType::F32, 5);
  const Outcome x = run(c, in, 0);
  const Tensor g = x.table.grad();
  for (int64_t h = 0; h < c.H; ++h)
    for (int64_t r = 0; r < 9; ++r) {
      if (r >= 3) {
        EXPECT_EQ(g.at(h * 9 + r), 0.0) << "head " << h << " distance " << r;
      } else {
        EXPECT_NE(g.at(h * 9 + r), 0.0) << "head " << h << " distance " << r;
      }
    }
}

TEST(FusedAttentionDist, ErrorsNameTheField) {
  auto var = [](const Shape& s, DType dt = DType::F32) { return Variable(Tensor::zeros(s, dt), true); };
  const Variable q = var({2, 3, 4, 5}), k = var({2, 3, 6, 5}), v = var({2, 3, 6, 5});
  RelTerms a;
  a.dist_bias = var({3, 5});
  expect_error([&] { fused_causal_attention(q, k, v, Variable(), 1.0, 0, a); },
               {"fused_causal_attention", "RelTerms.dist_bias must be cpu f32[3, n] with n >= S = 6", "f32[3, 5]"});
  a.dist_bias = var({2, 6});
  expect_error([&] { causal_attention_composed(q, k, v, Variable(), 1.0, 0, a); },
               {"RelTerms.dist_bias", "f32[2, 6]"});
  a.dist_bias = var({3, 6}, DType::F64);
  expect_error([&] { relative_logits(q, k, Variable(), 1.0, a); }, {"relative_logits", "cpu f64[3, 6]"});
  a.dist_bias = var({3, 6});
  expect_error([&] { fused_causal_attention(q, k, v, var({3, 4, 6}), 1.0, 0, a); },
               {"fused_causal_attention", "dist_bias and a bias are exclusive"});
  // the backend's own check (core/attention_checks.cpp)
  AttnDims d;
  d.B = 2, d.H = 3, d.T = 4, d.S = 6, d.Dh = 5;
  AttnRel rel;
  rel.dist_bias = Tensor::zeros({3, 2});
  Tensor out = Tensor::empty({2, 3, 4, 5}), lse = Tensor::empty({2, 3, 4});
  expect_error([&] { backend(Device::CPU).attention_forward(d, q.data(), k.data(), v.data(), Tensor(), out, lse, rel); },
               {"attention_forward", "rel.dist_bias must be f32[3, n] with n >= S = 6", "f32[3, 2]"});
}

}  // namespace

// A constant table (RelTerms::dist_bias_constant: a fixed encoding's kept table) is gathered once
// per (table, T, S) where the backend takes a bias [H, T, S]: a second call with the same table is
// served the kept gather and gives the same bits as an uncached call; a trainable or a
// non-constant table is gathered every time; a table that is gone never serves its gather to a
// new table, even one at the same address and shape.
TEST(FusedAttentionDist, ConstantTablesKeepTheirGather) {
  const Case c{2, 2, 9, 13, 16, 0, 0, false};
  const Inputs in = make_inputs(c, DType::F32, 91);
  const double scale = 0.25;
  auto attend = [&](const Tensor& table, bool constant, bool trainable) {
    RelTerms rel;
    rel.dist_bias = Variable(table, trainable);
    rel.dist_bias_constant = constant;
    NoGradGuard ng;
    return fused_causal_attention(Variable(in.q), Variable(in.k), Variable(in.v), Variable(), scale, 0, rel)
        .data()
        .to_vector<float>();
  };
  const Tensor table = in.table.clone();
  const uint64_t h0 = kept_dist_bias_gathers();
  const auto plain = attend(table, false, false);
  EXPECT_EQ(kept_dist_bias_gathers(), h0) << "a non-constant table was served a kept gather";
  const auto first = attend(table, true, false), second = attend(table, true, false);
  EXPECT_EQ(kept_dist_bias_gathers(), h0 + 1) << "the second call did not reuse the gather";
  EXPECT_EQ(first, plain);
  EXPECT_EQ(second, plain);
  attend(table, true, true);
  EXPECT_EQ(kept_dist_bias_gathers(), h0 + 1) << "a trainable table was served a kept gather";
  // a new table with other values in place of the old one (freed first: the allocator may hand
  // back the same block)
  std::vector<float> other = in.table.to_vector<float>();
  for (float& x : other) x = -x;
  {
    Tensor gone = in.table.clone();
    attend(gone, true, false);
  }
  const Tensor fresh = Tensor::from_vector(other, in.table.shape());
  const auto got = attend(fresh, true, false);
  EXPECT_EQ(got, attend(fresh, false, false)) << "a gone table's gather was served to a new one";
  EXPECT_NE(got, plain);
}
