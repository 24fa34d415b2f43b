// tests/test_fused_attention_rel.cpp — the content-position terms of fused attention (RelTerms
// in autograd/ops_attention.h: qrel / krel gathered into the logits, the vrel value term): the
// fused kernel against the composed version (index_select / scatter_add) in f32 and f64, output
// and every gradient, over shapes with one and several 64-key tiles, a memory prefix, windows and
// a bias alongside; f64 gradchecks of the fused op with each term; indices no (i, j) reaches get
// exactly zero gradient; argument errors name the field and the expected shape.
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
using ctx::testing_util::rel_err;
using ctx::testing_util::uniform_tensor;
using ctx::testing_util::expect_error;

namespace {


// i32 [T, S] index tables as the encodings build them (query i at position i + S - T):
// a clipped relative distance (shaw-like, R = 2K + 1) or the bare distance (xl-like, R = S).
Tensor clipped_index(int64_t T, int64_t S, int64_t K) {
  Tensor t = Tensor::empty({T, S}, DType::I32);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j)
      t.data<int32_t>()[i * S + j] = (int32_t)(std::min(std::max(j - (S - T + i), -K), K) + K);
  return t;
}
Tensor distance_index(int64_t T, int64_t S) {
  Tensor t = Tensor::empty({T, S}, DType::I32);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j) t.data<int32_t>()[i * S + j] = (int32_t)std::max<int64_t>(S - T + i - j, 0);
  return t;
}

// Which terms a case carries.
struct Terms {
  bool qrel, krel, vrel, bias;
  bool distance;  // qidx = distance (R = S) instead of clipped (R = 2K + 1)
};

struct Case {
  int64_t B, H, T, S, Dh, K, window;
  Terms terms;
  std::string str() const {
    return "B" + std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) + " S" +
           std::to_string(S) + " Dh" + std::to_string(Dh) + " K" + std::to_string(K) + " window " +
           std::to_string(window) + (terms.qrel ? " qrel" : "") + (terms.krel ? " krel" : "") +
           (terms.vrel ? " vrel" : "") + (terms.bias ? " bias" : "") + (terms.distance ? " (distance)" : "");
  }
};

struct Inputs {
  Tensor q, k, v, bias, qrel, krel, vrel, qidx, kidx;
};

Inputs make_inputs(const Case& c, DType dt, Rng& r) {
  Inputs x;
  x.q = uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, dt, -1.5, 1.5);
  x.k = uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt, -1.5, 1.5);
  x.v = uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt);
  x.qidx = c.terms.distance ? distance_index(c.T, c.S) : clipped_index(c.T, c.S, c.K);
  const int64_t Rq = c.terms.distance ? c.S : 2 * c.K + 1, Rk = 2 * c.K + 1;
  x.kidx = clipped_index(c.T, c.S, c.K);
  if (c.terms.qrel) x.qrel = uniform_tensor(r, {c.B, c.H, c.T, Rq}, dt, -2.0, 2.0);
  if (c.terms.krel) x.krel = uniform_tensor(r, {c.B, c.H, c.S, Rk}, dt, -2.0, 2.0);
  if (c.terms.vrel) x.vrel = uniform_tensor(r, {Rq, c.Dh}, dt);
  if (c.terms.bias) x.bias = uniform_tensor(r, {c.H, c.T, c.S}, dt, -1.0, 1.0);
  return x;
}

struct Outcome {
  Variable q, k, v, bias, o;
  RelTerms rel;
};

Outcome run(const Inputs& in, const Case& c, const Tensor& seed_grad, bool fused, const DropoutMask& drop = {}) {
  auto leaf = [](const Tensor& t) { return t.defined() ? Variable(t.clone(), true) : Variable(); };
  Outcome x{leaf(in.q), leaf(in.k), leaf(in.v), leaf(in.bias), Variable(), {}};
  x.rel.qidx = in.qidx;
  x.rel.kidx = in.kidx;
  x.rel.qrel = leaf(in.qrel);
  x.rel.krel = leaf(in.krel);
  x.rel.vrel = leaf(in.vrel);
  const double scale = 1.0 / std::sqrt((double)c.Dh);
  x.o = fused ? fused_causal_attention(x.q, x.k, x.v, x.bias, scale, c.window, x.rel, 0, drop)
              : causal_attention_composed(x.q, x.k, x.v, x.bias, scale, c.window, x.rel, drop);
  x.o.backward(seed_grad);
  return x;
}

