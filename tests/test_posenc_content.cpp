// tests/test_posenc_content.cpp — the content-position encodings (posenc/content.cpp,
// POSENC_SPEC §4): an f64 finite-difference gradcheck of a tiny GPT's loss with respect to every
// parameter (the encoding's included) for shaw, xl, deberta and tupe; DeBERTa's log bucket
// (odd symmetry, identity near 0, monotone, saturation); Shaw's rows unreachable under the causal
// mask get exactly zero gradient; with a memory prefix (S > T, q_pos0 > 0) the logits equal the
// last rows of the full sequence's; TUPE rejects T > L; unknown keys and bad values are one-line
// errors naming posenc.<key>. Runs in a few seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/threads.h"
#include "core/rng.h"
#include "nn/gpt.h"

namespace ctx::posenc_detail {
// posenc/content.cpp
int64_t deberta_bucket(int64_t x, int64_t position_buckets, int64_t max_relative_positions);
}  // namespace ctx::posenc_detail

using namespace ctx;

namespace {

ModelConfig tiny_config(const nlohmann::json& posenc, int64_t n_layers = 2) {
  ModelConfig c = testing_util::two_head_cfg(11, 8, n_layers, 16, 8, posenc);
  return c;
}

// Weights large enough that every term of the logits matters (the 0.02 init would hide a wrong
// sign or index under the tolerance): N(0, 0.5), norm weights 1 + N(0, 0.1).
void randomise(nn::GPT& m, uint64_t seed) {
  m.init_weights(seed);
  Rng rng(seed + 7);
  for (auto& [name, p] : m.named_parameters()) {
    bool norm_w =
        name.find("norm") != std::string::npos && name.find(".weight") != std::string::npos;
    rng.fill_normal(p.data(), norm_w ? 1.0 : 0.0, norm_w ? 0.1 : 0.5);
  }
}

Tensor tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v((size_t)(B * T));
  for (auto& x : v) x = (int32_t)rng.below((uint64_t)V);
  return Tensor::from_vector<int32_t>(v, {B, T});
}

// Gradcheck of GPT::loss with respect to every named parameter: each parameter is rebound to
// an identity of the corresponding gradcheck input, so the model's own graph carries the
// gradient back to the inputs.
GradcheckResult gradcheck_model(const nlohmann::json& posenc, int64_t n_layers, int64_t T) {
  nn::GPT m(tiny_config(posenc, n_layers), DType::F64);
  randomise(m, 3);
  m.eval();
  const nn::NamedParams params = m.named_parameters();
  std::vector<Tensor> inputs;
  std::vector<std::string> names;
  for (auto& [name, p] : params) {
    inputs.push_back(p.data().clone());
    names.push_back(name);
  }
  Tensor x = tokens(2, T, 11, 5), y = tokens(2, T, 11, 6);
  GradFn f = [&](const std::vector<Variable>& in) {
    for (size_t i = 0; i < params.size(); ++i) {
      Variable src = in[i];
      Variable id = make_result(src.data(), "bind", {src}, [src](const Tensor& g) {
        if (src.requires_grad()) accumulate_grad(*src.impl(), g);
      });
      *params[i].second.impl() = *id.impl();
    }
    return m.loss(x, y);
  };
  return gradcheck(f, inputs, names);
}

// The shapes here are tiny: one thread is fastest, and it keeps OpenMP's spin-waiting on a
// loaded machine from stretching the thousands of forwards of a gradcheck (measured: 100 s for
// xl with 2 threads under load, under 1 s with one).
struct SingleThread {
  int saved = ctx::num_threads();
  SingleThread() { ctx::set_num_threads(1); }
  ~SingleThread() { ctx::set_num_threads(saved); }
};

void expect_gradcheck(const nlohmann::json& posenc, int64_t n_layers, int64_t T,
                      std::initializer_list<std::string> must_have) {
  SingleThread one;
  GradcheckResult r = gradcheck_model(posenc, n_layers, T);
  EXPECT_TRUE(r.pass) << r.summary();
  for (const auto& n : must_have) {
    bool found = false;
    for (auto& t : r.tensors) found = found || t.name == n;
    EXPECT_TRUE(found) << n << " was not checked:\n" << r.summary();
  }
}

