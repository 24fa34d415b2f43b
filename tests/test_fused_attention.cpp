// tests/test_fused_attention.cpp — the fused causal attention op (autograd/ops_attention.h):
// forward and the gradients of q, k, v and bias against the unfused composition (matmul /
// causal_mask / softmax; relative 1e-5 in f32, 1e-10 in f64) over shapes with T = 1 (the decode
// step's one-query kernel at its vector and tail sizes), odd T and
// Dh, a memory prefix (S > T), several tiles, with and without a bias, windows 0 / 1 / 3 / >= S;
// f64 gradchecks; argument errors; and the model level: a tiny GPT per encoding gives the same
// loss and parameter gradients with the fused path on and off (set_fast_path(FastPath::Attention)).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/ops_attention.h"
#include "core/fast_paths.h"
#include "core/threads.h"
#include "core/rng.h"
#include "nn/attention.h"
#include "nn/gpt.h"
#include "posenc/posenc.h"
#include "tests/test_util.h"

using namespace ctx;
using ctx::testing_util::rel_err;
using ctx::testing_util::uniform_tensor;
using ctx::testing_util::expect_error;
using ctx::testing_util::graph_has_op;
using ctx::testing_util::tiny_cfg;

namespace {


enum class BiasKind { None, HTS, OneHTS };  // undefined, [H, T, S], [1, H, T, S]

struct Case {
  int64_t B, H, T, S, Dh;
  BiasKind bias;
  int64_t window;
  std::string str() const {
    return "B" + std::to_string(B) + " H" + std::to_string(H) + " T" + std::to_string(T) + " S" +
           std::to_string(S) + " Dh" + std::to_string(Dh) + " bias " +
           (bias == BiasKind::None ? "none" : bias == BiasKind::HTS ? "[H,T,S]" : "[1,H,T,S]") +
           " window " + std::to_string(window);
  }
};

// Fused vs composed: output and every gradient (seeded with a random dL/do), with the same
// dropout mask on both when `drop` is active. Returns the fused output.
Tensor compare_with_composed(const Case& c, DType dt, double tol, uint64_t seed, const DropoutMask& drop = {}) {
  SCOPED_TRACE(c.str() + (dt == DType::F32 ? " f32" : " f64") + (drop.active() ? " dropout" : ""));
  Rng r(seed);
  const Tensor q = uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, dt, -1.5, 1.5);
  const Tensor k = uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt, -1.5, 1.5);
  const Tensor v = uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, dt);
  Tensor bias;
  if (c.bias == BiasKind::HTS) bias = uniform_tensor(r, {c.H, c.T, c.S}, dt, -2.0, 2.0);
  if (c.bias == BiasKind::OneHTS) bias = uniform_tensor(r, {1, c.H, c.T, c.S}, dt, -2.0, 2.0);
  const Tensor seed_grad = uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, dt);
  const double scale = 1.0 / std::sqrt((double)c.Dh);

  struct Run {
    Variable q, k, v, b, o;
  };
  auto run = [&](bool fused) {
    Run x{Variable(q.clone(), true), Variable(k.clone(), true), Variable(v.clone(), true),
          bias.defined() ? Variable(bias.clone(), true) : Variable(), Variable()};
    x.o = fused ? fused_causal_attention(x.q, x.k, x.v, x.b, scale, c.window, {}, 0, drop)
                : causal_attention_composed(x.q, x.k, x.v, x.b, scale, c.window, {}, drop);
    x.o.backward(seed_grad);
    return x;
  };
  Run f = run(true), u = run(false);
  EXPECT_EQ(f.o.op_name(), "fused_causal_attention");
  EXPECT_LE(rel_err(f.o.data(), u.o.data()), tol) << "output";
  EXPECT_LE(rel_err(f.q.grad(), u.q.grad()), tol) << "dq";
  EXPECT_LE(rel_err(f.k.grad(), u.k.grad()), tol) << "dk";
  EXPECT_LE(rel_err(f.v.grad(), u.v.grad()), tol) << "dv";
  if (bias.defined()) {
    EXPECT_LE(rel_err(f.b.grad(), u.b.grad()), tol) << "dbias";
  }
  return f.o.data();
}

