// tests/test_posenc_rotary_bias.cpp — the rotary family (rope + every scaling type, xpos) and
// the additive biases (alibi, kerple, sandwich, t5) of POSENC_SPEC §2-§3: f64 gradchecks at the
// attention level (q, k, v through ctx::gradcheck; encoding parameters by central differences)
// and of a whole tiny GPT (every parameter), plus properties: relative-only RoPE / XPOS logits,
// ALiBi slopes, T5 buckets, KERPLE's in-place projection, parameter validation errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/ops_rope.h"
#include "core/backend.h"
#include "core/cpu/bf16_convert.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "posenc/posenc.h"
#include "tests/test_util.h"

namespace ctx {
// posenc/bias.cpp
int64_t posenc_t5_bucket(int64_t n, int64_t num_buckets, int64_t max_distance);
std::vector<float> posenc_alibi_slopes(int64_t H);
}  // namespace ctx

using namespace ctx;

namespace {

using json = nlohmann::json;

// Tiny config: H = 2, Dh = 4, context L = 6 (the tests run T = 7 > L: extrapolation).
ModelConfig tiny_cfg(const json& posenc) {
  ModelConfig c = testing_util::two_head_cfg(11, 8, 1, 16, 6, posenc);
  return c;
}

struct Named {
  std::string name;
  json posenc;
};

// Every encoding / scaling variant under test.
std::vector<Named> all_cases() {
  return {
      {"rope", {{"type", "rope"}}},
      {"rope-interleaved", {{"type", "rope"}, {"pairing", "interleaved"}, {"base", 500.0}}},
      {"rope-pi", {{"type", "rope"}, {"scaling", {{"type", "pi"}, {"factor", 2.0}}}}},
      {"rope-ntk", {{"type", "rope"}, {"scaling", {{"type", "ntk"}, {"factor", 2.0}}}}},
      {"rope-dynamic-ntk", {{"type", "rope"}, {"scaling", {{"type", "dynamic-ntk"}, {"factor", 2.0}}}}},
      {"rope-yarn", {{"type", "rope"}, {"scaling", {{"type", "yarn"}, {"factor", 4.0}, {"beta_slow", 0.25}}}}},
      {"rope-yarn-m", {{"type", "rope"}, {"scaling", {{"type", "yarn"}, {"factor", 4.0}, {"attention_factor", 1.3}}}}},
      {"rope-rerope", {{"type", "rope"}, {"scaling", {{"type", "rerope"}}}}},
      {"rope-leaky-rerope",
       {{"type", "rope"}, {"pairing", "interleaved"}, {"scaling", {{"type", "leaky-rerope"}, {"window", 3}, {"factor", 4.0}}}}},
      {"rope-logn", {{"type", "rope"}, {"scaling", {{"type", "pi"}, {"factor", 2.0}, {"original_context", 4}, {"log_n", true}}}}},
      {"xpos", {{"type", "xpos"}}},
      {"xpos-gamma4", {{"type", "xpos"}, {"scale_base", 4.0}}},
      {"alibi", {{"type", "alibi"}}},
      {"kerple", {{"type", "kerple"}}},
      {"kerple-power", {{"type", "kerple"}, {"variant", "power"}}},
      {"sandwich", {{"type", "sandwich"}}},
      {"t5", {{"type", "t5"}, {"num_buckets", 6}, {"max_distance", 8}}},
  };
}

Tensor uniform(Rng& r, const Shape& s, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(s, DType::F64);
  r.fill_uniform(t, lo, hi);
  return t;
}

// Encoding parameters: f64, values away from KERPLE's clamp bounds (the finite differences must
// not cross a projection).
void prepare_params(PositionalEncoding& pe, Rng& r) {
  auto m = pe.shared_module();
  if (!m) return;
  for (auto& [name, p] : m->named_parameters()) {
    p.data() = p.data().to(DType::F64);
    Tensor& t = p.data();
    if (name == "r1" || name == "r2")
      r.fill_uniform(t, 0.2, 1.5);
    else
      r.fill_normal(t, 0.0, 0.5);
  }
}

// Attention as nn/attention.cpp composes it: rotate, logits, causal mask, softmax, output.
Variable attend(PositionalEncoding& pe, const Variable& q, const Variable& k, const Variable& v) {
  AttnState st;
  st.B = q.size(0);
  st.H = q.size(1);
  st.T = q.size(2);
  st.S = k.size(2);
  st.Dh = q.size(3);
  st.scale = 1.0 / std::sqrt((double)st.Dh);
  st.q = q;
  st.k = k;
  st.v = v;
  pe.rotate(st);
  Variable s = pe.logits(st);                      // [B, H, T, S]
  Variable p = softmax(causal_mask(s, st.S - st.T));
  return pe.output(st, p);                         // [B, H, T, Dh]
}

// Central differences of the scalar f() against the analytic gradients of `leaves` (f64),
// PyTorch's criterion |a - n| <= 1e-5 + 1e-3 |n|; checks at most `max_el` elements per leaf.
void fd_check(std::vector<std::pair<std::string, Variable>> leaves, const std::function<Variable()>& f,
              const std::string& what, int64_t max_el = 1 << 30) {
  for (auto& [n, v] : leaves) v.zero_grad();
  f().backward();
  const double eps = 1e-6;
  for (auto& [name, v] : leaves) {
    ASSERT_TRUE(v.grad().defined()) << what << ": no gradient for " << name;
    Tensor g = v.grad();
    Tensor& x = v.data();
    const int64_t n = x.numel(), step = std::max<int64_t>(1, n / max_el);
    bool any_nonzero = false;
    for (int64_t i = 0; i < n; i += step) {
      const double x0 = x.at(i);
      double lp, lm;
      {
        NoGradGuard ng;
        x.set(i, x0 + eps);
        lp = f().data().item();
        x.set(i, x0 - eps);
        lm = f().data().item();
        x.set(i, x0);
      }
      const double num = (lp - lm) / (2 * eps), an = g.at(i);
      any_nonzero = any_nonzero || an != 0.0;
      ASSERT_LE(std::fabs(an - num), 1e-5 + 1e-3 * std::fabs(num))
          << what << ": d/d " << name << "[" << i << "] analytic " << an << " numeric " << num;
    }
    EXPECT_TRUE(any_nonzero) << what << ": gradient of " << name << " is identically zero";
  }
}

// ---------------------------------------------------------------- the rotation op itself ----
TEST(PosencRotary, RopeRotateOpGradcheck) {
  Rng r(7);
  for (auto pairing : {RopePairing::Half, RopePairing::Interleaved}) {
    Tensor C = uniform(r, {5, 3}), S = uniform(r, {5, 3});
    GradcheckResult res = gradcheck(
        [&](const std::vector<Variable>& in) { return rope_rotate(in[0], C, S, pairing); },
        {uniform(r, {2, 3, 5, 6})}, {"x"});
    EXPECT_TRUE(res.pass) << res.summary();
  }
}

TEST(PosencRotary, FusedRotationMatchesComposition) {
  Rng r(9);
  for (auto pairing : {RopePairing::Half, RopePairing::Interleaved}) {
    Tensor x = uniform(r, {2, 3, 5, 6}), C = uniform(r, {5, 3}), S = uniform(r, {5, 3}), g = uniform(r, {2, 3, 5, 6});
    Variable a(x.clone(), true), b(x.clone(), true);
    Variable ya = rope_rotate(a, C, S, pairing), yb = rope_rotate_composed(b, C, S, pairing);
    sum(mul(ya, Variable(g))).backward();
    sum(mul(yb, Variable(g))).backward();
    for (int64_t i = 0; i < x.numel(); ++i) {
      ASSERT_NEAR(ya.data().at(i), yb.data().at(i), 1e-14);
      ASSERT_NEAR(a.grad().at(i), b.grad().at(i), 1e-14);
    }
  }
}

TEST(PosencRotary, RopeRotateMatchesSpecFormula) {
  // half: x' = x C + rotate_half(x) S, rotate_half(x) = [-x[d/2:], x[:d/2]]
  Rng r(8);
  Tensor x = uniform(r, {1, 2, 4}), C = uniform(r, {2, 2}), S = uniform(r, {2, 2});
  Tensor yh = rope_rotate(Variable(x), C, S, RopePairing::Half).data();
  Tensor yi = rope_rotate(Variable(x), C, S, RopePairing::Interleaved).data();
  for (int t = 0; t < 2; ++t)
    for (int k = 0; k < 2; ++k) {
      auto X = [&](int i) { return x.at(t * 4 + i); };
      double c = C.at(t * 2 + k), s = S.at(t * 2 + k);
      EXPECT_NEAR(yh.at(t * 4 + k), X(k) * c - X(k + 2) * s, 1e-15);
      EXPECT_NEAR(yh.at(t * 4 + k + 2), X(k + 2) * c + X(k) * s, 1e-15);
      EXPECT_NEAR(yi.at(t * 4 + 2 * k), X(2 * k) * c - X(2 * k + 1) * s, 1e-15);
      EXPECT_NEAR(yi.at(t * 4 + 2 * k + 1), X(2 * k + 1) * c + X(2 * k) * s, 1e-15);
    }
}

// ------------------------------------------------------------ attention-level gradchecks ----
TEST(PosencRotaryBias, AttentionGradcheckEveryEncoding) {
  const int64_t B = 2, H = 2, T = 7, Dh = 4;
  std::set<std::string> with_params;
  for (auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    ModelConfig cfg = tiny_cfg(c.posenc);
    auto pe = make_posenc(cfg, "test");
    Rng r(11);
    prepare_params(*pe, r);
    Tensor q = uniform(r, {B, H, T, Dh}, -1.5, 1.5), k = uniform(r, {B, H, T, Dh}, -1.5, 1.5),
           v = uniform(r, {B, H, T, Dh});
    Tensor w = uniform(r, {B, H, T, Dh});
    // q, k, v through ctx::gradcheck (64 of the 112 elements of each, spread evenly)
    GradcheckOptions opt;
    opt.max_elements = 64;
    GradcheckResult res = gradcheck(
        [&](const std::vector<Variable>& in) { return attend(*pe, in[0], in[1], in[2]); }, {q, k, v},
        {"q", "k", "v"}, opt);
    EXPECT_TRUE(res.pass) << res.summary();
    // the encoding's parameters by central differences
    auto m = pe->shared_module();
    if (!m) continue;  // no parameters of its own (rope, xpos, alibi, sandwich)
    Variable qv(q), kv(k), vv(v), wv(w);
    fd_check(m->named_parameters(), [&] { return sum(mul(attend(*pe, qv, kv, vv), wv)); }, c.name);
    with_params.insert(c.name);
  }
  // The encodings with learned parameters had them checked (a lost shared_module would skip them).
  EXPECT_EQ(with_params, (std::set<std::string>{"kerple", "kerple-power", "t5"}));
}

// ---------------------------------------------------------- whole-model gradcheck (f64) ----
TEST(PosencRotaryBias, TinyGptGradcheckEveryEncoding) {
  const int64_t B = 2, T = 7;
  for (auto& c : all_cases()) {
    SCOPED_TRACE(c.name);
    nn::GPT model(tiny_cfg(c.posenc), DType::F64, "test");
    model.init_weights(3);
    Rng r(5);
    // larger weights than the default init so that positions matter to the loss
    for (auto& [name, p] : model.named_parameters()) {
      if (name == "pe.r1" || name == "pe.r2") {
        r.fill_uniform(p.data(), 0.2, 1.5);
      } else if (name.find("norm") == std::string::npos) {
        r.fill_normal(p.data(), 0.0, 0.4);
      }
    }
    Tensor in = Tensor::empty({B, T}, DType::I64), tg = Tensor::empty({B, T}, DType::I64);
    for (int64_t i = 0; i < B * T; ++i) {
      in.data<int64_t>()[i] = (int64_t)r.below(11);
      tg.data<int64_t>()[i] = (int64_t)r.below(11);
    }
    fd_check(model.named_parameters(), [&] { return model.loss(in, tg); }, c.name, 12);
  }
}

// ----------------------------------------------------------------------------- properties ----
// RoPE / XPOS: with the same q and k at every position, logits depend only on i - j.
TEST(PosencRotary, LogitsDependOnlyOnRelativePosition) {
  const int64_t T = 12, Dh = 8;
  for (const char* name : {"rope", "rope-interleaved", "xpos", "xpos-gamma4", "rope-yarn", "rope-rerope",
                           "rope-leaky-rerope"}) {
    SCOPED_TRACE(name);
    json pj;
    for (auto& c : all_cases())
      if (c.name == name) pj = c.posenc;
    ModelConfig cfg = tiny_cfg(pj);
    cfg.d_model = 16;  // H = 2, Dh = 8
    auto pe = make_posenc(cfg, "test");
    Rng r(3);
    Tensor qrow = uniform(r, {Dh}), krow = uniform(r, {Dh});
    Tensor q = Tensor::empty({1, 1, T, Dh}, DType::F64), k = Tensor::empty({1, 1, T, Dh}, DType::F64);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < Dh; ++d) q.set(t * Dh + d, qrow.at(d)), k.set(t * Dh + d, krow.at(d));
    AttnState st;
    st.B = 1, st.H = 1, st.T = T, st.S = T, st.Dh = Dh, st.scale = 1.0;
    st.q = Variable(q), st.k = Variable(k), st.v = Variable(k);
    pe->rotate(st);
    Tensor s = pe->logits(st).data();  // [1, 1, T, T]
    for (int64_t i = 1; i < T; ++i)
      for (int64_t j = 1; j <= i; ++j)
        EXPECT_NEAR(s.at(i * T + j), s.at((i - 1) * T + (j - 1)), 1e-5) << "i " << i << " j " << j;
  }
}

