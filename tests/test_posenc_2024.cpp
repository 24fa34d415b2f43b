// tests/test_posenc_2024.cpp — the 2023-24 encodings (POSENC_SPEC §7: fire, cope) and their ops
// (autograd/ops_posenc2024.h): f64 finite-difference gradchecks of fire_bias and cope_logits as one
// node (every differentiable input; FIRE at a threshold tie thr == i and with explicit, gapped
// positions); the forwards against per-element loops written from the spec; parameter names,
// shapes and initialisation (per layer and shared); the key errors (one line naming posenc.<key>).
// The model-level gradchecks are the posenc_gradcheck_{fire,cope} CLI tests; every device's
// kernels are in the backend table (test_backend_ops.cpp); PyTorch: pytorch_parity. ~1 s.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "tests/test_util.h"
#include "autograd/gradcheck.h"
#include "autograd/ops_attention.h"
#include "autograd/ops_posenc2024.h"
#include "core/rng.h"
#include "autograd/profiler.h"
#include "core/fast_paths.h"
#include "nn/gpt.h"

using namespace ctx;
using ctx::testing_util::expect_error;

namespace {

using testing_util::randn;
Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector<double>(v, s); }

ModelConfig tiny(const nlohmann::json& posenc, int64_t layers = 2) {
  ModelConfig c;
  c.vocab_size = 11;
  c.d_model = 8;
  c.n_layers = layers;
  c.n_heads = 2;
  c.d_ff = 16;
  c.context = 8;
  c.posenc = posenc;
  return c;
}

std::vector<std::string> pe_names(const nlohmann::json& pe) {
  nn::GPT m(tiny(pe));
  std::vector<std::string> v;
  for (auto& [n, p] : m.named_parameters())
    if (n.find("pe.") != std::string::npos) v.push_back(n + ":" + p.data().str());
  return v;
}

// ---- FIRE ----------------------------------------------------------------------------------
// Two rows of explicit positions (gaps, and a query at exactly thr = |lm init_L| = 3: the tie).
const Tensor kPq = f64({0, 1, 3, 4, 2, 3, 7, 9}, {2, 4});
const Tensor kPk = f64({0, 1, 3, 4, 2, 3, 7, 9}, {2, 4});

// f(x)_h of §7.1 for one pair, in double, written from the spec.
double fire_ref(double pi, double pj, double c, double lm, double init_L, double eps, const Tensor& w1,
                const Tensor& b1, const Tensor& w2, const Tensor& b2, int64_t h) {
  const double num = std::log(std::fabs(c * (pi - pj)) + 1);
  const double den = std::log(std::fabs(c * std::max(std::fabs(lm * init_L), pi)) + 1) + eps;
  const double x = num / den;
  double out = b2.at(h);
  for (int64_t w = 0; w < w1.size(0); ++w)
    out += w2.at(h * w1.size(0) + w) * std::max(0.0, w1.at(w) * x + b1.at(w));
  return out;
}

}  // namespace

TEST(Posenc2024, FireBiasMatchesTheSpecLoop) {
  const int64_t W = 5, H = 3;
  const Tensor c = f64({0.7}, {1}), lm = f64({1.0}, {1}), w1 = randn({W, 1}, 1, 1.0), b1 = randn({W}, 2),
               w2 = randn({H, W}, 3), b2 = randn({H}, 4);
  const Variable out = fire_bias(Variable(c), Variable(lm), Variable(w1), Variable(b1), Variable(w2), Variable(b2),
                                 kPq, kPk, 3.0, 1e-6);
  ASSERT_EQ(out.data().shape(), (Shape{2, H, 4, 4}));
  double worst = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 4; ++j) {
          const double ref = fire_ref(kPq.at(b * 4 + i), kPk.at(b * 4 + j), 0.7, 1.0, 3.0, 1e-6, w1, b1, w2, b2, h);
          worst = std::max(worst, std::fabs(out.data().at(((b * H + h) * 4 + i) * 4 + j) - ref));
        }
  EXPECT_LT(worst, 1e-13);
}

