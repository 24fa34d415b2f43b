// tests/test_fire_table.cpp — FIRE as a per-head distance table (posenc/fire.cpp, Fire::terms;
// FastPath::FireTable): where every query of a call sits strictly below thr = |L_multiplier init_L|,
// the encoding hands the attention table[h, r] = f(psi(r) / (psi(thr) + eps))_h over the S
// distances (RelTerms::dist_bias) instead of the [1, H, T, S] bias. In float64, against the
// per-element path (the switch off): the bias values at every visible (i, j), the attention's
// output and the gradients of q, k, v and every FIRE parameter (c, L_multiplier, mlp.*), fused and
// composed, over S > T (a KV cache's q_pos0 = S - T), windows, per-layer and shared FIRE; a model's
// loss and gradients; finite-difference gradchecks through the table; calls with a query at or
// above thr (a tie included) keep the per-element bias. The CUDA tensor-core side is in
// tests/test_cuda_model.cpp (DistanceTablesTakeTheTensorCoresAndMatchTheCpu).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/ops_attention.h"
#include "core/fast_paths.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "posenc/posenc.h"
#include "tests/test_util.h"

using namespace ctx;
using json = nlohmann::json;
using ctx::testing_util::rel_err;
using ctx::testing_util::uniform_tensor;

namespace {

// The switch for the scope (on: the table where it applies; off: the per-element bias).
struct TableSwitch {
  explicit TableSwitch(bool on) { set_fast_path(FastPath::FireTable, on); }
  ~TableSwitch() { reset_fast_path(FastPath::FireTable); }
};

// A float64 FIRE GPT of 2 layers, 2 heads of Dh 4; c moved off its init so that psi is curved.
nn::GPT fire_gpt(json pe) {
  pe["type"] = "fire";
  pe["mlp_width"] = 6;
  pe["init_c"] = 0.7;
  nn::GPT m(testing_util::two_head_cfg(11, 8, 2, 16, 64, pe), DType::F64);
  m.init_weights(7);
  return m;
}

struct Call {
  int64_t B, T, S, window;
  int layer;
  std::string str() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " S" + std::to_string(S) + " window " +
           std::to_string(window) + " layer " + std::to_string(layer);
  }
};

// One attention call's state: queries at q_pos0 = S - T against keys 0..S-1, q, k, v fresh leaves.
AttnState state(const Call& c, uint64_t seed) {
  Rng r(seed);
  AttnState st;
  st.layer = c.layer;
  st.B = c.B, st.H = 2, st.T = c.T, st.S = c.S, st.Dh = 4;
  st.q_pos0 = c.S - c.T;
  st.window = c.window;
  st.scale = 0.5;
  st.q = Variable(uniform_tensor(r, {c.B, 2, c.T, 4}, DType::F64, -1.5, 1.5), true);
  st.k = Variable(uniform_tensor(r, {c.B, 2, c.S, 4}, DType::F64, -1.5, 1.5), true);
  st.v = Variable(uniform_tensor(r, {c.B, 2, c.S, 4}, DType::F64), true);
  return st;
}

// What one path gives: the terms, the output, and the gradients (q, k, v, then every pe parameter).
struct Outcome {
  ScoreTerms terms;
  Tensor o;
  std::vector<std::pair<std::string, Tensor>> grads;
};

Outcome run(nn::GPT& m, const Call& c, bool table, bool fused) {
  TableSwitch sw(table);
  m.zero_grad();
  AttnState st = state(c, 11);
  Outcome x;
  x.terms = m.pe->score_terms(st);
  const ScoreTerms& t = x.terms;
  Variable o = fused ? m.pe->fused_attention(st, c.window)
                           : causal_attention_composed(t.q, st.k, st.v, t.bias, t.scale, c.window, t.rel);
  Rng r(5);
  o.backward(uniform_tensor(r, o.data().shape(), DType::F64));
  x.o = o.data();
  x.grads = {{"q", st.q.grad()}, {"k", st.k.grad()}, {"v", st.v.grad()}};
  const std::string layer_pe = "blocks." + std::to_string(c.layer) + ".attn.pe.";
  for (auto& [name, p] : m.named_parameters())
    if (name.rfind("pe.", 0) == 0 || name.rfind(layer_pe, 0) == 0)  // the module of the call
      x.grads.push_back({name, p.grad().defined() ? p.grad() : Tensor::zeros(p.data().shape(), DType::F64)});
  return x;
}

