// tests/test_xl_memory.cpp — Transformer-XL segment memory: feeding two consecutive segments
// with memory gives the same last-segment logits as one forward over the concatenation, and
// no gradient reaches the previous segment (memory is detached).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "core/rng.h"
#include "nn/gpt.h"
#include "tests/test_util.h"
#include "train/data.h"

using namespace ctx;

static ModelConfig xl_config(int64_t mem_len) {
  ModelConfig c =
      testing_util::two_head_cfg(13, 16, 2, -1, 8, {{"type", "xl"}, {"mem_len", mem_len}});
  return c;
}

static Tensor tokens(Rng& r, int64_t B, int64_t T) {
  Tensor t = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) t.data<int64_t>()[i] = (int64_t)r.below(13);
  return t;
}

TEST(XLMemory, SegmentsWithMemoryEqualTheConcatenatedSequence) {
  const int64_t B = 2, T1 = 6, T2 = 5;
  nn::GPT m(xl_config(T1), DType::F64);
  m.init_weights(3);
  Rng r(11);
  for (auto& [name, p] : m.named_parameters()) r.fill_normal(p.data(), 0.0, 0.3);  // position terms matter
  Tensor a = tokens(r, B, T1), b = tokens(r, B, T2);
  Tensor ab = Tensor::empty({B, T1 + T2}, DType::I64);
  for (int64_t i = 0; i < B; ++i)
    for (int64_t t = 0; t < T1 + T2; ++t)
      ab.data<int64_t>()[i * (T1 + T2) + t] = t < T1 ? a.data<int64_t>()[i * T1 + t] : b.data<int64_t>()[i * T2 + t - T1];
  NoGradGuard ng;
  m.eval();
  Tensor full = m.forward(ab).data();        // [B, T1+T2, V]
  m.forward(a);                              // segment 1 fills the memory
  Tensor seg = m.forward(b, 0, true).data(); // segment 2 with memory: [B, T2, V]
  const int64_t V = 13;
  double worst = 0;
  for (int64_t i = 0; i < B; ++i)
    for (int64_t t = 0; t < T2; ++t)
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, std::fabs(seg.at((i * T2 + t) * V + v) - full.at((i * (T1 + T2) + T1 + t) * V + v)));
  EXPECT_LT(worst, 1e-12);
  // Without memory the second segment differs (the memory really is used).
  Tensor alone = m.forward(b).data();
  double diff = 0;
  for (int64_t k = 0; k < alone.numel(); ++k) diff = std::max(diff, std::fabs(alone.at(k) - seg.at(k)));
  EXPECT_GT(diff, 1e-6);
}

// Gradients of `loss` w.r.t. every parameter (copies), after zeroing them.
static std::vector<Tensor> grads_of(nn::GPT& m, const std::function<Variable()>& loss) {
  for (auto& [name, p] : m.named_parameters()) p.zero_grad();
  loss().backward();
  std::vector<Tensor> g;
  for (auto& [name, p] : m.named_parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : Tensor());
  return g;
}

TEST(XLMemory, MemoryIsDetachedAndBounded) {
  nn::GPT m(xl_config(3), DType::F64);
  m.init_weights(1);
  Rng r(2);
  for (auto& [name, p] : m.named_parameters()) r.fill_normal(p.data(), 0.0, 0.3);  // position terms matter
  const Tensor s1 = tokens(r, 1, 6), x2 = tokens(r, 1, 4), y2 = tokens(r, 1, 4);
  // Segment 1 with gradients on: its graph runs through every parameter.
  Variable l1 = m.loss(s1, tokens(r, 1, 6));
  ASSERT_TRUE(m.blocks[0]->attn->memory().defined());
  EXPECT_EQ(m.blocks[0]->attn->memory().size(1), 3);  // only the last mem_len inputs are kept
  const std::vector<Tensor> mem = m.memory_state();
  std::vector<Tensor> mem_copy;
  for (const Tensor& t : mem) mem_copy.push_back(t.defined() ? t.clone() : Tensor());

  // Segment 2 with that memory: the gradients are those of the same loss with the memory given as
  // constants to a model with no earlier graph. Had the memory carried segment 1's graph,
  // backward would add d(loss2)/d(memory) d(memory)/d(params) and they would differ.
  const std::vector<Tensor> g_after_seg1 = grads_of(m, [&] { return m.loss(x2, y2, true); });
  m.set_memory_state(mem_copy);
  const std::vector<Tensor> g_constant = grads_of(m, [&] { return m.loss(x2, y2, true); });
  auto params = m.named_parameters();
  ASSERT_EQ(g_after_seg1.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_TRUE(g_after_seg1[i].defined() && g_constant[i].defined()) << params[i].first;
    for (int64_t k = 0; k < g_constant[i].numel(); ++k)
      ASSERT_EQ(g_after_seg1[i].at(k), g_constant[i].at(k)) << params[i].first << " element " << k;
  }
  // Backward left the memory's values alone.
  for (size_t l = 0; l < mem.size(); ++l)
    for (int64_t k = 0; k < mem[l].numel(); ++k) ASSERT_EQ(mem[l].at(k), mem_copy[l].at(k));
  // The memory matters to segment 2 (so the comparison above is not vacuous), and segment 1's
  // own graph is still intact: its backward runs after segment 2's.
  m.set_memory_state(mem_copy);
  const double with_mem = m.loss(x2, y2, true).data().item();
  EXPECT_GT(std::fabs(with_mem - m.loss(x2, y2).data().item()), 1e-6);
  l1.backward();
}