TEST(Posenc2024, GradcheckFireBiasAtTheThresholdTie) {
  const int64_t W = 6, H = 2;
  for (double init_L : {3.0, 2.5, 20.0}) {  // a tie at p = 3; rows above the threshold; all below
    GradFn f = [&](const std::vector<Variable>& v) {
      return fire_bias(v[0], v[1], v[2], v[3], v[4], v[5], kPq, kPk, init_L, 1e-6);
    };
    const GradcheckResult r = gradcheck(f, {f64({0.4}, {1}), f64({1.0}, {1}), randn({W, 1}, 5, 1.0), randn({W}, 6),
                                            randn({H, W}, 7), randn({H}, 8)},
                                        {"c", "L_multiplier", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"});
    EXPECT_TRUE(r.pass) << "init_L " << init_L << "\n" << r.summary();
    EXPECT_EQ(r.tensors.size(), 6u);
  }
}

// The tie splits the max's gradient 1/2 : 1/2 (torch.maximum): with every query at or below
// thr = 3, only the query at exactly 3 moves the normaliser, and d bias / d lm is half the
// one-sided derivative of thr.
TEST(Posenc2024, FireThresholdTieGivesHalfTheGradient) {
  const Tensor pq = f64({3}, {1, 1}), pk = f64({1}, {1, 1});
  auto dlm = [&](double init_L) {
    Variable lm(f64({1.0}, {1}), true);
    Variable out = fire_bias(Variable(f64({0.5}, {1})), lm, Variable(f64({1.0}, {1, 1})), Variable(f64({0.0}, {1})),
                             Variable(f64({1.0}, {1, 1})), Variable(f64({0.0}, {1})), pq, pk, init_L, 1e-6);
    sum(out).backward();
    return lm.grad().at(0);
  };
  const double tie = dlm(3.0), above = dlm(3.0 + 1e-9);  // thr just above the query: the whole gradient
  EXPECT_NEAR(tie, 0.5 * above, 1e-6 * std::fabs(above));
  EXPECT_GT(std::fabs(above), 1e-3);
  EXPECT_EQ(dlm(3.0 - 1e-9), 0.0);  // thr below the query: none
}

TEST(Posenc2024, FireParameterNamesPerLayerAndShared) {
  EXPECT_EQ(pe_names({{"type", "fire"}, {"mlp_width", 4}}),
            (std::vector<std::string>{
                "blocks.0.attn.pe.c:f32[1]", "blocks.0.attn.pe.L_multiplier:f32[1]",
                "blocks.0.attn.pe.mlp.fc1.weight:f32[4, 1]", "blocks.0.attn.pe.mlp.fc1.bias:f32[4]",
                "blocks.0.attn.pe.mlp.fc2.weight:f32[2, 4]", "blocks.0.attn.pe.mlp.fc2.bias:f32[2]",
                "blocks.1.attn.pe.c:f32[1]", "blocks.1.attn.pe.L_multiplier:f32[1]",
                "blocks.1.attn.pe.mlp.fc1.weight:f32[4, 1]", "blocks.1.attn.pe.mlp.fc1.bias:f32[4]",
                "blocks.1.attn.pe.mlp.fc2.weight:f32[2, 4]", "blocks.1.attn.pe.mlp.fc2.bias:f32[2]"}));
  EXPECT_EQ(pe_names({{"type", "fire"}, {"mlp_width", 4}, {"shared", true}}),
            (std::vector<std::string>{"pe.c:f32[1]", "pe.L_multiplier:f32[1]", "pe.mlp.fc1.weight:f32[4, 1]",
                                      "pe.mlp.fc1.bias:f32[4]", "pe.mlp.fc2.weight:f32[2, 4]", "pe.mlp.fc2.bias:f32[2]"}));
}

TEST(Posenc2024, FireInitialisationFollowsTheSpec) {
  nn::GPT m(tiny({{"type", "fire"}, {"init_c", 0.25}}));
  m.init_weights(3);
  for (auto& [n, p] : m.named_parameters()) {
    const Tensor t = p.data();
    if (n.find("pe.c") != std::string::npos) {
      EXPECT_FLOAT_EQ((float)t.at(0), 0.25f) << n;
    }
    if (n.find("pe.L_multiplier") != std::string::npos) {
      EXPECT_FLOAT_EQ((float)t.at(0), 1.0f) << n;
    }
    if (n.find("pe.mlp.fc") == std::string::npos) continue;
    const double k = n.find("fc1") != std::string::npos ? 1.0 : 1.0 / std::sqrt(32.0);  // 1/sqrt(fan_in)
    double lo = 1e300, hi = -1e300;
    for (int64_t i = 0; i < t.numel(); ++i) lo = std::min(lo, t.at(i)), hi = std::max(hi, t.at(i));
    EXPECT_GE(lo, -k) << n;
    EXPECT_LE(hi, k) << n;
    EXPECT_GT(hi - lo, 0.5 * k) << n << " looks constant";
  }
}

TEST(Posenc2024, FireKeyErrorsAreOneLineNamingTheKey) {
  auto bad = [](nlohmann::json pe, std::initializer_list<std::string> needles) {
    pe["type"] = "fire";
    expect_error([&] { nn::GPT m(tiny(pe)); }, needles);
  };
  bad({{"bogus", 1}}, {"posenc.bogus", "fire"});
  bad({{"mlp_width", 0}}, {"posenc.mlp_width", ">= 1"});
  bad({{"mlp_width", 2.5}}, {"posenc.mlp_width", "integer"});
  for (const char* k : {"init_c", "init_L", "eps"}) {
    bad({{k, 0}}, {std::string("posenc.") + k, "> 0"});
    bad({{k, "1"}}, {std::string("posenc.") + k, "number"});
  }
  bad({{"shared", 1}}, {"posenc.shared", "true or false"});
}

// ---- CoPE ----------------------------------------------------------------------------------
namespace {
// (q_i . k_j + e_ij) * scale of §7.2 for one (b, h) block, in double, written from the spec (qp0:
// position of query row 0; window 0: full causal; sinks: §6's first keys, visible beside the
// window). Invisible keys: e = 0, and they add no gate.
std::vector<double> cope_ref(const Tensor& q, const Tensor& k, const Tensor& E, int64_t bh, int64_t T, int64_t S,
                             int64_t d, int64_t qp0, int64_t window, int64_t sinks) {
  const int64_t np = E.size(1);
  const double scale = 1.0 / std::sqrt((double)d);
  std::vector<double> out((size_t)(T * S), 0.0);
  for (int64_t i = 0; i < T; ++i) {
    const int64_t qp = qp0 + i;
    auto qv = [&](int64_t c) { return q.at((bh * T + i) * d + c); };
    auto visible = [&](int64_t j) { return j <= qp && (window == 0 || j > qp - window || j < sinks); };
    auto dot = [&](int64_t j) {
      double a = 0;
      for (int64_t c = 0; c < d; ++c) a += qv(c) * k.at((bh * S + j) * d + c);
      return a * scale;
    };
    for (int64_t j = 0; j < S; ++j) {
      out[(size_t)(i * S + j)] = dot(j);
      if (!visible(j)) continue;
      double p = 0;
      for (int64_t kk = j; kk < S; ++kk)
        if (visible(kk)) p += 1.0 / (1.0 + std::exp(-dot(kk)));
      p = std::min(p, (double)(np - 1));
      auto z = [&](int64_t n) {
        double s = 0;
        for (int64_t c = 0; c < d; ++c) s += qv(c) * E.at(c * np + n);
        return s;
      };
      const double w = p - std::floor(p);
      out[(size_t)(i * S + j)] += (z((int64_t)std::ceil(p)) * w + z((int64_t)std::floor(p)) * (1 - w)) * scale;
    }
  }
  return out;
}
}  // namespace

// (S, q_pos0, window, sinks, npos): the sinks' cases leave a gap between the sinks and the window
using CopeCase = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;

TEST(Posenc2024, CopeLogitsMatchTheSpecLoop) {
  const int64_t B = 2, H = 2, T = 3, d = 4;
  for (auto [S, qp0, window, sinks, np] :
       {CopeCase{3, 0, 0, 0, 4}, {5, 2, 0, 0, 3}, {5, 2, 2, 0, 9}, {3, 0, 0, 0, 1}, {9, 6, 2, 2, 9}, {9, 6, 3, 1, 3}}) {
    const Tensor q = randn({B, H, T, d}, 11, 1.0), k = randn({B, H, S, d}, 12, 1.0), E = randn({d, np}, 13, 1.0);
    const Variable out =
        cope_logits(Variable(q), Variable(k), Variable(E), 1.0 / std::sqrt((double)d), qp0, window, sinks);
    ASSERT_EQ(out.data().shape(), (Shape{B, H, T, S}));
    double worst = 0;
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const std::vector<double> ref = cope_ref(q, k, E, bh, T, S, d, qp0, window, sinks);
      for (int64_t e = 0; e < T * S; ++e) worst = std::max(worst, std::fabs(out.data().at(bh * T * S + e) - ref[(size_t)e]));
    }
    EXPECT_LT(worst, 1e-12) << "S " << S << " q_pos0 " << qp0 << " window " << window << " sinks " << sinks
                            << " npos " << np;
  }
}

// Every input of the one node, with positions below and at the clamp (npos 3: sums of up to 5
// gates reach it), a decoding step's offset (q_pos0 2 of S 5 keys), a window, and a window with
// attention sinks (the gates of the sinks continue the window's sum across the gap).
TEST(Posenc2024, GradcheckCopeLogits) {
  const int64_t B = 2, H = 2, T = 3, d = 4;
  for (auto [S, qp0, window, sinks, np] :
       {CopeCase{3, 0, 0, 0, 4}, {5, 2, 0, 0, 3}, {5, 2, 2, 0, 9}, {9, 6, 2, 2, 3}, {9, 6, 3, 1, 9}}) {
    GradFn f = [=](const std::vector<Variable>& v) {
      return cope_logits(v[0], v[1], v[2], 1.0 / std::sqrt((double)d), qp0, window, sinks);
    };
    const GradcheckResult r =
        gradcheck(f, {randn({B, H, T, d}, 21, 1.0), randn({B, H, S, d}, 22, 1.0), randn({d, np}, 23, 1.0)},
                  {"q", "k", "pos_emb"});
    EXPECT_TRUE(r.pass) << "S " << S << " window " << window << " sinks " << sinks << "\n" << r.summary();
    EXPECT_EQ(r.tensors.size(), 3u);
  }
}

// CoPE's attention as one node (cope_attention: the row's softmax inside the kernel) is the
// composed path's causal_softmax(cope_logits) then p v (with sinks, nn/attention.cpp's: the hidden
// keys masked first, hidden_keys_mask): values and every input's gradient within 1e-12 in f64 (and
// within f32 tolerance), and its own f64 gradcheck, at the clamp, at a decoding offset, with a
// window, and with a window and sinks.
// cope_attention against causal_softmax(cope_logits) v for q [B, H, T, d], k and v [B, H, S, .],
// E [d, np]: the values and every input's gradient, f64 within 1e-12 and f32 within 2e-5.
static void expect_cope_attention_composed(int64_t B, int64_t H, int64_t T, int64_t S, int64_t qp0, int64_t window,
                                           int64_t sinks, int64_t np) {
  SCOPED_TRACE(str("T ", T, " S ", S, " q_pos0 ", qp0, " window ", window, " sinks ", sinks, " npos ", np));
  const int64_t d = 4, dv = 5;
  const double scale = 1.0 / std::sqrt((double)d);
  const std::vector<Tensor> in = {randn({B, H, T, d}, 31, 1.0), randn({B, H, S, d}, 32, 1.0),
                                  randn({B, H, S, dv}, 33, 1.0), randn({d, np}, 34, 1.0)};
  for (DType dt : {DType::F64, DType::F32}) {
    std::vector<Variable> a, b;
    for (const Tensor& t : in) a.emplace_back(t.to(dt), true), b.emplace_back(t.to(dt), true);
    Variable fused = cope_attention(a[0], a[1], a[2], a[3], scale, qp0, window, sinks);
    Variable s = cope_logits(b[0], b[1], b[3], scale, qp0, window, sinks);
    if (sinks > 0) s = masked_fill(s, hidden_keys_mask(T, S, window, sinks, s.data()), -INFINITY);
    Variable composed = matmul(causal_softmax(s, qp0, sinks > 0 ? 0 : window), b[2]);
    EXPECT_EQ(fused.op_name(), "cope_attention");
    const Tensor seed = randn({B, H, T, dv}, 35, 1.0).to(dt);
    fused.backward(seed);
    composed.backward(seed);
    const double tol = dt == DType::F64 ? 1e-12 : 2e-5;
    auto worst = [](const Tensor& x, const Tensor& y) {
      double w = 0;
      for (int64_t e = 0; e < x.numel(); ++e) w = std::max(w, std::fabs(x.at(e) - y.at(e)) / (1 + std::fabs(y.at(e))));
      return w;
    };
    EXPECT_LT(worst(fused.data(), composed.data()), tol) << dtype_name(dt) << " output";
    for (size_t i = 0; i < in.size(); ++i)
      EXPECT_LT(worst(a[i].grad(), b[i].grad()), tol) << dtype_name(dt) << " gradient of input " << i;
  }
}

TEST(Posenc2024, CopeAttentionIsTheComposedAttention) {
  ASSERT_TRUE(cope_attention_on(Device::CPU));
  const int64_t B = 2, H = 2, T = 3, d = 4;
  for (auto [S, qp0, window, sinks, np] : {CopeCase{3, 0, 0, 0, 4}, {5, 2, 0, 0, 3}, {5, 2, 2, 0, 9},
                                           {40, 37, 0, 0, 41}, {9, 6, 2, 2, 3}, {40, 37, 5, 20, 41}}) {
    expect_cope_attention_composed(B, H, T, S, qp0, window, sinks, np);
    if (S > 5) continue;  // the finite differences on the small cases
    const double scale = 1.0 / std::sqrt((double)d);
    const std::vector<Tensor> in = {randn({B, H, T, d}, 31, 1.0), randn({B, H, S, d}, 32, 1.0),
                                    randn({B, H, S, 5}, 33, 1.0), randn({d, np}, 34, 1.0)};
    GradFn f = [=](const std::vector<Variable>& v) {
      return cope_attention(v[0], v[1], v[2], v[3], scale, qp0, window, sinks);
    };
    const GradcheckResult r = gradcheck(f, in, {"q", "k", "v", "pos_emb"});
    EXPECT_TRUE(r.pass) << r.summary();
    EXPECT_EQ(r.tensors.size(), 4u);
  }
}

// cope_attention runs by query blocks of 64 rows, each over the keys [0, n) and the positions
// [0, min(npos, n + 1)) its causal rows reach (autograd/ops_cope.cpp): with T > 64 (three blocks,
// the last partial) it is still the composed attention, training-shaped (T = S, npos S + 1: every
// block's positions trimmed), with a window and sinks, at a decoding offset with the clamp
// reached (npos 50), and with keys beyond the last row's reach (S > q_pos0 + T: dk's and dv's
// last rows 0, dE's columns above n + 1 0).
TEST(Posenc2024, CopeAttentionByQueryBlocks) {
  for (auto [T, S, qp0, window, sinks, np] :
       std::vector<std::array<int64_t, 6>>{{150, 150, 0, 0, 0, 151}, {150, 150, 0, 40, 4, 151},
                                           {130, 170, 40, 0, 0, 50}, {130, 200, 10, 0, 0, 201}})
    expect_cope_attention_composed(1, 2, T, S, qp0, window, sinks, np);
}

// The model takes CoPE's one-node attention on the CPU (the profiler sees cope_attention, not
// cope_logits), also with a window and attention sinks (fused_attention_takes_sinks), and its
// output and parameter gradients are the composed path's (fused attention switched off; with
// sinks: cope_logits, the hidden-keys mask, causal_softmax).
TEST(Posenc2024, CopeModelTakesItsOwnAttentionOnTheCpu) {
  const Tensor tok = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 3, 1, 4, 1, 5, 9, 2, 6}, {2, 8});
  for (auto [window, sinks] : {std::pair<int64_t, int64_t>{0, 0}, {3, 2}}) {
    SCOPED_TRACE(str("window ", window, " sinks ", sinks));
    auto run = [&, window = window, sinks = sinks](bool fused, std::string* ops) {
      nn::GPT m(tiny({{"type", "cope"}}), DType::F64, "cope");
      m.init_weights(5);
      for (auto& [name, p] : m.named_parameters())  // CoPE's tables start at 0: give them values
        if (name.find("pos_emb") != std::string::npos) p.data().copy_from(randn(p.data().shape(), 6, 0.5));
      m.set_attention_window(window, sinks);
      set_fast_path(FastPath::Attention, fused);
      prof::set_enabled(true);
      prof::reset();
      const Variable y = m.forward(tok);
      sum(y).backward();
      *ops = prof::to_json().dump();
      prof::set_enabled(false);
      reset_fast_path(FastPath::Attention);
      std::vector<Tensor> out{y.data().clone()};
      for (auto& [name, p] : m.named_parameters()) out.push_back(p.grad().clone());
      return out;
    };
    std::string fused_ops, composed_ops;
    const std::vector<Tensor> f = run(true, &fused_ops), c = run(false, &composed_ops);
    EXPECT_NE(fused_ops.find("cope_attention"), std::string::npos) << fused_ops;
    EXPECT_EQ(fused_ops.find("cope_logits"), std::string::npos) << fused_ops;
    EXPECT_NE(composed_ops.find("cope_logits"), std::string::npos) << composed_ops;
    ASSERT_EQ(f.size(), c.size());
    for (size_t i = 0; i < f.size(); ++i)
      for (int64_t e = 0; e < f[i].numel(); ++e)
        EXPECT_NEAR(f[i].at(e), c[i].at(e), 1e-12) << "tensor " << i << " element " << e;
  }
}