TEST(PosencBias, AlibiSlopes) {
  auto expect = [](int64_t H, const std::vector<double>& exps) {
    std::vector<float> s = posenc_alibi_slopes(H);
    ASSERT_EQ((int64_t)s.size(), H);
    for (int64_t h = 0; h < H; ++h) EXPECT_NEAR(s[(size_t)h], std::pow(2.0, exps[(size_t)h]), 1e-7) << "H " << H << " h " << h;
  };
  std::vector<double> e8, e16;
  for (int h1 = 1; h1 <= 8; ++h1) e8.push_back(-h1);        // 2^-1 .. 2^-8
  for (int h1 = 1; h1 <= 16; ++h1) e16.push_back(-0.5 * h1);  // 2^-0.5 .. 2^-8
  expect(8, e8);
  expect(16, e16);
  // H = 12: slopes(8) then slopes(16)[0::2][:4] = 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5
  std::vector<double> e12 = e8;
  for (double e : {-0.5, -1.5, -2.5, -3.5}) e12.push_back(e);
  expect(12, e12);
  // and the bias the hook returns: B[h, i, j] = -m_h (i - j)
  ModelConfig cfg = tiny_cfg({{"type", "alibi"}});
  cfg.n_heads = 8;
  cfg.d_model = 16;
  auto pe = make_posenc(cfg, "test");
  AttnState st;
  st.B = 1, st.H = 8, st.T = 5, st.S = 5, st.Dh = 2;
  st.q = Variable(Tensor::zeros({1, 8, 5, 2}, DType::F64));
  Tensor b = pe->bias(st).data();
  ASSERT_EQ(b.shape(), Shape({1, 8, 5, 5}));
  for (int h = 0; h < 8; ++h)
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j <= i; ++j) EXPECT_NEAR(b.at((h * 5 + i) * 5 + j), -std::pow(2.0, -(h + 1)) * (i - j), 1e-12);
}