// Shapes: T = 1, odd T and Dh, memory (S > T), T and S spanning several 64-key tiles and not
// multiples of them, a memory offset that is not a multiple of the tile.
std::vector<Case> all_cases() {
  const std::vector<std::array<int64_t, 5>> shapes = {
      {1, 1, 1, 1, 4},   {2, 3, 1, 6, 5},   {2, 2, 7, 7, 3},    {1, 3, 5, 12, 7},
      {2, 2, 9, 9, 16},  {1, 2, 70, 70, 8}, {2, 1, 67, 131, 5}, {1, 2, 130, 130, 33},
      // one query (a decode step's kernel, one_query): keys in fours and a tail, whole vectors of
      // logits and a part one, Dh in register blocks of 4, 3, 2, 1 vectors and a scalar tail
      {2, 3, 1, 37, 32}, {1, 2, 1, 131, 64}, {2, 2, 1, 70, 80}, {2, 2, 1, 19, 24}, {1, 1, 1, 258, 48},
  };
  std::vector<Case> cases;
  for (auto& s : shapes)
    for (BiasKind b : {BiasKind::None, BiasKind::HTS, BiasKind::OneHTS})
      for (int64_t w : {int64_t(0), int64_t(1), int64_t(3), s[3] + 2}) {
        if (b == BiasKind::OneHTS && w != 0) continue;  // the two bias layouts are one kernel path
        cases.push_back({s[0], s[1], s[2], s[3], s[4], b, w});
      }
  return cases;
}

TEST(FusedAttention, MatchesComposedF32) {
  uint64_t seed = 1;
  for (const Case& c : all_cases()) compare_with_composed(c, DType::F32, 1e-5, seed++);
}

TEST(FusedAttention, MatchesComposedF64) {
  uint64_t seed = 1000;
  for (const Case& c : all_cases()) compare_with_composed(c, DType::F64, 1e-10, seed++);
}

// Dropout on the probabilities inside the kernels (AttnDims::dropout): the same mask as
// dropout(softmax(s), mask) on the composed path, so the two agree as without dropout; and the
// mask does something (the output moves against the undropped one).
TEST(FusedAttention, MatchesComposedWithDropout) {
  uint64_t seed = 2000;
  for (const Case& c : all_cases()) {
    for (DType dt : {DType::F32, DType::F64}) {
      const double p = seed % 3 == 0 ? 0.1 : (seed % 3 == 1 ? 0.3 : 0.6);
      const Tensor dropped = compare_with_composed(c, dt, dt == DType::F32 ? 1e-5 : 1e-10, seed,
                                                   dropout_mask(p, seed * 7919));
      if (c.T * c.S >= 20) {  // enough probabilities that some are dropped
        const Tensor plain = compare_with_composed(c, dt, dt == DType::F32 ? 1e-5 : 1e-10, seed);
        EXPECT_GT(rel_err(dropped, plain), 1e-3) << c.str() << ": dropout changed nothing";
      }
      ++seed;
    }
  }
}

TEST(FusedAttention, BiasGradientWithMoreThreadsThanHeads) {
  // the backward then splits the batch into groups with their own bias-gradient buffers
  const int prev = ctx::num_threads();
  for (int threads : {1, 3, 4}) {
    ctx::set_num_threads(threads);
    compare_with_composed({5, 1, 9, 13, 4, BiasKind::HTS, 0}, DType::F64, 1e-10, 40 + threads);
    compare_with_composed({3, 2, 70, 70, 8, BiasKind::OneHTS, 6}, DType::F32, 1e-5, 50 + threads);
  }
  ctx::set_num_threads(prev);
}