TEST(Posenc2024, CopeParameterNamesInitAndErrors) {
  EXPECT_EQ(pe_names({{"type", "cope"}}), (std::vector<std::string>{"blocks.0.attn.pe.pos_emb:f32[4, 9]",
                                                                    "blocks.1.attn.pe.pos_emb:f32[4, 9]"}));
  EXPECT_EQ(pe_names({{"type", "cope"}, {"npos_max", 5}, {"shared", true}}),
            (std::vector<std::string>{"pe.pos_emb:f32[4, 5]"}));
  nn::GPT m(tiny({{"type", "cope"}}));
  m.init_weights(3);
  for (auto& [n, p] : m.named_parameters()) {
    if (n.find("pos_emb") == std::string::npos) continue;
    for (int64_t i = 0; i < p.data().numel(); ++i) ASSERT_EQ(p.data().at(i), 0.0) << n;
  }
  auto bad = [](nlohmann::json pe, std::initializer_list<std::string> needles) {
    pe["type"] = "cope";
    expect_error([&] { nn::GPT g(tiny(pe)); }, needles);
  };
  bad({{"bogus", 1}}, {"posenc.bogus", "cope"});
  bad({{"npos_max", 0}}, {"posenc.npos_max", ">= 1"});
  bad({{"npos_max", 1.5}}, {"posenc.npos_max", "integer"});
  bad({{"shared", "no"}}, {"posenc.shared", "true or false"});
}