// Largest |element| of t.
double amax(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(t.at(i)));
  return m;
}
double amax_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < b.numel(); ++i) m = std::max(m, std::fabs(a.at(i) - b.at(i)));
  return m;
}

// |a - b| relative to b's largest element, or to `floor` where that is smaller: some FIRE
// gradients are rounding noise on both paths, by the softmax's invariance to a shift of a row
// (mlp.fc2.bias always, POSENC_SPEC §7.1; fc1.bias's units whose ReLU is on for every visible x),
// so each is held to a tenth of the largest gradient of its group at least.
double grad_err(const Tensor& a, const Tensor& b, double floor) { return amax_diff(a, b) / std::max(amax(b), floor); }

// a's gradients against b's (the same names). nonzero: c, L_multiplier and the weights must have
// a gradient (every query below thr), so that the comparison compares something.
void expect_same_grads(const Outcome& a, const Outcome& b, double tol, bool nonzero) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  double scale = 0;
  for (size_t i = 3; i < b.grads.size(); ++i) scale = std::max(scale, amax(b.grads[i].second));
  for (size_t i = 0; i < a.grads.size(); ++i) {
    const std::string& name = b.grads[i].first;
    SCOPED_TRACE(name);
    EXPECT_EQ(a.grads[i].first, name);
    const Tensor &ga = a.grads[i].second, &gb = b.grads[i].second;
    EXPECT_LE(grad_err(ga, gb, i < 3 ? 0.0 : 0.1 * scale), tol);
    if (nonzero && name.find("bias") == std::string::npos) {
      EXPECT_GT(amax(gb), 0.0) << "a gradient that is zero compares nothing";
    }
  }
}

// The table [H, S] against the per-element bias [1, H, T, S] at every visible (i, j):
// bias[h, i, j] = table[h, i + (S - T) - j].
void expect_table_is_the_bias(const Call& c, const Tensor& table, const Tensor& bias, double tol) {
  ASSERT_EQ(table.shape(), (Shape{2, c.S}));
  ASSERT_EQ(bias.shape(), (Shape{1, 2, c.T, c.S}));
  double worst = 0, scale = amax(bias);
  for (int64_t h = 0; h < 2; ++h)
    for (int64_t i = 0; i < c.T; ++i)
      for (int64_t j = 0; j <= i + c.S - c.T; ++j)
        worst = std::max(worst, std::fabs(table.at(h * c.S + i + c.S - c.T - j) - bias.at((h * c.T + i) * c.S + j)));
  EXPECT_LE(worst, tol * scale) << "table against the per-element bias";
}

const std::vector<Call>& calls() {
  static const std::vector<Call> v = {{2, 7, 7, 0, 0},  {1, 3, 12, 0, 1}, {2, 5, 9, 3, 0},
                                      {1, 1, 20, 0, 1}, {2, 9, 9, 4, 1},  {1, 6, 40, 5, 0}};
  return v;
}

// The table path (default init_L 512: every query below thr) against the per-element path.
TEST(FireTable, EqualsThePerElementBiasF64) {
  for (const json& pe : {json::object(), json{{"shared", true}}}) {
    nn::GPT m = fire_gpt(pe);
    for (const Call& c : calls())
      for (const bool fused : {true, false}) {
        SCOPED_TRACE(pe.dump() + " " + c.str() + (fused ? " fused" : " composed"));
        const Outcome tab = run(m, c, true, fused), elem = run(m, c, false, fused);
        ASSERT_TRUE(tab.terms.rel.dist_bias.defined()) << "the call did not take the table";
        EXPECT_FALSE(tab.terms.bias.defined());
        ASSERT_TRUE(elem.terms.bias.defined());
        EXPECT_FALSE(elem.terms.rel.dist_bias.defined());
        expect_table_is_the_bias(c, tab.terms.rel.dist_bias.data(), elem.terms.bias.data(), 1e-12);
        EXPECT_LE(rel_err(tab.o, elem.o), 1e-12) << "output";
        expect_same_grads(tab, elem, 1e-12, true);
      }
  }
}