// Sandwich's bias is the inner product of two sinusoidal embeddings of width d (the head size)
// at positions i and j, less d/2, times H / (8 h1) (POSENC_SPEC §3): computed here from the
// embeddings p_m = [sin(m w_k), cos(m w_k)], w_k = 10000^(-2k/d), k = 1..d/2, in double. The
// lowest frequency, w_{d/2} = 1e-4, contributes cos(delta 1e-4) ~ 1 to every entry: a softmax
// cancels such a row constant, so only the table itself shows it.
TEST(PosencBias, SandwichIsTheInnerProductOfSinusoids) {
  ModelConfig cfg = tiny_cfg({{"type", "sandwich"}});
  const int64_t H = 4, d = 8, T = 40;
  cfg.n_heads = H;
  cfg.d_model = H * d;
  auto pe = make_posenc(cfg, "test");
  AttnState st;
  st.B = 1, st.H = H, st.T = T, st.S = T, st.Dh = d;
  st.q = Variable(Tensor::zeros({1, H, T, d}, DType::F64));
  Tensor b = pe->bias(st).data();
  ASSERT_EQ(b.shape(), Shape({1, H, T, T}));
  auto embedding = [&](int64_t m) {
    std::vector<double> p;
    for (int64_t k = 1; k <= d / 2; ++k) {
      const double w = std::pow(10000.0, -2.0 * (double)k / (double)d);
      p.push_back(std::sin((double)m * w));
      p.push_back(std::cos((double)m * w));
    }
    return p;
  };
  double worst = 0;
  std::string where;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      const std::vector<double> pi = embedding(i), pj = embedding(j);
      double dot = 0;
      for (size_t e = 0; e < pi.size(); ++e) dot += pi[e] * pj[e];
      for (int64_t h = 0; h < H; ++h) {
        const double want = (dot - (double)d / 2) * (double)H / (8.0 * (double)(h + 1));
        const double err = std::fabs(b.at((h * T + i) * T + j) - want);
        if (err > worst) worst = err, where = "h " + std::to_string(h) + " i " + std::to_string(i) + " j " + std::to_string(j);
      }
    }
  // ctxlab's float32 frequencies and angles: at most ~4e-7 here (6.1e-8 seen); the dropped lowest
  // frequency would move every entry by H / (8 h1) >= 0.125
  EXPECT_LT(worst, 2e-6) << "at " << where;
}

