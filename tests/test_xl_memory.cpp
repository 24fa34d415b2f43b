// tests/test_xl_memory.cpp — Transformer-XL segment memory: feeding two consecutive segments
// with memory gives the same last-segment logits as one forward over the concatenation, and
// no gradient reaches the previous segment (memory is detached).
#include <gtest/gtest.h>

#include <cmath>

#include "core/rng.h"
#include "nn/gpt.h"
#include "train/data.h"

using namespace ctx;

static ModelConfig xl_config(int64_t mem_len) {
  ModelConfig c;
  c.vocab_size = 13;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 2;
  c.context = 8;
  c.posenc = {{"type", "xl"}, {"mem_len", mem_len}};
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

TEST(XLMemory, MemoryIsDetachedAndBounded) {
  nn::GPT m(xl_config(3), DType::F64);
  m.init_weights(1);
  Rng r(2);
  m.forward(tokens(r, 1, 6));
  EXPECT_EQ(m.blocks[0]->attn->memory().size(1), 3);  // only the last mem_len inputs are kept
  Variable loss = m.loss(tokens(r, 1, 4), tokens(r, 1, 4));  // loss() starts fresh (no memory)
  EXPECT_FALSE(m.blocks[0]->attn->memory().storage() == nullptr);
  loss.backward();  // a detached memory: backward works and touches only this segment's graph
  SUCCEED();
}

// The trainer's segment order (train/data.h SegmentSampler): row b of batch n+1 continues row b
// of batch n; after the last segment the streams start over (and the caller clears memory).
TEST(XLMemory, SegmentSamplerRowsContinue) {
  std::vector<int32_t> tok(1000);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = (int32_t)i;  // the id is the offset
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
  std::vector<int32_t> few(20);
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