// Finite differences over the current segment with the memory held fixed: the analytic gradient
// of every parameter (a spread of elements each) through the memory-augmented attention.
TEST(XLMemory, GradcheckWithMemoryOverTheCurrentSegment) {
  nn::GPT m(xl_config(4), DType::F64);
  m.init_weights(7);
  Rng r(8);
  for (auto& [name, p] : m.named_parameters()) r.fill_normal(p.data(), 0.0, 0.3);
  const Tensor s1 = tokens(r, 2, 5), x2 = tokens(r, 2, 3), y2 = tokens(r, 2, 3);
  {
    NoGradGuard ng;
    m.forward(s1);  // fills the memory: [2, 4, D] per layer
  }
  const std::vector<Tensor> mem = m.memory_state();
  ASSERT_EQ(mem[0].size(1), 4);
  auto loss_at = [&] {
    m.set_memory_state(mem);  // every evaluation sees the same memory
    return m.loss(x2, y2, true);
  };
  const std::vector<Tensor> g = grads_of(m, loss_at);
  const double h = 1e-6;
  int checked = 0;
  auto params = m.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor& w = params[i].second.data();
    ASSERT_TRUE(g[i].defined()) << params[i].first;
    const int64_t n = w.numel(), stride = std::max<int64_t>(1, n / 5);
    for (int64_t k = 0; k < n; k += stride) {
      NoGradGuard ng;
      const double w0 = w.at(k);
      w.set(k, w0 + h);
      const double lp = loss_at().data().item();
      w.set(k, w0 - h);
      const double lm = loss_at().data().item();
      w.set(k, w0);
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(g[i].at(k), fd, 1e-6 + 1e-5 * std::fabs(fd)) << params[i].first << " element " << k;
      ++checked;
    }
  }
  EXPECT_GT(checked, 50);
}

// The trainer's segment order (train/data.h SegmentSampler): row b of batch n+1 continues row b
// of batch n; after the last segment the streams start over (and the caller clears memory).
TEST(XLMemory, SegmentSamplerRowsContinue) {
  std::vector<int32_t> ids(1000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (int32_t)i;  // the id is the offset
  const TokenStream tok(ids);
  const int64_t B = 3, T = 10;
  SegmentSampler s(&tok, B, T);
  const int64_t len = 1000 / B;
  EXPECT_EQ(s.segments(), (len - 1) / T);
  for (int64_t n = 0; n < 2 * s.segments() + 2; ++n) {
    bool over = false;
    auto [x, y] = s.get(n, &over);
    const int64_t k = n % s.segments();
    EXPECT_EQ(over, k == 0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        EXPECT_EQ(x.data<int64_t>()[b * T + t], b * len + k * T + t);
        EXPECT_EQ(y.data<int64_t>()[b * T + t], b * len + k * T + t + 1);  // targets are the next token
      }
  }
  const TokenStream few(std::vector<int32_t>(20));
  EXPECT_THROW(SegmentSampler(&few, 4, 10), Error);
}

// Training on consecutive segments: memory is carried from one batch to the next (detached),
// and a fresh start clears it.
TEST(XLMemory, LossWithMemoryDiffersAndBackwardWorks) {
  nn::GPT m(xl_config(8));
  m.init_weights(5);
  Rng r(3);
  Tensor a = tokens(r, 2, 8), ya = tokens(r, 2, 8), b = tokens(r, 2, 8), yb = tokens(r, 2, 8);
  m.train();
  Variable l1 = m.loss(a, ya, true);
  l1.backward();
  ASSERT_TRUE(m.blocks[0]->attn->memory().defined());
  auto st = m.memory_state();  // the memory of segment a
  Variable l2 = m.loss(b, yb, true);  // sees segment a through the memory
  l2.backward();
  for (auto& [name, p] : m.named_parameters()) EXPECT_TRUE(p.grad().defined()) << name;
  m.reset_memory();
  Variable l3 = m.loss(b, yb, true);
  EXPECT_GT(std::fabs(l2.data().item() - l3.data().item()), 1e-7);
  // memory_state / set_memory_state round trip: restoring segment a's memory reproduces l2
  m.set_memory_state(st);
  EXPECT_NEAR(m.loss(b, yb, true).data().item(), l2.data().item(), 1e-6);
}