TEST(PosencBias, T5Buckets) {
  // direct float32 transcription of POSENC_SPEC §3
  auto ref = [](int64_t n, int64_t nb, int64_t md) -> int64_t {
    int64_t me = nb / 2;
    if (n < me) return n;
    float v = logf((float)n / (float)me) / logf((float)md / (float)me) * (float)(nb - me);
    return std::min<int64_t>(nb - 1, me + (int64_t)v);
  };
  for (auto [nb, md] : std::vector<std::pair<int64_t, int64_t>>{{32, 128}, {8, 12}, {6, 8}, {64, 1000}})
    for (int64_t n = 0; n <= 1000; ++n) ASSERT_EQ(posenc_t5_bucket(n, nb, md), ref(n, nb, md)) << n;
  // hand-checked values for the defaults (me = 16): ln(n/16)/ln(8) * 16, truncated
  for (int64_t n = 0; n < 16; ++n) EXPECT_EQ(posenc_t5_bucket(n, 32, 128), n);
  EXPECT_EQ(posenc_t5_bucket(16, 32, 128), 16);    // ln 1 = 0
  EXPECT_EQ(posenc_t5_bucket(20, 32, 128), 17);    // 0.1073 * 16 = 1.72
  EXPECT_EQ(posenc_t5_bucket(32, 32, 128), 21);    // 16/3 = 5.33
  EXPECT_EQ(posenc_t5_bucket(64, 32, 128), 26);    // 32/3 = 10.67
  EXPECT_EQ(posenc_t5_bucket(127, 32, 128), 31);   // 15.94
  EXPECT_EQ(posenc_t5_bucket(128, 32, 128), 31);   // 16 -> min(31, 32)
  EXPECT_EQ(posenc_t5_bucket(1000, 32, 128), 31);
}