using ctx::testing_util::expect_error;

}  // namespace

// ---- gradchecks (f64, every parameter) -------------------------------------------------------
TEST(PosencContent, GradcheckShaw) {
  // K = 2 < T: clipping on both sides of the table is exercised.
  expect_gradcheck({{"type", "shaw"}, {"max_relative_position", 2}}, 2, 6,
                   {"blocks.0.attn.pe.rel_k", "blocks.1.attn.pe.rel_v"});
}

TEST(PosencContent, GradcheckXL) {
  expect_gradcheck({{"type", "xl"}}, 2, 6,
                   {"pe.r_w_bias", "pe.r_r_bias", "blocks.1.attn.pe.r_net.weight"});
}

TEST(PosencContent, GradcheckDeBERTa) {
  // position_buckets 4, max_relative_positions 6: distances 0..5 reach the log buckets.
  expect_gradcheck({{"type", "deberta"}, {"position_buckets", 4}, {"max_relative_positions", 6}}, 2,
                   6, {"pe.rel_embeddings.weight", "pe.rel_norm.weight", "pe.rel_norm.bias"});
}

TEST(PosencContent, GradcheckTUPE) {
  expect_gradcheck({{"type", "tupe"}}, 1, 7,
                   {"pe.pos_emb.weight", "pe.pos_norm.bias", "pe.pos_proj.weight",
                    "pe.pos_proj.bias", "pe.rel_bias.weight"});
}

// ---- memory (S > T, q_pos0 > 0) ---------------------------------------------------------------
// The logits hooks place query row i at q_pos0 + i. With a memory prefix (Transformer-XL's
// segment memory; attention does not keep one yet), the logits of the last T queries against
// all S keys must equal the last T rows of the logits on the whole sequence.
TEST(PosencContent, MemoryPrefixEqualsLastRowsOfFullSequence) {
  const int64_t B = 2, H = 2, Dh = 4, D = H * Dh, S = 7, T = 3;
  for (const char* type : {"shaw", "xl", "deberta", "tupe"}) {
    ModelConfig c = tiny_config({{"type", type}}, 1);
    if (std::string(type) == "deberta")
      c.posenc.update({{"position_buckets", 4}, {"max_relative_positions", 6}});
    if (std::string(type) == "shaw") c.posenc["max_relative_position"] = 2;
    auto pe = make_posenc(c, "test");
    (void)pe->shared_module();
    (void)pe->layer_module(0);
    Rng rng(17);
    pe->init_parameters(rng);
    auto rnd = [&](const Shape& s) {
      Tensor t = Tensor::empty(s, DType::F32);
      rng.fill_normal(t, 0.0, 1.0);
      return Variable(t, false);
    };
    AttnState full;
    full.B = B, full.H = H, full.T = S, full.S = S, full.Dh = Dh, full.scale = 1.0 / std::sqrt(4.0);
    full.q = rnd({B, H, S, Dh}), full.k = rnd({B, H, S, Dh}), full.v = rnd({B, H, S, Dh});
    full.qkv_weight = rnd({3 * D, D}), full.qkv_bias = rnd({3 * D});
    AttnState mem = full;
    mem.T = T, mem.q_pos0 = S - T, mem.q = slice(full.q, 2, S - T, S);
    Tensor a = pe->logits(full).data(), b = pe->logits(mem).data();  // [B, H, S, S], [B, H, T, S]
    ASSERT_EQ(b.shape(), (Shape{B, H, T, S})) << type;
    double worst = 0;
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j <= S - T + i; ++j)  // unmasked entries
          worst = std::max(
              worst, std::fabs(a.at((bh * S + S - T + i) * S + j) - b.at((bh * T + i) * S + j)));
    EXPECT_LT(worst, 1e-5) << type;
  }
}

