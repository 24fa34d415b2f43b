// tests/test_posenc_extension_2024.cpp — the RoPE scalings `llama3`, `longrope` and `self-extend`
// (POSENC_SPEC §2) and attention sinks with the sliding window (§6): theta' against independent
// transcriptions of Hugging Face's formulas (recovered from the rotation of a unit query),
// LongRoPE's list switch at L and its attention factor, Self-Extend against plain rope (equal
// inside the neighbour window, the grouped position beyond), sinks against the plain window and
// against the compressed sequence a rolling cache holds, f64 gradchecks of a whole tiny GPT, and
// the configuration errors the spec lists.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "posenc/posenc.h"

using namespace ctx;

namespace {

using json = nlohmann::json;

ModelConfig cfg_for(const json& posenc, int64_t d_model = 16, int64_t heads = 2, int64_t context = 6) {
  ModelConfig c;
  c.vocab_size = 11;
  c.d_model = d_model;
  c.n_layers = 1;
  c.n_heads = heads;
  c.d_ff = 2 * d_model;
  c.context = context;
  c.posenc = posenc;
  return c;
}

json rope_with(const json& scaling) { return {{"type", "rope"}, {"scaling", scaling}}; }

// Rotates a unit query e_k (half pairing: pair (k, k + d/2)) at positions 0..T-1 through the
// encoding and returns, per k, the angle and the length of the rotated pair at position `at`:
// the angle is theta'_k * at (for small angles), the length the cos/sin factor m.
struct Turn {
  std::vector<double> angle, length;
};
Turn turn_at(PositionalEncoding& pe, int64_t d, int64_t T, int64_t at) {
  const int64_t h = d / 2;
  Turn r;
  for (int64_t k = 0; k < h; ++k) {
    Tensor q = Tensor::zeros({1, 1, T, d}, DType::F64);
    for (int64_t t = 0; t < T; ++t) q.set(t * d + k, 1.0);
    AttnState st;
    st.B = 1, st.H = 1, st.T = T, st.S = T, st.Dh = d;
    st.q = Variable(q), st.k = Variable(q.clone()), st.v = Variable(q.clone());
    pe.rotate(st);
    const double c = st.q.data().at(at * d + k), s = st.q.data().at(at * d + k + h);
    r.angle.push_back(std::atan2(s, c));
    r.length.push_back(std::hypot(c, s));
  }
  return r;
}

// ------------------------------------------------------------------------------- llama3 ----
// HF _compute_llama3_parameters, transcribed independently in double: the three bands.
TEST(PosencLlama3, FrequenciesMatchHuggingFaceFormula) {
  // d = 8: theta = 1, 0.1, 0.01, 0.001 (wavelengths 6.3, 63, 628, 6283). L = 1000, low 1,
  // high 4: lo = 1000, hi = 250: k = 0, 1 unchanged, k = 2 smoothed (sm ~ 0.197), k = 3 / s.
  const int64_t d = 8, L = 1000;
  const double s = 8, lf = 1, hf = 4;
  auto pe = make_posenc(cfg_for(rope_with({{"type", "llama3"}, {"factor", s}, {"original_context", L}}), 8, 1),
                        "test");
  const Turn t = turn_at(*pe, d, 2, 1);
  const double pi = 3.14159265358979323846;
  int bands[3] = {0, 0, 0};
  for (int64_t k = 0; k < d / 2; ++k) {
    const double th = 1.0 / std::pow(10000.0, 2.0 * (double)k / (double)d), lam = 2 * pi / th;
    double want;
    if (lam > L / lf) {
      want = th / s, ++bands[0];
    } else if (lam < L / hf) {
      want = th, ++bands[1];
    } else {
      const double sm = ((double)L / lam - lf) / (hf - lf);
      want = (1 - sm) * th / s + sm * th, ++bands[2];
    }
    EXPECT_NEAR(t.angle[(size_t)k], want, 1e-6 * want) << "k " << k;
    EXPECT_NEAR(t.length[(size_t)k], 1.0, 1e-12) << "llama3 has no attention factor";
  }
  EXPECT_EQ(bands[0], 1);
  EXPECT_EQ(bands[1], 2);
  EXPECT_EQ(bands[2], 1);  // every branch of the formula was exercised
  // theta' does not depend on T (no switch past L)
  const Turn far = turn_at(*pe, d, 1200, 1);
  for (int64_t k = 0; k < d / 2; ++k) EXPECT_EQ(far.angle[(size_t)k], t.angle[(size_t)k]);
}

// ----------------------------------------------------------------------------- longrope ----
TEST(PosencLongRope, ShortListUpToLLongListBeyondAndAttentionFactor) {
  const int64_t d = 8, L = 6, context = 24;  // factor defaults to context / L = 4
  const std::vector<double> sf = {1.0, 1.5, 2.0, 3.0}, lf = {2.0, 4.0, 8.0, 16.0};
  const json sc = {{"type", "longrope"}, {"short_factor", sf}, {"long_factor", lf}, {"original_context", L}};
  auto pe = make_posenc(cfg_for(rope_with(sc), 8, 1, context), "test");
  const double m = std::sqrt(1 + std::log(4.0) / std::log((double)L));
  for (int64_t T : {L, L + 1}) {
    const Turn t = turn_at(*pe, d, T, 1);
    const std::vector<double>& ext = T > L ? lf : sf;
    for (int64_t k = 0; k < d / 2; ++k) {
      const double want = 1.0 / (ext[(size_t)k] * std::pow(10000.0, 2.0 * (double)k / (double)d));
      EXPECT_NEAR(t.angle[(size_t)k], want, 1e-6 * want) << "T " << T << " k " << k;
      EXPECT_NEAR(t.length[(size_t)k], m, 1e-12) << "T " << T << " k " << k;
    }
  }
  // attention_factor replaces m; factor <= 1 gives m = 1
  json sc2 = sc;
  sc2["attention_factor"] = 1.25;
  auto pe2 = make_posenc(cfg_for(rope_with(sc2), 8, 1, context), "test");
  EXPECT_NEAR(turn_at(*pe2, d, 3, 1).length[0], 1.25, 1e-12);
  json sc3 = sc;
  sc3["factor"] = 1.0;
  auto pe3 = make_posenc(cfg_for(rope_with(sc3), 8, 1, context), "test");
  EXPECT_NEAR(turn_at(*pe3, d, 3, 1).length[0], 1.0, 1e-12);
}

// ---------------------------------------------------------------------------- self-extend ----
// The logits [T, T] of rope (+ scaling) for q, k [1, 1, T, d] (f64).
Tensor rope_logits(const json& posenc, const Tensor& q, const Tensor& k) {
  const int64_t d = q.size(3);
  auto pe = make_posenc(cfg_for(posenc, d, 1), "test");
  AttnState st;
  st.B = 1, st.H = 1, st.T = q.size(2), st.S = k.size(2), st.Dh = d, st.scale = 1.0 / std::sqrt((double)d);
  st.q = Variable(q), st.k = Variable(k), st.v = Variable(k);
  pe->rotate(st);
  return pe->logits(st).data();
}

// scale * (R_p q . R_r k) for rows q, k of d values (half pairing, float32 angles as the spec)
double rotated_dot(const double* q, const double* k, int64_t d, int64_t p, int64_t r) {
  double s = 0;
  for (int64_t i = 0; i < d / 2; ++i) {
    const float th = 1.0f / std::pow(10000.0f, (float)(2 * i) / (float)d);
    const double a = (double)((float)p * th), b = (double)((float)r * th);
    const double q0 = q[i] * std::cos(a) - q[i + d / 2] * std::sin(a), q1 = q[i + d / 2] * std::cos(a) + q[i] * std::sin(a);
    const double k0 = k[i] * std::cos(b) - k[i + d / 2] * std::sin(b), k1 = k[i + d / 2] * std::cos(b) + k[i] * std::sin(b);
    s += q0 * k0 + q1 * k1;
  }
  return s / std::sqrt((double)d);
}

TEST(PosencSelfExtend, NeighbourWindowIsRopeGroupedPositionBeyond) {
  const int64_t T = 23, d = 8, W = 5, G = 3;
  Rng r(4);
  Tensor q = Tensor::empty({1, 1, T, d}, DType::F64), k = Tensor::empty({1, 1, T, d}, DType::F64);
  r.fill_uniform(q, -1, 1);
  r.fill_uniform(k, -1, 1);
  const Tensor plain = rope_logits({{"type", "rope"}}, q, k);
  const Tensor se = rope_logits(rope_with({{"type", "self-extend"}, {"window", W}, {"group", G}}), q, k);
  int differ = 0;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const double got = se.at(i * T + j);
      if (i - j < W) {
        EXPECT_NEAR(got, plain.at(i * T + j), 1e-13) << i << "," << j;
      } else {
        const int64_t P = i / G + W - W / G;  // the spec's integer shift
        EXPECT_NEAR(got, rotated_dot(q.data<double>() + i * d, k.data<double>() + j * d, d, P, j / G), 1e-12)
            << i << "," << j;
        differ += std::fabs(got - plain.at(i * T + j)) > 1e-6;
      }
    }
  EXPECT_GT(differ, 100);  // beyond the window it is not rope
  // G = 1 and W >= T are plain rope
  for (const json& sc : {json{{"type", "self-extend"}, {"window", 2}, {"group", 1}},
                         json{{"type", "self-extend"}, {"window", T}, {"group", 4}}}) {
    const Tensor same = rope_logits(rope_with(sc), q, k);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) EXPECT_NEAR(same.at(i * T + j), plain.at(i * T + j), 1e-12) << sc.dump();
  }
}