TEST(FusedAttention, LargeLogitsAndPartialGradients) {
  // peaky softmax (large scale, bias with -inf-free but big values); only some inputs need grads
  Rng r(7);
  const int64_t B = 2, H = 2, T = 66, S = 80, Dh = 6;
  Tensor q = uniform_tensor(r, {B, H, T, Dh}, DType::F32, -3, 3), k = uniform_tensor(r, {B, H, S, Dh}, DType::F32, -3, 3);
  Tensor v = uniform_tensor(r, {B, H, S, Dh}, DType::F32), b = uniform_tensor(r, {H, T, S}, DType::F32, -20, 20);
  for (bool grad_q : {true, false}) {
    Variable qf(q, grad_q), kf(k, !grad_q), vf(v, true), bf(b, false);
    Variable qc(q, grad_q), kc(k, !grad_q), vc(v, true), bc(b, false);
    Variable of = fused_causal_attention(qf, kf, vf, bf, 2.0, 5), oc = causal_attention_composed(qc, kc, vc, bc, 2.0, 5);
    EXPECT_LE(rel_err(of.data(), oc.data()), 1e-5);
    sum(square(of)).backward();
    sum(square(oc)).backward();
    EXPECT_LE(rel_err(vf.grad(), vc.grad()), 1e-5);
    const Tensor& gf = grad_q ? qf.grad() : kf.grad();
    const Tensor& gc = grad_q ? qc.grad() : kc.grad();
    EXPECT_LE(rel_err(gf, gc), 1e-5);
  }
}

TEST(FusedAttention, NoGradModeAndEveryRowFinite) {
  Rng r(8);
  Tensor q = uniform_tensor(r, {1, 2, 65, 4}, DType::F32), k = uniform_tensor(r, {1, 2, 65, 4}, DType::F32),
         v = uniform_tensor(r, {1, 2, 65, 4}, DType::F32);
  NoGradGuard ng;
  Variable o = fused_causal_attention(Variable(q, true), Variable(k, true), Variable(v, true), Variable(), 0.5, 1);
  EXPECT_FALSE(o.requires_grad());
  // window 1: each query sees only its own key, so o = v
  for (int64_t i = 0; i < o.data().numel(); ++i) {
    ASSERT_TRUE(std::isfinite(o.data().at(i)));
    EXPECT_NEAR(o.data().at(i), v.at(i), 1e-6);
  }
}

// ---------------------------------------------------------------------------- gradcheck ----

TEST(FusedAttention, GradcheckF64) {
  Rng r(11);
  struct G {
    int64_t B, H, T, S, Dh, window;
    bool bias;
  };
  for (G c : std::vector<G>{{2, 2, 3, 5, 3, 0, true}, {1, 2, 4, 4, 5, 2, true}, {2, 1, 1, 3, 2, 0, false},
                            {1, 1, 5, 5, 4, 3, false}}) {
    SCOPED_TRACE("B" + std::to_string(c.B) + " H" + std::to_string(c.H) + " T" + std::to_string(c.T) +
                 " S" + std::to_string(c.S) + " window " + std::to_string(c.window));
    std::vector<Tensor> in = {uniform_tensor(r, {c.B, c.H, c.T, c.Dh}, DType::F64), uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, DType::F64),
                              uniform_tensor(r, {c.B, c.H, c.S, c.Dh}, DType::F64)};
    std::vector<std::string> names = {"q", "k", "v"};
    if (c.bias) {
      in.push_back(uniform_tensor(r, {c.H, c.T, c.S}, DType::F64));
      names.push_back("bias");
    }
    const int64_t w = c.window;
    for (double p : {0.0, 0.4}) {  // a fixed mask: the op is a smooth function of its inputs
      SCOPED_TRACE("dropout " + std::to_string(p));
      const DropoutMask drop = p > 0 ? dropout_mask(p, 99) : DropoutMask{};
      GradcheckResult res = gradcheck(
          [w, drop](const std::vector<Variable>& x) {
            return fused_causal_attention(x[0], x[1], x[2], x.size() > 3 ? x[3] : Variable(), 0.8, w, {}, 0, drop);
          },
          in, names);
      EXPECT_TRUE(res.pass) << res.summary();
    }
  }
}