// ---- properties -------------------------------------------------------------------------------
TEST(PosencContent, DebertaBucketSymmetryAndSaturation) {
  using posenc_detail::deberta_bucket;
  for (auto [A, M] : {std::pair<int64_t, int64_t>{32, 128}, {8, 16}, {4, 6}}) {
    const int64_t mid = A / 2;
    int64_t prev = deberta_bucket(0, A, M);
    for (int64_t x = 0; x <= 4 * M; ++x) {
      const int64_t b = deberta_bucket(x, A, M);
      EXPECT_EQ(deberta_bucket(-x, A, M), -b) << "odd symmetry at x = " << x << ", A " << A;
      if (x <= mid) {
        EXPECT_EQ(b, x) << "identity near 0 at x = " << x;
      }
      EXPECT_GE(b, prev) << "not monotone at x = " << x;
      prev = b;
      // delta_idx = clamp(bucket + A, 0, 2A - 1) saturates at the last row from M - 1 on.
      const int64_t idx = std::min(std::max(b + A, int64_t(0)), 2 * A - 1);
      const int64_t idx_neg = std::min(std::max(-b + A, int64_t(0)), 2 * A - 1);
      if (x <= M - 1) {
        EXPECT_LE(b, A - 1) << "bucket past the table at x = " << x << ", A " << A;
      }
      if (x >= M - 1) {
        EXPECT_EQ(idx, 2 * A - 1) << "no saturation at x = " << x << ", A " << A;
        EXPECT_LE(idx_neg, 1) << "no saturation at x = " << -x << ", A " << A;
      }
    }
    EXPECT_EQ(deberta_bucket(M - 1, A, M), A - 1);
  }
}

TEST(PosencContent, ShawUnreachableRowsHaveZeroGradient) {
  const int64_t K = 3, T = 6;
  nn::GPT m(tiny_config({{"type", "shaw"}, {"max_relative_position", K}}, 1));
  randomise(m, 11);
  m.loss(tokens(2, T, 11, 1), tokens(2, T, 11, 2)).backward();
  for (const char* name : {"blocks.0.attn.pe.rel_k", "blocks.0.attn.pe.rel_v"}) {
    Variable p;
    for (auto& [n, v] : m.named_parameters())
      if (n == name) p = v;
    ASSERT_TRUE(p.defined() && p.grad().defined()) << name;
    const Tensor& g = p.grad();
    const int64_t d = g.size(1);
    ASSERT_EQ(g.size(0), 2 * K + 1);
    for (int64_t r = 0; r < 2 * K + 1; ++r) {
      double norm = 0;
      for (int64_t c = 0; c < d; ++c) norm += std::fabs(g.at(r * d + c));
      if (r > K)
        EXPECT_EQ(norm, 0.0) << name << " row " << r << " (key after query) has a gradient";
      else
        EXPECT_GT(norm, 0.0) << name << " row " << r << " (reachable) has no gradient";
    }
  }
}

TEST(PosencContent, TupeRejectsLongerThanContext) {
  nn::GPT m(tiny_config({{"type", "tupe"}}, 1));
  m.init_weights(1);
  EXPECT_NO_THROW(m.forward(tokens(1, 8, 11, 1)));
  expect_error([&] { m.forward(tokens(1, 9, 11, 1)); },
               {"posenc tupe", "9 positions", "context L = 8"});
}

TEST(PosencContent, UnknownKeysAndBadValues) {
  for (const char* type : {"shaw", "xl", "deberta", "tupe"})
    expect_error(
        [&] {
          nn::GPT m(tiny_config({{"type", type}, {"bogus", 1}}));
        },
        {"posenc.bogus", type});
  auto bad = [](nlohmann::json pe, std::initializer_list<std::string> needles) {
    expect_error([&] { nn::GPT m(tiny_config(pe)); }, needles);
  };
  bad({{"type", "shaw"}, {"max_relative_position", 0}}, {"posenc.max_relative_position", ">= 1"});
  bad({{"type", "shaw"}, {"max_relative_position", 2.5}}, {"posenc.max_relative_position"});
  bad({{"type", "shaw"}, {"max_relative_position", "4"}},
      {"posenc.max_relative_position", "number"});
  bad({{"type", "xl"}, {"mem_len", -1}}, {"posenc.mem_len"});
  bad({{"type", "deberta"}, {"position_buckets", 7}}, {"posenc.position_buckets", "even"});
  bad({{"type", "deberta"}, {"position_buckets", 2}}, {"posenc.position_buckets", ">= 4"});
  bad({{"type", "deberta"}, {"position_buckets", 32}, {"max_relative_positions", 16}},
      {"posenc.max_relative_positions"});
}