// ------------------------------------------------------------------------------- sinks ----
std::unique_ptr<nn::GPT> tiny_model(const json& posenc, int64_t layers = 1, uint64_t seed = 3) {
  ModelConfig c = cfg_for(posenc);
  c.n_layers = layers;
  c.context = 40;
  auto m = std::make_unique<nn::GPT>(c, DType::F64, "test");
  m->init_weights(seed);
  Rng rng(seed + 1);
  for (auto& [name, p] : m->named_parameters())
    if (name.find("norm") == std::string::npos) rng.fill_normal(p.data(), 0.0, 0.5);
  m->eval();
  return m;
}

Tensor ids(const std::vector<int64_t>& v) {
  Tensor t = Tensor::empty({1, (int64_t)v.size()}, DType::I64);
  for (size_t i = 0; i < v.size(); ++i) t.set((int64_t)i, (double)v[i]);
  return t;
}

// One layer, so the last query's logits depend only on the embeddings of the keys it sees: with
// window W and S sinks they equal the plain causal forward of the sequence a rolling cache holds
// (tokens 0..S-1, then the last W), which puts every key at its cache rank (§6) — for the
// rotary and bias encodings, and for cope, whose gates count the visible keys only (§7.2); and
// sinks change the logits of the plain window.
TEST(PosencSinks, LastQueryEqualsTheRollingCacheSequence) {
  const int64_t T = 20, W = 5, S = 3;
  std::vector<int64_t> seq;
  Rng r(8);
  for (int64_t t = 0; t < T; ++t) seq.push_back((int64_t)r.below(11));
  std::vector<int64_t> held(seq.begin(), seq.begin() + S);
  held.insert(held.end(), seq.end() - W, seq.end());
  for (const json& pe : {json{{"type", "rope"}}, rope_with({{"type", "llama3"}, {"factor", 4}, {"original_context", 8}}),
                         rope_with({{"type", "yarn"}, {"factor", 2}}), json{{"type", "alibi"}},
                         json{{"type", "kerple"}}, json{{"type", "t5"}, {"num_buckets", 6}, {"max_distance", 10}},
                         json{{"type", "sandwich"}}, json{{"type", "none"}}, json{{"type", "cope"}}}) {
    SCOPED_TRACE(pe.dump());
    auto m = tiny_model(pe);
    NoGradGuard g;
    auto last = [&](const Tensor& x) {
      const Tensor z = m->forward(x).data();
      std::vector<double> v;
      for (int64_t i = 0; i < 11; ++i) v.push_back(z.at((z.size(1) - 1) * 11 + i));
      return v;
    };
    m->set_attention_window(W, S);
    const auto with_sinks = last(ids(seq));
    m->set_attention_window(0);
    const auto cache_seq = last(ids(held));
    m->set_attention_window(W, 0);
    const auto plain = last(ids(seq));
    m->set_attention_window(W, 0);
    double diff = 0;
    for (size_t i = 0; i < 11; ++i) {
      // rope: the window keys sit at their absolute positions in one, at their ranks in the other:
      // the same relative angles up to float32 angle rounding (POSENC_SPEC §2); biases: exact
      EXPECT_NEAR(with_sinks[i], cache_seq[i], 2e-6 * (1 + std::fabs(cache_seq[i]))) << i;
      diff = std::max(diff, std::fabs(with_sinks[i] - plain[i]));
    }
    EXPECT_GT(diff, 1e-3) << "sinks do not change the logits of the plain window";
    m->set_attention_window(W, 0);
  }
}