// drop: the same dropout mask on both paths (inactive: none)
void compare_with_composed(const Case& c, DType dt, double tol, uint64_t seed, const DropoutMask& drop = {}) {
  SCOPED_TRACE(c.str() + (dt == DType::F32 ? " f32" : " f64") + (drop.active() ? " dropout" : ""));
  Rng r(seed);
  const Inputs in = make_inputs(c, dt, r);
  const Tensor g = uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, dt);
  Outcome f = run(in, c, g, true, drop), u = run(in, c, g, false, drop);
  EXPECT_EQ(f.o.op_name(), "fused_causal_attention");
  EXPECT_LE(rel_err(f.o.data(), u.o.data()), tol) << "output";
  EXPECT_LE(rel_err(f.q.grad(), u.q.grad()), tol) << "dq";
  EXPECT_LE(rel_err(f.k.grad(), u.k.grad()), tol) << "dk";
  EXPECT_LE(rel_err(f.v.grad(), u.v.grad()), tol) << "dv";
  if (c.terms.bias) {
    EXPECT_LE(rel_err(f.bias.grad(), u.bias.grad()), tol) << "dbias";
  }
  if (c.terms.qrel) {
    EXPECT_LE(rel_err(f.rel.qrel.grad(), u.rel.qrel.grad()), tol) << "dqrel";
  }
  if (c.terms.krel) {
    EXPECT_LE(rel_err(f.rel.krel.grad(), u.rel.krel.grad()), tol) << "dkrel";
  }
  if (c.terms.vrel) {
    EXPECT_LE(rel_err(f.rel.vrel.grad(), u.rel.vrel.grad()), tol) << "dvrel";
  }
}

// The encodings' combinations (shaw: qrel + vrel; deberta: qrel + krel; xl: qrel by distance;
// tupe-like: bias only is the plain kernel) and all terms at once, over shapes with one tile,
// several tiles, a memory prefix (S > T) and windows.
std::vector<Case> all_cases() {
  const std::vector<Terms> terms = {
      {true, false, true, false, false},  // shaw
      {true, true, false, false, false},  // deberta
      {true, false, false, false, true},  // xl
      {false, false, true, false, false}, // value term alone
      {false, true, false, true, false},  // key term with a bias
      {true, true, true, true, false},    // everything
  };
  const std::vector<std::array<int64_t, 6>> shapes = {
      // B, H, T, S, Dh, K
      {1, 1, 1, 1, 4, 1}, {2, 3, 5, 5, 7, 2}, {2, 2, 9, 13, 16, 3},
      {1, 2, 70, 70, 8, 16}, {2, 1, 67, 131, 5, 4}, {1, 2, 130, 130, 33, 70},
  };
  std::vector<Case> cases;
  for (auto& s : shapes)
    for (const Terms& t : terms)
      for (int64_t w : {int64_t(0), int64_t(3)}) cases.push_back({s[0], s[1], s[2], s[3], s[4], s[5], w, t});
  return cases;
}

TEST(FusedAttentionRel, MatchesComposedF32) {
  uint64_t seed = 100;
  for (const Case& c : all_cases()) compare_with_composed(c, DType::F32, 2e-5, seed++);
}

TEST(FusedAttentionRel, MatchesComposedF64) {
  uint64_t seed = 300;
  for (const Case& c : all_cases()) compare_with_composed(c, DType::F64, 1e-10, seed++);
}

// Dropout inside the kernels: the value term's weights and dvrel take the dropped
// probabilities, ds the undropped ones times the mask (AttnDims::dropout).
TEST(FusedAttentionRel, MatchesComposedWithDropout) {
  uint64_t seed = 500;
  for (const Case& c : all_cases()) {
    compare_with_composed(c, DType::F32, 2e-5, seed, dropout_mask(0.3, seed));
    compare_with_composed(c, DType::F64, 1e-10, seed + 1, dropout_mask(0.5, seed + 1));
    seed += 2;
  }
}

TEST(FusedAttentionRel, GradcheckF64EachTerm) {
  Rng r(7);
  for (const Terms& t : std::vector<Terms>{{true, false, true, false, false},
                                           {true, true, false, true, false},
                                           {true, false, false, false, true}}) {
    for (const Case& c : {Case{2, 2, 4, 6, 3, 1, 0, t}, Case{1, 2, 5, 5, 4, 2, 2, t}}) {
      SCOPED_TRACE(c.str());
      const Inputs in = make_inputs(c, DType::F64, r);
      std::vector<Tensor> leaves = {in.q, in.k, in.v};
      std::vector<std::string> names = {"q", "k", "v"};
      for (auto [x, name] : {std::pair<Tensor, const char*>{in.qrel, "qrel"}, {in.krel, "krel"},
                             {in.vrel, "vrel"}, {in.bias, "bias"}})
        if (x.defined()) {
          leaves.push_back(x);
          names.push_back(name);
        }
      GradcheckResult res = gradcheck(
          [&](const std::vector<Variable>& x) {
            RelTerms rel;
            rel.qidx = in.qidx;
            rel.kidx = in.kidx;
            size_t n = 3;
            if (c.terms.qrel) rel.qrel = x[n++];
            if (c.terms.krel) rel.krel = x[n++];
            if (c.terms.vrel) rel.vrel = x[n++];
            Variable bias = c.terms.bias ? x[n++] : Variable();
            return fused_causal_attention(x[0], x[1], x[2], bias, 0.7, c.window, rel);
          },
          leaves, names);
      EXPECT_TRUE(res.pass) << res.summary();
    }
  }
}