TEST(PosencBias, KerpleClampInPlaceGradientAtProjectedValues) {
  for (bool power : {false, true}) {
    SCOPED_TRACE(power ? "power" : "log");
    ModelConfig cfg = tiny_cfg({{"type", "kerple"}, {"variant", power ? "power" : "log"}});
    auto pe = make_posenc(cfg, "test");
    auto params = pe->shared_module()->named_parameters();
    ASSERT_EQ(params.size(), 2u);
    Variable r1 = params[0].second, r2 = params[1].second;
    EXPECT_EQ(params[0].first, "r1");
    EXPECT_EQ(params[1].first, "r2");
    r1.data() = Tensor::from_vector<double>({-0.2, 0.7}, {2});
    r2.data() = Tensor::from_vector<double>({0.004, power ? 2.5 : 0.5}, {2});
    AttnState st;
    st.B = 1, st.H = 2, st.T = 4, st.S = 4, st.Dh = 4;
    st.q = Variable(Tensor::zeros({1, 2, 4, 4}, DType::F64));
    Variable b = pe->bias(st);
    EXPECT_DOUBLE_EQ(r1.data().at(0), 0.01);
    EXPECT_DOUBLE_EQ(r1.data().at(1), 0.7);
    EXPECT_DOUBLE_EQ(r2.data().at(0), 0.01);
    EXPECT_DOUBLE_EQ(r2.data().at(1), power ? 2.0 : 0.5);
    // the gradient is the ordinary one at the projected values (not masked where clamped)
    sum(b).backward();  // masked entries (j > i) read distance 0, where dB/dr = 0
    double d1 = 0, d2 = 0;  // sum over i >= j of dB/dr at head 0
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) {
        double delta = std::max(i - j, 0);
        if (power) {
          d1 += delta > 0 ? -std::pow(delta, 0.01) : 0.0;
          d2 += delta > 0 ? -0.01 * std::pow(delta, 0.01) * std::log(delta) : 0.0;
        } else {
          d1 += -std::log(1 + 0.01 * delta);
          d2 += -0.01 * delta / (1 + 0.01 * delta);
        }
      }
    EXPECT_NEAR(r1.grad().at(0), d1, 1e-12);
    EXPECT_NEAR(r2.grad().at(0), d2, 1e-12);
    EXPECT_NE(r1.grad().at(0), 0.0);
  }
}