// Every parameter of a two-layer f64 GPT by central differences, with window 3 and 2 sinks over
// T = 11 (sink keys beyond the window in both branches of the rope logits).
// One of each way sinks reach the logits: rope's rank rotation, the distance biases at the
// sink's cache distance (fixed: alibi; trainable: kerple's r1 / r2, t5's table), and cope's gates
// over the visible keys (its table E and the gates through q and k). llama3 and the
// mask-only encodings with sinks are held to PyTorch autograd by pytorch_parity (rope-llama3-sinks,
// learned-sinks, none-sinks). One layer, 8 elements per tensor (0.6 s alone, against 6 s for six
// encodings, two layers, 16 elements; under ctest -j2 the old form took 233-421 s).
TEST(PosencSinks, TinyGptGradcheckWithSinks) {
  for (const json& pe : {json{{"type", "rope"}}, json{{"type", "alibi"}}, json{{"type", "kerple"}, {"variant", "power"}},
                         json{{"type", "t5"}, {"num_buckets", 6}, {"max_distance", 8}}, json{{"type", "cope"}}}) {
    SCOPED_TRACE(pe.dump());
    auto m = tiny_model(pe, 1);
    for (auto& [name, p] : m->named_parameters())
      if (name == "pe.r1" || name == "pe.r2") Rng(2).fill_uniform(p.data(), 0.3, 1.2);
    m->set_attention_window(3, 2);
    Rng r(12);
    std::vector<int64_t> a, b;
    for (int i = 0; i < 11; ++i) a.push_back((int64_t)r.below(11)), b.push_back((int64_t)r.below(11));
    const Tensor x = ids(a), y = ids(b);
    const nn::NamedParams named = m->named_parameters();
    std::vector<Tensor> inputs;
    std::vector<std::string> names;
    for (auto& [name, p] : named) inputs.push_back(p.data().clone()), names.push_back(name);
    GradcheckOptions opt;
    opt.max_elements = 8;
    GradcheckResult res = gradcheck(
        [&](const std::vector<Variable>& in) {
          // each parameter becomes a node over its gradcheck input (the gradient flows back to it)
          for (size_t i = 0; i < named.size(); ++i) *named[i].second.impl() = *scale(in[i], 1.0).impl();
          return m->loss(x, y);
        },
        inputs, names, opt);
    EXPECT_TRUE(res.pass) << res.summary();
  }
}

