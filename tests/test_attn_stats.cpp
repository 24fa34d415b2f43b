// tests/test_attn_stats.cpp — attention statistics (eval --attn-stats): the fused CPU kernel's
// row statistics (AttnRowStats: entropy, sink mass, mean distance per query row) equal the
// composed reference (attention_row_stats of the materialised probabilities) over shapes with
// T = 1, S > T, several key tiles, windows and a bias; both equal closed forms where the
// attention is known (uniform over n keys: log n, (n - 1) / 2; one-hot; a geometric bias whose
// max moves across tiles); and through a model: evaluate() reports per layer and head the means
// of those closed forms for a model whose queries and keys are 0, with the fused path on and
// off, and the two paths agree on random models (rope, alibi's bias, shaw's and deberta's
// relative terms). Bad requests are one-line errors.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/ops_attention.h"
#include "core/fast_paths.h"
#include "core/rng.h"
#include "nn/attn_stats.h"
#include "nn/gpt.h"
#include "tests/test_util.h"
#include "train/eval.h"

using namespace ctx;
using ctx::testing_util::expect_error;
using ctx::testing_util::rel_err;
using ctx::testing_util::uniform_tensor;

namespace {

struct StatsCase {
  int64_t B, H, T, S, Dh, window;
  bool bias;
};

// Fused (kernel) and composed row statistics of the same attention; also checks that asking for
// the statistics leaves the output unchanged.
void expect_fused_equals_composed(const StatsCase& c, DType dt, double tol, uint64_t seed) {
  SCOPED_TRACE("B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " T" + std::to_string(c.T) + " S" +
               std::to_string(c.S) + " window " + std::to_string(c.window) + (c.bias ? " bias" : "") +
               (dt == DType::F32 ? " f32" : " f64"));
  Rng r(seed);
  const Variable q(uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, dt, -2.0, 2.0), false);
  const Variable k(uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt, -2.0, 2.0), false);
  const Variable v(uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt), false);
  const Variable b = c.bias ? Variable(uniform_tensor(r, {c.H, c.T, c.S}, dt, -3.0, 3.0), false) : Variable();
  const double scale = 1.0 / std::sqrt((double)c.Dh);
  AttnRowStats fused, composed;
  fused.sink_keys = composed.sink_keys = 3;
  const Variable o_plain = fused_causal_attention(q, k, v, b, scale, c.window);
  const Variable o = fused_causal_attention(q, k, v, b, scale, c.window, {}, 0, {}, &fused);
  causal_attention_composed(q, k, v, b, scale, c.window, {}, {}, &composed);
  ASSERT_TRUE(fused.rows.defined() && composed.rows.defined());
  EXPECT_EQ(fused.rows.dtype(), dt) << "the kernel's own rows (the composed reference is f64)";
  EXPECT_EQ(rel_err(o.data(), o_plain.data()), 0.0) << "the statistics changed the output";
  ASSERT_EQ(shape_str(fused.rows.shape()), shape_str(Shape{c.B, c.H, c.T, 3}));
  // per column (entropy, sink mass, distance), relative to the column's largest value
  for (int col = 0; col < 3; ++col) {
    double num = 0, den = 0;
    for (int64_t x = 0; x < c.B * c.H * c.T; ++x) {
      num = std::max(num, std::fabs(fused.rows.at(x * 3 + col) - composed.rows.at(x * 3 + col)));
      den = std::max(den, std::fabs(composed.rows.at(x * 3 + col)));
    }
    EXPECT_LE(num, tol * std::max(den, 1.0)) << "column " << col;
  }
}

TEST(AttnStats, FusedKernelEqualsComposed) {
  const std::vector<StatsCase> cases = {
      {1, 1, 1, 1, 4, 0, false},     {2, 2, 3, 3, 8, 0, true},      {1, 2, 5, 9, 8, 0, false},
      {2, 3, 70, 70, 16, 0, true},   {1, 2, 150, 150, 8, 0, false}, {1, 2, 150, 150, 8, 37, true},
      {2, 1, 40, 140, 8, 64, false}, {1, 1, 3, 200, 8, 0, true},    {1, 2, 130, 130, 8, 1, false}};
  for (const StatsCase& c : cases) {
    expect_fused_equals_composed(c, DType::F64, 1e-10, 11 + (uint64_t)c.T);
    expect_fused_equals_composed(c, DType::F32, 2e-5, 23 + (uint64_t)c.T);
  }
}

// The statistics of p_ij proportional to w_j over the keys row i sees (closed forms in double).
struct Expected {
  double entropy = 0, sink = 0, dist = 0;
};
Expected expected_row(const std::vector<double>& w, int64_t i_pos, int64_t lo, int64_t hi, int64_t sinks) {
  double z = 0;
  for (int64_t j = lo; j <= hi; ++j) z += w[(size_t)j];
  Expected e;
  for (int64_t j = lo; j <= hi; ++j) {
    const double p = w[(size_t)j] / z;
    if (p > 0) e.entropy -= p * std::log(p);
    if (j < sinks) e.sink += p;
    e.dist += p * (double)(i_pos - j);
  }
  return e;
}