// keys > 0 (a decoding step reading the KV cache's buffers in place): k, v hold more rows than
// keys; the result and the gradients of q, the bias and the key rows equal those of the call on
// the first `keys` rows alone, the other rows get a zero gradient and change nothing (they hold
// random values); gradcheck in f64 through the in-place call; a bad `keys` is an error.
TEST(FusedAttention, KeysReadInPlaceFromLargerBuffers) {
  Rng r(23);
  const int64_t B = 2, H = 2, T = 3, S = 7, R = 11, Dh = 5;
  for (DType dt : {DType::F32, DType::F64}) {
    SCOPED_TRACE(dt == DType::F32 ? "f32" : "f64");
    const Tensor q = uniform_tensor(r, {B, H, T, Dh}, dt, -1.5, 1.5);
    const Tensor kf = uniform_tensor(r, {B, H, R, Dh}, dt, -1.5, 1.5), vf = uniform_tensor(r, {B, H, R, Dh}, dt);
    const Tensor bias = uniform_tensor(r, {H, T, S}, dt, -2.0, 2.0), g = uniform_tensor(r, {B, H, T, Dh}, dt);
    Variable q1(q.clone(), true), k1(kf.clone(), true), v1(vf.clone(), true), b1(bias.clone(), true);
    Variable o1 = fused_causal_attention(q1, k1, v1, b1, 0.4, 0, {}, S);
    o1.backward(g);
    Variable q2(q.clone(), true), b2(bias.clone(), true);
    Variable kr(kf.clone(), true), vr(vf.clone(), true);
    Variable o2 = fused_causal_attention(q2, slice(kr, 2, 0, S), slice(vr, 2, 0, S), b2, 0.4, 0);
    o2.backward(g);
    const double tol = dt == DType::F32 ? 1e-6 : 1e-13;
    EXPECT_LE(rel_err(o1.data(), o2.data()), tol) << "output";
    EXPECT_LE(rel_err(q1.grad(), q2.grad()), tol) << "dq";
    EXPECT_LE(rel_err(b1.grad(), b2.grad()), tol) << "dbias";
    EXPECT_LE(rel_err(k1.grad(), kr.grad()), tol) << "dk (rows S.. zero on both sides)";
    EXPECT_LE(rel_err(v1.grad(), vr.grad()), tol) << "dv";
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t e = S * Dh; e < R * Dh; ++e) {
        ASSERT_EQ(k1.grad().at(bh * R * Dh + e), 0.0) << "a row past the keys got a gradient";
        ASSERT_EQ(v1.grad().at(bh * R * Dh + e), 0.0);
      }
  }
  std::vector<Tensor> in = {uniform_tensor(r, {1, 2, 2, 3}, DType::F64), uniform_tensor(r, {1, 2, 6, 3}, DType::F64),
                            uniform_tensor(r, {1, 2, 6, 3}, DType::F64)};
  GradcheckResult res = gradcheck(
      [](const std::vector<Variable>& x) { return fused_causal_attention(x[0], x[1], x[2], Variable(), 0.9, 0, {}, 4); },
      in, {"q", "k", "v"});
  EXPECT_TRUE(res.pass) << res.summary();
  Variable q(in[0], false), k(in[1], false), v(in[2], false);
  expect_error([&] { fused_causal_attention(q, k, v, Variable(), 1.0, 0, {}, 7); },
               {"fused_causal_attention", "keys must be in [0, 6]", "got 7"});
  expect_error([&] { fused_causal_attention(q, k, v, Variable(), 1.0, 0, {}, 1); },
               {"fused_causal_attention", "fewer keys than"});
}

TEST(FusedAttention, GradcheckF64SeveralTiles) {
  // T and S beyond one 64-wide tile, memory offset 9; a subset of the elements
  Rng r(12);
  const int64_t B = 1, H = 2, T = 70, S = 79, Dh = 3;
  std::vector<Tensor> in = {uniform_tensor(r, {B, H, T, Dh}, DType::F64), uniform_tensor(r, {B, H, S, Dh}, DType::F64),
                            uniform_tensor(r, {B, H, S, Dh}, DType::F64), uniform_tensor(r, {1, H, T, S}, DType::F64)};
  GradcheckOptions opt;
  opt.max_elements = 120;
  for (int64_t w : {int64_t(0), int64_t(20)}) {
    GradcheckResult res = gradcheck(
        [w](const std::vector<Variable>& x) { return fused_causal_attention(x[0], x[1], x[2], x[3], 0.6, w); },
        in, {"q", "k", "v", "bias"}, opt);
    EXPECT_TRUE(res.pass) << "window " << w << ": " << res.summary();
  }
}

// ------------------------------------------------------------------------------- errors ----