// ------------------------------------------------------------------------------ errors ----
TEST(PosencExtension2024, ConfigErrorsNameTheField) {
  auto err = [](const json& sc) {
    return [sc] { make_posenc(cfg_for(rope_with(sc), 16, 2), "cfg.json"); };
  };
  using testing_util::expect_error;
  const json four = std::vector<double>{1, 1, 1, 1};  // d/2 = 4
  expect_error(err({{"type", "llama3"}}), {"posenc.scaling.factor", "required", "llama3"});
  expect_error(err({{"type", "llama3"}, {"factor", 8}, {"low_freq_factor", 4}, {"high_freq_factor", 2}}),
               {"posenc.scaling.high_freq_factor", "greater than low_freq_factor"});
  expect_error(err({{"type", "llama3"}, {"factor", 8}, {"low_freq_factor", 0}}), {"posenc.scaling.low_freq_factor", "> 0"});
  expect_error(err({{"type", "llama3"}, {"factor", 8}, {"beta_fast", 2}}), {"posenc.scaling.beta_fast", "llama3"});
  expect_error(err({{"type", "longrope"}, {"short_factor", four}}), {"posenc.scaling.long_factor", "missing"});
  expect_error(err({{"type", "longrope"}, {"short_factor", four}, {"long_factor", json{1, 2, 3}}}),
               {"posenc.scaling.long_factor", "head_dim/2 = 4"});
  expect_error(err({{"type", "longrope"}, {"short_factor", json{1, 0, 1, 1}}, {"long_factor", four}}),
               {"posenc.scaling.short_factor[1]", "> 0"});
  expect_error(err({{"type", "longrope"}, {"short_factor", four}, {"long_factor", four}, {"window", 3}}),
               {"posenc.scaling.window", "longrope"});
  expect_error(err({{"type", "longrope"}, {"short_factor", four}, {"long_factor", four}, {"factor", 2},
                    {"original_context", 1}}),
               {"posenc.scaling.original_context", ">= 2"});
  expect_error(err({{"type", "self-extend"}, {"window", 4}}), {"posenc.scaling.group", "required"});
  expect_error(err({{"type", "self-extend"}, {"group", 0}}), {"posenc.scaling.group", "positive integer"});
  expect_error(err({{"type", "self-extend"}, {"group", 2}, {"window", 1.5}}), {"posenc.scaling.window"});
  expect_error(err({{"type", "self-extend"}, {"group", 2}, {"factor", 2}}), {"posenc.scaling.factor", "self-extend"});
  // sinks: the window, the sign and the encodings §6 does not define them for
  auto sinks = [](const json& pe, int64_t w, int64_t s) {
    return [pe, w, s] { tiny_model(pe)->set_attention_window(w, s); };
  };
  expect_error(sinks({{"type", "rope"}}, 0, 2), {"--sinks", "needs --window"});
  expect_error(sinks({{"type", "rope"}}, 4, -1), {"--sinks", ">= 0"});
  for (const json& pe : {rope_with({{"type", "longrope"}, {"short_factor", four}, {"long_factor", four}}),
                         rope_with({{"type", "self-extend"}, {"group", 2}}), rope_with({{"type", "dynamic-ntk"}}),
                         rope_with({{"type", "rerope"}}), json{{"type", "xpos"}}, json{{"type", "shaw"}},
                         json{{"type", "xl"}}, json{{"type", "deberta"}}, json{{"type", "fire"}}})
    expect_error(sinks(pe, 4, 2), {"--sinks is not defined for posenc", "POSENC_SPEC §6"});
  tiny_model({{"type", "rope"}})->set_attention_window(4, 0);  // --sinks 0: the plain window
}

}  // namespace
