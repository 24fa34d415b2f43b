// tests/test_heads.cpp — split_heads / merge_heads (autograd/ops_heads.h): forward and
// gradients equal (bit for bit) the reshape / permute / slice composition they replace, over
// shapes with B = 1, H = 1, odd Dh, a memory prefix (q_begin > 0), and any subset of the three
// outputs receiving a gradient; f64 gradchecks through each output and combinations; no-grad
// mode, a retained graph backpropagated twice, argument errors; and the model level: tiny
// GPTs (fused-attention encodings, the content-position ones, Transformer-XL with memory) give
// the same loss and parameter gradients with the fused heads on and off.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "autograd/ops_heads.h"
#include "core/fast_paths.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "tests/test_util.h"

using namespace ctx;
using ctx::testing_util::uniform_tensor;
using ctx::testing_util::expect_error;
using ctx::testing_util::graph_has_op;
using ctx::testing_util::tiny_cfg;

namespace {

// Same shape, dtype and bytes (+0 and -0 compare equal, as values).
void expect_same(const Tensor& a, const Tensor& b) {
  ASSERT_TRUE(a.defined());
  ASSERT_TRUE(b.defined());
  ASSERT_EQ(a.str(), b.str());
  int64_t bad = 0;
  for (int64_t i = 0; i < a.numel(); ++i) bad += a.at(i) != b.at(i);
  EXPECT_EQ(bad, 0) << "of " << a.numel() << " elements differ";
}

// RAII: the fused kernels forced on or off, restored afterwards.
struct HeadsGuard {
  explicit HeadsGuard(bool on) : prev(fast_path_enabled(FastPath::Heads)) { set_fast_path(FastPath::Heads, on); }
  ~HeadsGuard() { set_fast_path(FastPath::Heads, prev); }
  bool prev;
};

// What nn/attention.cpp computed before split_heads: [B, S, 3D] -> q [B, H, S-q0, Dh], k, v.
std::array<Variable, 3> composed_split(const Variable& qkv, int64_t H, int64_t q0) {
  const int64_t B = qkv.size(0), S = qkv.size(1), Dh = qkv.size(2) / (3 * H);
  Variable heads = permute(reshape(qkv, {B, S, 3, H, Dh}), {2, 0, 3, 1, 4});
  Variable q = reshape(slice(heads, 0, 0, 1), {B, H, S, Dh});
  if (q0 > 0) q = slice(q, 2, q0, S);
  return {q, reshape(slice(heads, 0, 1, 2), {B, H, S, Dh}), reshape(slice(heads, 0, 2, 3), {B, H, S, Dh})};
}

struct SplitCase {
  int64_t B, S, H, Dh, q0;
};
const std::vector<SplitCase>& split_cases() {
  static const std::vector<SplitCase> c = {
      {2, 5, 3, 4, 0}, {1, 1, 1, 1, 0}, {3, 7, 2, 5, 3}, {2, 6, 1, 3, 5}, {4, 33, 8, 32, 0}, {2, 40, 4, 8, 17},
  };
  return c;
}

// d(sum(gq*q + gk*k + gv*v))/dqkv through split `fn`, with the outputs in `use` taking part.
Tensor split_grad(const std::function<std::array<Variable, 3>(const Variable&)>& fn, const Tensor& x,
                  const std::array<Tensor, 3>& seeds, const std::array<bool, 3>& use) {
  Variable xv(x.clone(), true);
  auto out = fn(xv);
  Variable l;
  for (int i = 0; i < 3; ++i) {
    if (!use[i]) continue;
    Variable t = sum(mul(out[i], Variable(seeds[i])));
    l = l.defined() ? add(l, t) : t;
  }
  l.backward();
  return xv.grad();
}

void check_split(const SplitCase& c, DType dt) {
  SCOPED_TRACE("B" + std::to_string(c.B) + " S" + std::to_string(c.S) + " H" + std::to_string(c.H) + " Dh" +
               std::to_string(c.Dh) + " q0 " + std::to_string(c.q0) + " " + dtype_name(dt));
  HeadsGuard guard(true);
  Rng r(c.B * 1000 + c.S * 10 + c.Dh);
  const int64_t D = c.H * c.Dh;
  Tensor x = uniform_tensor(r, {c.B, c.S, 3 * D}, dt);
  auto fused = split_heads(Variable(x, true), c.H, c.q0);
  auto ref = composed_split(Variable(x, true), c.H, c.q0);
  for (int i = 0; i < 3; ++i) {
    expect_same(fused[i].data(), ref[i].data());
    EXPECT_EQ(fused[i].op_name(), "split_heads.out");
  }
  std::array<Tensor, 3> seeds;
  for (int i = 0; i < 3; ++i) seeds[i] = uniform_tensor(r, ref[i].shape(), dt);
  auto fused_fn = [&](const Variable& v) { return split_heads(v, c.H, c.q0); };
  auto ref_fn = [&](const Variable& v) { return composed_split(v, c.H, c.q0); };
  for (int mask = 1; mask < 8; ++mask) {  // every non-empty subset of {q, k, v}
    SCOPED_TRACE("outputs used: " + std::to_string(mask));
    std::array<bool, 3> use = {(mask & 1) != 0, (mask & 2) != 0, (mask & 4) != 0};
    expect_same(split_grad(fused_fn, x, seeds, use), split_grad(ref_fn, x, seeds, use));
  }
}

TEST(SplitHeads, EqualsCompositionF32) {
  for (const auto& c : split_cases()) check_split(c, DType::F32);
}
TEST(SplitHeads, EqualsCompositionF64) {
  for (const auto& c : split_cases()) check_split(c, DType::F64);
}

TEST(SplitHeads, FallbackIsTheComposition) {
  HeadsGuard guard(false);
  Rng r(5);
  Tensor x = uniform_tensor(r, {2, 4, 12}, DType::F32);
  auto a = split_heads(Variable(x, true), 2, 1);
  auto b = composed_split(Variable(x, true), 2, 1);
  for (int i = 0; i < 3; ++i) {
    expect_same(a[i].data(), b[i].data());
    EXPECT_EQ(a[i].op_name(), i == 0 ? "slice" : "reshape");
  }
}

// Gradchecks: the output is a combination of the used outputs (shapes differ with q0 > 0, so
// they are concatenated along the sequence dim); squares make the gradient depend on values.
void gradcheck_split(int64_t B, int64_t S, int64_t H, int64_t Dh, int64_t q0,
                     const std::function<Variable(const std::array<Variable, 3>&)>& combine, const std::string& what) {
  SCOPED_TRACE(what + " q0 " + std::to_string(q0));
  HeadsGuard guard(true);
  Rng r(77 + q0);
  Tensor x = uniform_tensor(r, {B, S, 3 * H * Dh}, DType::F64);
  auto res = gradcheck([&](const std::vector<Variable>& in) { return combine(split_heads(in[0], H, q0)); }, {x}, {"qkv"});
  EXPECT_TRUE(res.pass) << res.summary();
}

TEST(SplitHeads, GradcheckF64) {
  using O = std::array<Variable, 3>;
  for (int64_t q0 : {0, 2}) {
    gradcheck_split(2, 5, 2, 3, q0, [](const O& o) { return o[0]; }, "q only");
    gradcheck_split(2, 5, 2, 3, q0, [](const O& o) { return o[1]; }, "k only");
    gradcheck_split(2, 5, 2, 3, q0, [](const O& o) { return square(o[2]); }, "v only, squared");
    gradcheck_split(2, 5, 2, 3, q0, [](const O& o) { return concat({o[0], square(o[2])}, 2); }, "q and v");
    gradcheck_split(2, 5, 2, 3, q0, [](const O& o) { return concat({square(o[0]), o[1], o[2]}, 2); }, "all");
    gradcheck_split(2, 5, 2, 3, q0, [](const O& o) { return concat({mul(o[0], o[0]), o[0], o[1]}, 2); },
                    "q used twice, k");
  }
  // attention-like: q k^T then times v (every output reached through a matmul)
  gradcheck_split(1, 4, 2, 3, 0, [](const O& o) { return matmul(matmul(o[0], o[1], false, true), o[2]); },
                  "q k^T v");
}

TEST(SplitHeads, NoGradModeAndConstantInput) {
  HeadsGuard guard(true);
  Rng r(9);
  Tensor x = uniform_tensor(r, {2, 3, 12}, DType::F32);
  auto ref = composed_split(Variable(x), 2, 1);
  {
    NoGradGuard ng;
    auto o = split_heads(Variable(x, true), 2, 1);
    for (int i = 0; i < 3; ++i) {
      EXPECT_FALSE(o[i].requires_grad());
      expect_same(o[i].data(), ref[i].data());
    }
  }
  auto o = split_heads(Variable(x, false), 2, 1);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(o[i].requires_grad());
}

TEST(SplitHeads, RetainedGraphTwiceAndPartialSecondPass) {
  HeadsGuard guard(true);
  Rng r(10);
  Tensor x = uniform_tensor(r, {2, 4, 12}, DType::F64);
  Variable xv(x, true);
  auto o = split_heads(xv, 2, 0);
  Variable lq = sum(square(o[0])), lall = add(lq, sum(mul(o[1], o[2])));
  lall.backward(Tensor(), true);
  Tensor g1 = xv.grad().clone();
  xv.zero_grad();
  lall.backward(Tensor(), true);  // the same gradient again: the state was released
  expect_same(xv.grad(), g1);
  xv.zero_grad();
  lq.backward();  // only q this time: k and v columns get zeros, not the previous pass's
  Variable xr(x, true);
  sum(square(composed_split(xr, 2, 0)[0])).backward();
  expect_same(xv.grad(), xr.grad());
}

TEST(SplitHeads, ArgumentErrors) {
  Variable x(Tensor::zeros({2, 3, 12}), true);
  expect_error([&] { split_heads(Variable(Tensor::zeros({3, 12})), 2); }, {"split_heads", "f32[3, 12]"});
  expect_error([&] { split_heads(x, 5); }, {"split_heads", "f32[2, 3, 12]", "H = 5"});
  expect_error([&] { split_heads(x, 0); }, {"split_heads", "H = 0"});
  expect_error([&] { split_heads(x, 2, 3); }, {"split_heads", "q_begin 3"});
  expect_error([&] { split_heads(x, 2, -1); }, {"split_heads", "q_begin -1"});
  expect_error([&] { split_heads(Variable(Tensor::zeros({2, 3, 12}, DType::I32)), 2); }, {"split_heads", "i32"});
  expect_error([&] { merge_heads(x); }, {"merge_heads", "f32[2, 3, 12]"});
}

// ------------------------------------------------------------------------------ merge ----

TEST(MergeHeads, EqualsCompositionAndGradcheck) {
  HeadsGuard guard(true);
  for (auto s : std::vector<Shape>{{2, 3, 5, 4}, {1, 1, 1, 1}, {3, 2, 7, 5}, {4, 8, 33, 32}}) {
    SCOPED_TRACE(shape_str(s));
    for (DType dt : {DType::F32, DType::F64}) {
      Rng r(s[2]);
      Tensor o = uniform_tensor(r, s, dt), seed = uniform_tensor(r, {s[0], s[2], s[1] * s[3]}, dt);
      Variable a(o.clone(), true), b(o.clone(), true);
      Variable ma = merge_heads(a), mb = reshape(permute(b, {0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
      EXPECT_EQ(ma.op_name(), "merge_heads");
      expect_same(ma.data(), mb.data());
      ma.backward(seed);
      mb.backward(seed);
      expect_same(a.grad(), b.grad());
    }
  }
  Rng r(3);
  auto res = gradcheck([](const std::vector<Variable>& in) { return square(merge_heads(in[0])); },
                       {uniform_tensor(r, {2, 3, 4, 5}, DType::F64)}, {"o"});
  EXPECT_TRUE(res.pass) << res.summary();
}

// -------------------------------------------------------------------------- model level ----

using json = nlohmann::json;

struct LossGrads {
  double loss;
  bool split_in_graph, merge_in_graph;
  std::vector<std::pair<std::string, Tensor>> grads;
};

// Loss and parameter gradients with the fused heads on or off. With memory (xl), a first
// segment `pre` fills it (no grad) and the loss is that of the second segment.
LossGrads loss_and_grads(nn::GPT& m, const Tensor& pre, const Tensor& in, const Tensor& tg, bool fused) {
  HeadsGuard guard(fused);
  m.zero_grad();
  m.reset_memory();
  if (pre.defined()) {
    NoGradGuard ng;
    m.forward(pre);
  }
  Variable loss = m.loss(in, tg, pre.defined());
  LossGrads r{loss.data().item(), graph_has_op(loss, "split_heads"), graph_has_op(loss, "merge_heads"), {}};
  loss.backward();
  for (auto& [name, p] : m.named_parameters()) r.grads.emplace_back(name, p.grad().defined() ? p.grad().clone() : Tensor());
  return r;
}

void check_model(const json& posenc, uint64_t seed, bool with_memory) {
  SCOPED_TRACE(posenc.dump());
  nn::GPT m(tiny_cfg(posenc));
  m.init_weights(seed);
  Rng r(seed + 1);
  for (auto& [name, p] : m.named_parameters())  // larger weights: attention far from uniform
    if (name.find("norm") == std::string::npos) r.fill_normal(p.data(), 0.0, 0.3);
  const int64_t B = 3, T = 11;
  auto toks = [&] {
    Tensor t = Tensor::empty({B, T}, DType::I64);
    for (int64_t i = 0; i < B * T; ++i) t.set(i, (double)r.below(17));
    return t;
  };
  Tensor pre = with_memory ? toks() : Tensor(), in = toks(), tg = toks();
  LossGrads u = loss_and_grads(m, pre, in, tg, false), f = loss_and_grads(m, pre, in, tg, true);
  EXPECT_TRUE(f.split_in_graph && f.merge_in_graph) << "the fused heads were not used";
  EXPECT_FALSE(u.split_in_graph || u.merge_in_graph);
  EXPECT_EQ(f.loss, u.loss);
  ASSERT_EQ(f.grads.size(), u.grads.size());
  for (size_t i = 0; i < u.grads.size(); ++i) {
    SCOPED_TRACE(u.grads[i].first);
    expect_same(f.grads[i].second, u.grads[i].second);
  }
}

TEST(HeadsModel, LossAndGradsUnchangedPerEncoding) {
  uint64_t seed = 30;
  for (const json& pe : {json{{"type", "none"}}, json{{"type", "rope"}}, json{{"type", "alibi"}},
                         json{{"type", "learned"}}, json{{"type", "shaw"}}, json{{"type", "xl"}},
                         json{{"type", "deberta"}}, json{{"type", "tupe"}},
                         json{{"type", "rope"}, {"scaling", {{"type", "rerope"}}}}})
    check_model(pe, seed++, false);
}

TEST(HeadsModel, TransformerXLWithMemory) {
  check_model({{"type", "xl"}, {"mem_len", 7}}, 40, true);
  check_model({{"type", "xl"}, {"mem_len", 30}}, 41, true);  // memory longer than a segment
}

}  // namespace