// At or above thr the bias depends on i: the per-element path, with the switch on. thr = 8
// (init_L 8): S - 1 = 8 is the tie, S - 1 = 11 is above; init_L 12 puts it just past S - 1.
TEST(FireTable, AQueryAtOrAboveTheThresholdKeepsThePerElementBias) {
  struct Case { double init_L; Call c; bool table; };
  for (const Case& k : {Case{8, {1, 9, 9, 0, 0}, false}, Case{8, {2, 3, 12, 0, 1}, false},
                        Case{8, {1, 1, 9, 0, 0}, false}, Case{12, {1, 3, 12, 2, 1}, true},
                        Case{12, {1, 3, 13, 0, 0}, false}}) {
    nn::GPT m = fire_gpt(json{{"init_L", k.init_L}});
    SCOPED_TRACE("init_L " + std::to_string(k.init_L) + " " + k.c.str());
    const Outcome on = run(m, k.c, true, true), off = run(m, k.c, false, true);
    EXPECT_EQ(on.terms.rel.dist_bias.defined(), k.table);
    EXPECT_EQ(on.terms.bias.defined(), !k.table);
    EXPECT_LE(rel_err(on.o, off.o), 1e-12) << "output";
    expect_same_grads(on, off, 1e-12, k.table);
  }
}

// A model's loss and every gradient (T = S = 10 < thr) with the table and without, per-layer and
// shared; the model's own calls take the table (its encoding's terms of a call of its shape).
TEST(FireTable, ModelLossAndGradientsEqualThePerElementPathF64) {
  const Tensor in = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 10, 5, 0, 3, 3, 7, 1, 9, 4, 4}, {2, 10});
  for (const json& pe : {json::object(), json{{"shared", true}}}) {
    SCOPED_TRACE(pe.dump());
    nn::GPT m = fire_gpt(pe);
    std::vector<std::pair<double, std::vector<Tensor>>> runs;
    for (const bool table : {true, false}) {
      TableSwitch sw(table);
      AttnState st = state({2, 10, 10, 0, 1}, 3);
      EXPECT_EQ(m.pe->terms(st).rel.dist_bias.defined(), table);
      m.zero_grad();
      Variable loss = m.loss(in, in);
      loss.backward();
      std::vector<Tensor> g;
      for (auto& [name, p] : m.named_parameters()) g.push_back(p.grad());
      runs.push_back({loss.data().item(), g});
    }
    EXPECT_NEAR(runs[0].first, runs[1].first, 1e-12 * std::fabs(runs[1].first));
    const auto named = m.named_parameters();
    double pe_scale = 0;
    for (size_t i = 0; i < named.size(); ++i)
      if (named[i].first.find("pe.") != std::string::npos) pe_scale = std::max(pe_scale, amax(runs[1].second[i]));
    for (size_t i = 0; i < named.size(); ++i) {
      const bool pe_param = named[i].first.find("pe.") != std::string::npos;
      EXPECT_LE(grad_err(runs[0].second[i], runs[1].second[i], pe_param ? 0.1 * pe_scale : 0.0), 1e-11)
          << named[i].first;
    }
  }
}

// Finite differences through the table: a call with S > T and a window (every FIRE parameter of
// the layer), and a model's loss (the FIRE parameters).
TEST(FireTable, GradcheckF64ThroughTheTable) {
  TableSwitch sw(true);
  for (const json& pe : {json::object(), json{{"shared", true}}}) {
    SCOPED_TRACE(pe.dump());
    nn::GPT m = fire_gpt(pe);
    const Call c{2, 3, 8, 4, 1};
    AttnState st = state(c, 21);
    ASSERT_TRUE(m.pe->terms(st).rel.dist_bias.defined());
    Rng r(9);
    const Variable w(uniform_tensor(r, {c.B, 2, c.T, 4}, DType::F64), false);
    const GradcheckResult call = gradcheck_params(
        m.named_parameters(),
        [&] {
          AttnState s = st;
          s.terms.reset();
          return sum(mul(m.pe->fused_attention(s, c.window), w));
        },
        [](const std::string& n) { return n.find("pe.") != std::string::npos; });
    EXPECT_TRUE(call.pass) << call.summary();
    EXPECT_EQ(call.tensors.size(), pe.contains("shared") ? 6u : 12u);
    const Tensor in = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 10, 5}, {2, 6});
    const GradcheckResult model = gradcheck_params(
        m.named_parameters(), [&] { return m.loss(in, in); },
        [](const std::string& n) { return n.find("pe.") != std::string::npos; });
    EXPECT_TRUE(model.pass) << model.summary();
  }
}

}  // namespace