TEST(FusedAttention, ShapeErrorsNameTheOpAndShapes) {
  auto var = [](const Shape& s, DType dt = DType::F32) { return Variable(Tensor::zeros(s, dt), true); };
  const Variable q = var({2, 3, 4, 5}), k = var({2, 3, 6, 5}), v = var({2, 3, 6, 5});
  const std::string op = "fused_causal_attention";
  expect_error([&] { fused_causal_attention(var({3, 4, 5}), k, v, Variable(), 1.0); },
               {op, "q must be [B, H, T, Dh]", "f32[3, 4, 5]"});
  expect_error([&] { fused_causal_attention(q, var({2, 3, 6}), v, Variable(), 1.0); },
               {op, "k and v must be [B, H, S, Dh]", "f32[2, 3, 6]"});
  expect_error([&] { fused_causal_attention(q, k, var({2, 3, 7, 5}), Variable(), 1.0); },
               {op, "f32[2, 3, 6, 5]", "f32[2, 3, 7, 5]"});
  expect_error([&] { fused_causal_attention(q, var({2, 3, 6, 4}), var({2, 3, 6, 4}), Variable(), 1.0); },
               {op, "f32[2, 3, 6, 4]", "f32[2, 3, 4, 5]"});
  expect_error([&] { fused_causal_attention(q, var({1, 3, 6, 5}), var({1, 3, 6, 5}), Variable(), 1.0); },
               {op, "f32[1, 3, 6, 5]", "f32[2, 3, 4, 5]"});
  expect_error([&] { fused_causal_attention(q, var({2, 3, 3, 5}), var({2, 3, 3, 5}), Variable(), 1.0); },
               {op, "S must be >= T", "f32[2, 3, 3, 5]", "f32[2, 3, 4, 5]"});
  expect_error([&] { fused_causal_attention(q, k, v, var({3, 4, 7}), 1.0); },
               {op, "bias must be [H, T, S] = [3, 4, 6]", "f32[3, 4, 7]"});
  expect_error([&] { fused_causal_attention(q, k, v, var({2, 3, 4, 6}), 1.0); },
               {op, "bias", "f32[2, 3, 4, 6]"});
  expect_error([&] { fused_causal_attention(q, k, v, var({3, 4, 6}, DType::F64), 1.0); }, {op, "f64[3, 4, 6]"});
  expect_error([&] { fused_causal_attention(q, var({2, 3, 6, 5}, DType::F64), v, Variable(), 1.0); },
               {op, "f64[2, 3, 6, 5]"});
  expect_error([&] { fused_causal_attention(q, k, v, Variable(), 1.0, -1); }, {op, "window must be >= 0", "-1"});
  expect_error([&] { fused_causal_attention(var({2, 3, 4, 5}, DType::I32), k, v, Variable(), 1.0); },
               {op, "f32 or f64", "i32[2, 3, 4, 5]"});
  expect_error([&] { causal_attention_composed(q, k, v, var({3, 4, 7}), 1.0); },
               {"causal_attention_composed", "f32[3, 4, 7]"});
}

// -------------------------------------------------------------------------- model level ----

using json = nlohmann::json;

// RAII: the fused path forced on or off, restored afterwards.
struct FusedGuard {
  explicit FusedGuard(bool on) : prev(fast_path_enabled(FastPath::Attention)) {
    set_fast_path(FastPath::Attention, on);
  }
  ~FusedGuard() { set_fast_path(FastPath::Attention, prev); }
  bool prev;
};

struct LossGrads {
  double loss;
  bool fused_in_graph;
  std::vector<std::pair<std::string, Tensor>> grads;
};

LossGrads loss_and_grads(nn::GPT& m, const Tensor& in, const Tensor& tg, bool fused) {
  FusedGuard guard(fused);
  m.zero_grad();
  Variable loss = m.loss(in, tg);
  LossGrads r{loss.data().item(), graph_has_op(loss, "fused_causal_attention"), {}};
  loss.backward();
  for (auto& [name, p] : m.named_parameters()) r.grads.emplace_back(name, p.grad().defined() ? p.grad().clone() : Tensor());
  return r;
}