TEST(FusedAttentionRel, UnreachedIndicesGetZeroGradient) {
  // K = 6 with T = S = 4: clipped distances span 6 - 3 .. 6 + 3 only, and causally only
  // j - i <= 0 is visible, so columns above K of qrel / rows of vrel get exactly zero
  const Case c{1, 2, 4, 4, 3, 6, 0, {true, false, true, false, false}};
  Rng r(5);
  const Inputs in = make_inputs(c, DType::F32, r);
  Outcome f = run(in, c, uniform_tensor(r, {1, 2, 4, 3}, DType::F32), true);
  const Tensor dq = f.rel.qrel.grad(), dv = f.rel.vrel.grad();
  for (int64_t x = 0; x < dq.numel(); ++x)
    if (x % 13 > 6) {
      EXPECT_EQ(dq.at(x), 0.0) << "qrel column " << x % 13;
    }
  for (int64_t rr = 7; rr < 13; ++rr)
    for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(dv.at(rr * 3 + d), 0.0) << "vrel row " << rr;
  double seen = 0;
  for (int64_t d = 0; d < 3; ++d) seen += std::fabs(dv.at(6 * 3 + d));  // the diagonal's row
  EXPECT_GT(seen, 0.0);
}

TEST(FusedAttentionRel, ErrorsNameTheFieldAndExpectedShape) {
  auto var = [](const Shape& s, DType dt = DType::F32) { return Variable(Tensor::zeros(s, dt), true); };
  const Variable q = var({2, 3, 4, 5}), k = var({2, 3, 6, 5}), v = var({2, 3, 6, 5});
  const std::string op = "fused_causal_attention";
  auto call = [&](const RelTerms& rel) { fused_causal_attention(q, k, v, Variable(), 1.0, 0, rel); };
  RelTerms a;
  a.qrel = var({2, 3, 4, 7});
  expect_error([&] { call(a); }, {op, "RelTerms.qidx", "required"});
  a.qidx = Tensor::zeros({4, 6}, DType::I64);
  expect_error([&] { call(a); }, {op, "RelTerms.qidx", "i32 [T, S] = [4, 6]", "i64[4, 6]"});
  a.qidx = Tensor::zeros({4, 5}, DType::I32);
  expect_error([&] { call(a); }, {op, "RelTerms.qidx", "i32[4, 5]"});
  a.qidx = Tensor::zeros({4, 6}, DType::I32);
  a.qidx.data<int32_t>()[1 * 6 + 2] = 7;
  expect_error([&] { call(a); }, {op, "RelTerms.qidx[1, 2] = 7", "outside [0, 7)"});
  a.qidx.data<int32_t>()[1 * 6 + 2] = -1;
  expect_error([&] { call(a); }, {op, "RelTerms.qidx[1, 2] = -1"});
  a.qidx.data<int32_t>()[1 * 6 + 2] = 0;
  a.qrel = var({2, 3, 6, 7});
  expect_error([&] { call(a); }, {op, "RelTerms.qrel must be cpu f32[2, 3, 4, 7]", "f32[2, 3, 6, 7]"});
  a.qrel = var({4, 7});
  expect_error([&] { call(a); }, {op, "RelTerms.qrel must be [B, H, T, Rq]", "f32[4, 7]"});
  a.qrel = var({2, 3, 4, 7});
  a.vrel = var({7, 4});
  expect_error([&] { call(a); }, {op, "RelTerms.vrel must be cpu f32[7, 5]", "f32[7, 4]"});
  a.vrel = var({7, 5}, DType::F64);
  expect_error([&] { call(a); }, {op, "RelTerms.vrel must be cpu f32[7, 5]", "got cpu f64[7, 5]"});
  RelTerms b;
  b.krel = var({2, 3, 4, 3});
  b.kidx = Tensor::zeros({4, 6}, DType::I32);
  expect_error([&] { call(b); }, {op, "RelTerms.krel must be cpu f32[2, 3, 6, 3]", "f32[2, 3, 4, 3]"});
  // the composed halves check the same fields
  expect_error([&] { relative_logits(q, k, Variable(), 1.0, a); }, {"relative_logits", "f64[7, 5]"});
  RelTerms c;
  c.vrel = var({3, 5});
  c.qidx = Tensor::zeros({4, 6}, DType::I32);
  c.qidx.data<int32_t>()[0] = 3;
  expect_error([&] { relative_output(var({2, 3, 4, 6}), v, c); }, {"relative_output", "RelTerms.qidx[0, 0] = 3"});
}

}  // namespace