// q = 0: every visible key gets the same logit plus bias_j; checks the fused and the composed rows
// against expected_row with weights e^bias_j.
void expect_known(int64_t T, int64_t S, int64_t window, const std::vector<double>& bias_j, double tol) {
  SCOPED_TRACE("T " + std::to_string(T) + " S " + std::to_string(S) + " window " + std::to_string(window));
  const int64_t sinks = 4;
  Rng r(5);
  const Variable q(Tensor::zeros({1, 1, T, 8}, DType::F64), false);
  const Variable k(uniform_tensor(r, {1, 1, S, 8}, DType::F64), false);
  const Variable v(uniform_tensor(r, {1, 1, S, 8}, DType::F64), false);
  Tensor bt = Tensor::zeros({1, T, S}, DType::F64);
  std::vector<double> w((size_t)S);
  for (int64_t j = 0; j < S; ++j) {
    w[(size_t)j] = std::exp(bias_j[(size_t)j]);
    for (int64_t i = 0; i < T; ++i) bt.set(i * S + j, bias_j[(size_t)j]);
  }
  const Variable b(bt, false);
  for (bool fused : {true, false}) {
    AttnRowStats st;
    st.sink_keys = sinks;
    if (fused) fused_causal_attention(q, k, v, b, 1.0, window, {}, 0, {}, &st);
    else causal_attention_composed(q, k, v, b, 1.0, window, {}, {}, &st);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t pos = i + S - T, lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
      const Expected e = expected_row(w, pos, lo, pos, sinks);
      EXPECT_NEAR(st.rows.at(i * 3), e.entropy, tol) << (fused ? "fused" : "composed") << " row " << i;
      EXPECT_NEAR(st.rows.at(i * 3 + 1), e.sink, tol) << (fused ? "fused" : "composed") << " row " << i;
      EXPECT_NEAR(st.rows.at(i * 3 + 2), e.dist, tol * (1 + e.dist)) << (fused ? "fused" : "composed") << " row "
                                                                     << i;
    }
  }
}

TEST(AttnStats, UniformAttentionIsLogN) {
  // no bias: query i (at position i) attends uniformly to n = i + 1 keys (min(i + 1, W) with a
  // window): entropy log n, mean distance (n - 1) / 2, sink mass min(4, n) / n
  for (int64_t window : {0, 5, 70}) {
    const int64_t T = 150;
    expect_known(T, T, window, std::vector<double>((size_t)T, 0.0), 1e-12);
    // spot-check the closed form itself at row 99 without a window
    if (window == 0) {
      const Expected e = expected_row(std::vector<double>(150, 1.0), 99, 0, 99, 4);  // weights e^0
      EXPECT_NEAR(e.entropy, std::log(100.0), 1e-12);
      EXPECT_NEAR(e.dist, 49.5, 1e-12);
      EXPECT_NEAR(e.sink, 0.04, 1e-12);
    }
  }
}

TEST(AttnStats, PeakedAndGeometricAttention) {
  const int64_t S = 200;
  // one-hot on key 0 (a sink): entropy 0, sink mass 1, distance = the query's position
  std::vector<double> onehot((size_t)S, -200.0);
  onehot[0] = 0;
  expect_known(S, S, 0, onehot, 1e-9);
  // logits rising with j: the running max moves at every key tile (the kernel's rescaling)
  std::vector<double> geo((size_t)S);
  for (int64_t j = 0; j < S; ++j) geo[(size_t)j] = 0.05 * (double)j;
  expect_known(S, S, 0, geo, 1e-10);
  expect_known(30, S, 90, geo, 1e-10);  // queries past a memory prefix, a window over two tiles
}