// dropout > 0: the model trains with dropout; both runs start from the same dropout Rng state,
// so they draw the same masks (the fused kernels apply the attention mask themselves).
void check_model(const json& posenc, int64_t window, uint64_t seed, double dropout = 0) {
  SCOPED_TRACE(posenc.dump() + " window " + std::to_string(window) + " dropout " + std::to_string(dropout));
  ModelConfig cfg = tiny_cfg(posenc);
  cfg.dropout = dropout;
  nn::GPT m(cfg);
  m.train();
  m.init_weights(seed);
  Rng r(seed + 1);
  for (auto& [name, p] : m.named_parameters())  // larger weights: attention far from uniform
    if (name.find("norm") == std::string::npos && name != "pe.r1" && name != "pe.r2")
      r.fill_normal(p.data(), 0.0, 0.3);
  if (window > 0) m.set_attention_window(window);
  const int64_t B = 3, T = 21;
  Tensor in = Tensor::empty({B, T}, DType::I64), tg = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) {
    in.set(i, (double)r.below(17));
    tg.set(i, (double)r.below(17));
  }
  m.dropout_rng.seed_with(seed + 2);
  LossGrads u = loss_and_grads(m, in, tg, false);
  m.dropout_rng.seed_with(seed + 2);
  LossGrads f = loss_and_grads(m, in, tg, true);
  EXPECT_FALSE(u.fused_in_graph);
  EXPECT_TRUE(f.fused_in_graph) << "the fused path was not taken";
  EXPECT_LE(std::fabs(f.loss - u.loss), 1e-5 * std::fabs(u.loss));
  ASSERT_EQ(f.grads.size(), u.grads.size());
  for (size_t i = 0; i < u.grads.size(); ++i) {
    SCOPED_TRACE(u.grads[i].first);
    ASSERT_TRUE(u.grads[i].second.defined());
    ASSERT_TRUE(f.grads[i].second.defined());
    EXPECT_LE(rel_err(f.grads[i].second, u.grads[i].second), 1e-5);
  }
}

const std::vector<json>& fused_encodings() {
  static const std::vector<json> e = {
      {{"type", "none"}},  {{"type", "learned"}}, {{"type", "sinusoidal"}}, {{"type", "rope"}},
      {{"type", "xpos"}},  {{"type", "alibi"}},   {{"type", "kerple"}},     {{"type", "sandwich"}},
      {{"type", "t5"}, {"num_buckets", 8}, {"max_distance", 16}},
      {{"type", "rope"}, {"scaling", {{"type", "yarn"}, {"factor", 2.0}}}},
      {{"type", "kerple"}, {"variant", "power"}},
      // content-position encodings: relative terms inside the kernel (RelTerms)
      {{"type", "shaw"}, {"max_relative_position", 4}}, {{"type", "xl"}},
      {{"type", "deberta"}, {"position_buckets", 8}, {"max_relative_positions", 16}}, {{"type", "tupe"}},
  };
  return e;
}

TEST(FusedAttentionModel, LossAndGradsEqualUnfusedPerEncoding) {
  uint64_t seed = 50;
  for (const json& pe : fused_encodings()) check_model(pe, 0, seed++);
}

TEST(FusedAttentionModel, SlidingWindow) {
  uint64_t seed = 80;
  for (const json& pe : {json{{"type", "rope"}}, json{{"type", "t5"}}, json{{"type", "alibi"}},
                         json{{"type", "shaw"}, {"max_relative_position", 3}}})
    check_model(pe, 5, seed++);
}

TEST(FusedAttentionModel, WhichEncodingsTakeTheFusedPath) {
  const std::vector<std::pair<json, bool>> cases = {
      {{{"type", "none"}}, true},
      {{{"type", "rope"}, {"scaling", {{"type", "pi"}, {"factor", 2.0}}}}, true},
      {{{"type", "rope"}, {"scaling", {{"type", "rerope"}}}}, false},
      {{{"type", "rope"}, {"scaling", {{"type", "leaky-rerope"}, {"factor", 4.0}}}}, false},
      {{{"type", "shaw"}}, true},
      {{{"type", "xl"}}, true},
      {{{"type", "deberta"}}, true},
      {{{"type", "tupe"}}, true},
  };
  for (auto& [pe, expect] : cases) {
    SCOPED_TRACE(pe.dump());
    nn::GPT m(tiny_cfg(pe));
    m.init_weights(3);
    AttnState st;
    EXPECT_EQ(m.pe->fused_attention_ok(st), expect);
    FusedGuard guard(true);
    Tensor in = Tensor::zeros({1, 5}, DType::I64);
    EXPECT_EQ(graph_has_op(m.loss(in, in), "fused_causal_attention"), expect);
  }
}