// The projection writes r1 / r2 only where one is outside its bounds (CPU): a write drops the
// kept bf16 copy of the whole storage they live in (the optimizer's flat buffer), which every
// Linear would then convert again. Inside the bounds the storage's copy survives a bias call;
// outside, the values are clamped (and the copy is dropped with the write).
TEST(PosencBias, KerpleProjectionWritesOnlyWhenSomethingIsOutOfBounds) {
  ModelConfig cfg = tiny_cfg({{"type", "kerple"}});
  auto pe = make_posenc(cfg, "test");
  auto params = pe->shared_module()->named_parameters();
  Variable r1 = params[0].second, r2 = params[1].second;
  r1.data() = Tensor::from_vector<float>({0.5f, 0.7f}, {2});
  r2.data() = Tensor::from_vector<float>({0.3f, 0.5f}, {2});
  AttnState st;
  st.B = 1, st.H = 2, st.T = 4, st.S = 4, st.Dh = 4;
  st.q = Variable(Tensor::zeros({1, 2, 4, 4}));
  auto has_copy = [](const Variable& v) { return v.data().storage()->bf16_copy.load() != nullptr; };
  cpu::bf16_copy(r1.data()), cpu::bf16_copy(r2.data());  // kept copies, as a Linear keeps a weight's
  pe->bias(st);
  EXPECT_TRUE(has_copy(r1) && has_copy(r2)) << "a projection with nothing to clamp wrote the parameters";
  r1.data().set(1, -3.0);  // (a mutable access: r1's copy is dropped here already)
  cpu::bf16_copy(r1.data());
  pe->bias(st);
  EXPECT_FLOAT_EQ((float)r1.data().at(1), 0.01f);
  EXPECT_FALSE(has_copy(r1)) << "the clamp's write kept a stale copy";
  EXPECT_TRUE(has_copy(r2));
}