// A model whose queries and keys are 0 (the q and k rows of every qkv projection zeroed): every
// head attends uniformly, so evaluate() must report the means of the closed forms over positions.
TEST(AttnStats, EvaluateReportsUniformModel) {
  ModelConfig cfg = testing_util::two_head_cfg(256, 16, 2, 32, 32, {{"type", "none"}});
  nn::GPT model(cfg);
  model.init_weights(3);
  for (auto& blk : model.blocks) {
    Tensor& w = blk->attn->qkv->weight.data();  // [3D, D]: rows 0..2D-1 make q and k
    Tensor& bb = blk->attn->qkv->bias.data();
    for (int64_t x = 0; x < 2 * cfg.d_model * cfg.d_model; ++x) w.set(x, 0.0);
    for (int64_t x = 0; x < 2 * cfg.d_model; ++x) bb.set(x, 0.0);
  }
  std::vector<int32_t> tokens(33 * 3);
  Rng rng(9);
  for (auto& t : tokens) t = (int32_t)rng.below(256);
  const int64_t L = 32, K = 4;
  for (int64_t window : {0, 6}) {
    double ent = 0, dist = 0, sink = 0;
    for (int64_t i = 0; i < L; ++i) {
      const double n = (double)(window > 0 ? std::min<int64_t>(i + 1, window) : i + 1);
      ent += std::log(n) / (double)L;
      dist += (n - 1) / 2 / (double)L;
      const int64_t lo = (int64_t)(i + 1 - (int64_t)n);
      sink += (double)std::max<int64_t>(0, std::min<int64_t>(K, i + 1) - lo) / n / (double)L;
    }
    for (bool fused : {true, false}) {
      SCOPED_TRACE(std::string(fused ? "fused" : "composed") + " window " + std::to_string(window));
      set_fast_path(FastPath::Attention, fused);
      EvalMode mode;
      mode.window = window;
      const EvalResult e = evaluate(model, tokens, L, 2, 0, "tokens", mode, nullptr, 0, K);
      reset_fast_path(FastPath::Attention);
      ASSERT_EQ(e.attn.size(), 2u);
      EXPECT_EQ(e.attn_sink_keys, K);
      for (const auto& layer : e.attn) {
        ASSERT_EQ(layer.size(), 2u);
        for (const nn::HeadAttnStats& h : layer) {
          EXPECT_EQ(h.rows, 3 * L) << "every query row of the 3 windows";
          EXPECT_NEAR(h.entropy, ent, 1e-5);
          EXPECT_NEAR(h.distance, dist, 1e-4);
          EXPECT_NEAR(h.sink_mass, sink, 1e-6);
        }
      }
    }
  }
  EXPECT_EQ(model.attention_window(), 0) << "evaluate() restores the model's window";
}

// Random models whose encodings take the fused kernel with a bias (alibi) or relative terms the
// kernel gathers in its tiles (shaw, deberta): the kernel's statistics per head equal the
// composed path's, and the heads differ (the table is not one number repeated).
TEST(AttnStats, EvaluateFusedEqualsComposedOnModels) {
  for (const nlohmann::json& pe :
       {nlohmann::json{{"type", "rope"}}, nlohmann::json{{"type", "alibi"}},
        nlohmann::json{{"type", "shaw"}, {"max_relative_position", 4}},
        nlohmann::json{{"type", "deberta"}, {"position_buckets", 4}, {"max_relative_positions", 8}}}) {
    SCOPED_TRACE(pe.dump());
    ModelConfig cfg = testing_util::two_head_cfg(256, 16, 2, 32, 48, pe);
    nn::GPT model(cfg);
    model.init_weights(4);
    testing_util::randomize_weights(model, 21, 0.4);
    Rng rng(22);
    std::vector<int32_t> tokens(49 * 2);
    for (auto& t : tokens) t = (int32_t)rng.below(256);
    std::vector<EvalResult> res;
    for (bool fused : {true, false}) {
      set_fast_path(FastPath::Attention, fused);
      res.push_back(evaluate(model, tokens, 48, 2, 0, "tokens", {}, nullptr, 0, 4));
      reset_fast_path(FastPath::Attention);
    }
    EXPECT_NEAR(res[0].loss, res[1].loss, 1e-5);
    for (size_t l = 0; l < 2; ++l)
      for (size_t h = 0; h < 2; ++h) {
        const nn::HeadAttnStats &a = res[0].attn[l][h], &b = res[1].attn[l][h];
        EXPECT_NEAR(a.entropy, b.entropy, 1e-5) << l << "." << h;
        EXPECT_NEAR(a.sink_mass, b.sink_mass, 1e-6) << l << "." << h;
        EXPECT_NEAR(a.distance, b.distance, 1e-4) << l << "." << h;
        EXPECT_LT(a.entropy, std::log(48.0)) << "bounded by uniform over the longest row";
      }
    EXPECT_GT(std::fabs(res[0].attn[0][0].entropy - res[0].attn[1][1].entropy), 1e-3);
  }
}

TEST(AttnStats, BadRequestsAreOneLineErrors) {
  expect_error([] { nn::AttnStatsCollector c(2, 2, 0); }, {"--attn-sinks must be >= 1", "got 0"});
  nn::AttnStatsCollector c(2, 2, 4);
  expect_error([&] { c.add(0, Tensor::zeros({1, 3, 4, 3}, DType::F32)); }, {"rows must be [B, 2, T, 3]"});
  expect_error([] { attention_row_stats(Tensor::zeros({2, 2}, DType::F32), 4); }, {"attention_row_stats", "[B, H, T, S]"});
  ModelConfig cfg = testing_util::two_head_cfg(256, 16, 1, 32, 16, {{"type", "none"}});
  nn::GPT model(cfg);
  nn::AttnStatsCollector wrong(3, 2, 4);
  expect_error([&] { model.set_attention_stats(&wrong); }, {"set_attention_stats", "3 layers", "1 x 2"});
  std::vector<int32_t> tokens(40, 1);
  expect_error([&] { evaluate(model, tokens, 16, 1, 0, "tokens", {}, nullptr, 0, -1); },
               {"attn_sink_keys must be >= 0", "-1"});
}

}  // namespace