// Training with dropout keeps the fused path (the kernels drop the probabilities), with the
// loss and gradients of the unfused path under the same masks, for plain, bias and
// content-position encodings and a window.
TEST(FusedAttentionModel, DropoutInTrainingTakesTheFusedPath) {
  uint64_t seed = 120;
  for (const json& pe : {json{{"type", "rope"}}, json{{"type", "alibi"}}, json{{"type", "learned"}},
                         json{{"type", "shaw"}, {"max_relative_position", 4}}, json{{"type", "xl"}},
                         json{{"type", "deberta"}, {"position_buckets", 8}, {"max_relative_positions", 16}}})
    check_model(pe, 0, seed++, 0.2);
  check_model(json{{"type", "t5"}}, 5, seed++, 0.3);
  // and the dropout does something: another dropout seed gives another loss
  ModelConfig c = tiny_cfg({{"type", "rope"}});
  c.dropout = 0.3;
  nn::GPT m(c);
  m.init_weights(4);
  m.train();
  FusedGuard guard(true);
  Tensor in = Tensor::zeros({1, 6}, DType::I64);
  m.dropout_rng.seed_with(1);
  const double l1 = m.loss(in, in).data().item();
  m.dropout_rng.seed_with(2);
  EXPECT_NE(m.loss(in, in).data().item(), l1);
  m.eval();
  EXPECT_TRUE(graph_has_op(m.loss(in, in), "fused_causal_attention"));
  set_fast_path(FastPath::Attention, false);
  EXPECT_FALSE(graph_has_op(m.loss(in, in), "fused_causal_attention"));
}

// The attention module itself drops its probabilities in training: nn::Attention has no residual
// dropout of its own (the blocks do), so its training output differs from its eval output only
// through the probabilities' mask. One seed is drawn from the dropout Rng per call, and the fused
// and unfused paths give the same output from the same Rng state. (The model-level checks above
// would pass with the attention's mask dropped: the embedding and residual dropouts move the loss.)
double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.at(i) - b.at(i)));
  return m;
}

TEST(FusedAttentionModel, TheAttentionModuleDropsItsProbabilities) {
  for (const json& pe : {json{{"type", "rope"}}, json{{"type", "alibi"}}, json{{"type", "learned"}}}) {
    SCOPED_TRACE(pe.dump());
    ModelConfig c = tiny_cfg(pe);
    c.dropout = 0.5;
    nn::GPT m(c);
    m.init_weights(7);
    const nn::Attention& attn = *m.blocks[0]->attn;
    Rng r(8);
    Tensor x = Tensor::empty({2, 9, c.d_model}, DType::F32);
    r.fill_normal(x, 0.0, 1.0);
    auto out = [&](bool training, bool fused, uint64_t seed, Rng::State* after = nullptr) {
      FusedGuard guard(fused);
      training ? m.train() : m.eval();
      Rng rng(seed);
      Tensor o = attn.forward(Variable(x, false), &rng).data().clone();
      if (after) *after = rng.state();
      return o;
    };
    Rng::State st;
    const Tensor eval_o = out(false, true, 1), train_f = out(true, true, 1, &st), train_u = out(true, false, 1);
    Rng one(1);
    one.next_u64();
    EXPECT_EQ(st.s, one.state().s) << "one seed drawn per call";
    const double size = max_abs_diff(eval_o, Tensor::zeros(eval_o.shape()));  // the output's scale
    ASSERT_GT(size, 1e-4);
    EXPECT_GT(max_abs_diff(train_f, eval_o), 0.1 * size) << "training output equals the eval output: no dropout";
    EXPECT_LT(max_abs_diff(train_f, train_u), 1e-5 * size) << "fused and unfused differ under the same Rng state";
    EXPECT_GT(max_abs_diff(train_f, out(true, true, 2)), 0.1 * size) << "another seed, the same mask";
    EXPECT_LT(max_abs_diff(eval_o, out(false, false, 3)), 1e-5 * size);  // eval: no dropout, either path
  }
}

}  // namespace