TEST(PosencRotaryBias, ParameterErrorsNameTheKey) {
  auto err = [](const json& pj) -> std::string {
    try {
      make_posenc(tiny_cfg(pj), "cfg.json");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  };
  auto has = [](const std::string& msg, const char* s) { return msg.find(s) != std::string::npos; };
  EXPECT_TRUE(has(err({{"type", "rope"}, {"bse", 10}}), "posenc.bse")) << err({{"type", "rope"}, {"bse", 10}});
  EXPECT_TRUE(has(err({{"type", "rope"}, {"base", 0.5}}), "posenc.base"));
  EXPECT_TRUE(has(err({{"type", "rope"}, {"pairing", "odd"}}), "posenc.pairing"));
  EXPECT_TRUE(has(err({{"type", "rope"}, {"scaling", {{"type", "pi"}, {"fctor", 2}}}}), "posenc.scaling.fctor"));
  EXPECT_TRUE(has(err({{"type", "rope"}, {"scaling", {{"type", "linear"}}}}), "posenc.scaling.type"));
  EXPECT_TRUE(has(err({{"type", "rope"}, {"scaling", {{"type", "pi"}, {"factor", -1}}}}), "posenc.scaling.factor"));
  EXPECT_TRUE(has(err({{"type", "rope"}, {"scaling", {{"type", "rerope"}, {"window", 2.5}}}}), "posenc.scaling.window"));
  EXPECT_TRUE(has(err({{"type", "rope"}, {"scaling", {{"type", "pi"}, {"log_n", 1}}}}), "posenc.scaling.log_n"));
  EXPECT_TRUE(has(err({{"type", "rope"}, {"scaling", "pi"}}), "posenc.scaling"));
  EXPECT_TRUE(has(err({{"type", "xpos"}, {"scale_base", 0}}), "posenc.scale_base"));
  EXPECT_TRUE(has(err({{"type", "xpos"}, {"pairing", "half"}}), "posenc.pairing"));
  EXPECT_TRUE(has(err({{"type", "alibi"}, {"slope", 1}}), "posenc.slope"));
  EXPECT_TRUE(has(err({{"type", "kerple"}, {"variant", "exp"}}), "posenc.variant"));
  EXPECT_TRUE(has(err({{"type", "t5"}, {"num_buckets", 7}}), "posenc.num_buckets"));
  EXPECT_TRUE(has(err({{"type", "t5"}, {"max_distance", 4}}), "posenc.max_distance"));
  EXPECT_TRUE(has(err({{"type", "sandwich"}, {"base", 1}}), "posenc.base"));
  ModelConfig odd = tiny_cfg({{"type", "rope"}});
  odd.d_model = 6;  // head_dim 3
  EXPECT_THROW(make_posenc(odd, "cfg.json"), Error);
}

}  // namespace

// Hierarchical learned positions (POSENC_SPEC §1): for t < L the decomposition gives back wpe[t];
// for t = q*L + r >= L it is alpha*u[q] + (1-alpha)*u[r] with u = (wpe - alpha*wpe[0])/(1-alpha).
TEST(PosencAbsolute, HierarchicalLearnedEqualsWpeBelowL) {
  ModelConfig c =
      testing_util::two_head_cfg(11, 8, 1, -1, 6, {{"type", "learned"}, {"hierarchical", true}});
  nn::GPT m(c, DType::F64);
  m.init_weights(1);
  Tensor wpe;
  for (auto& [name, p] : m.named_parameters())
    if (name == "wpe.weight") wpe = p.data();
  ASSERT_TRUE(wpe.defined());
  Rng r(5);
  r.fill_normal(wpe, 0.0, 1.0);
  const int64_t L = 6, D = 8, T = 2 * L + 3;
  Variable x(Tensor::zeros({1, T, D}, DType::F64), false);
  Tensor e = m.pe->embed(x, 0).data();  // [1, T, D] = the position vectors
  const double alpha = 0.4;
  auto u = [&](int64_t i, int64_t d) { return (wpe.at(i * D + d) - alpha * wpe.at(d)) / (1 - alpha); };
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const double want = t < L ? wpe.at(t * D + d) : alpha * u(t / L, d) + (1 - alpha) * u(t % L, d);
      EXPECT_NEAR(e.at(t * D + d), want, 1e-12) << "t " << t << " d " << d;
    }
  // With an offset pos0 the same rows come out.
  Variable x2(Tensor::zeros({1, 3, D}, DType::F64), false);
  Tensor e2 = m.pe->embed(x2, L - 1).data();
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t d = 0; d < D; ++d) EXPECT_NEAR(e2.at(t * D + d), e.at((L - 1 + t) * D + d), 1e-12);
}
