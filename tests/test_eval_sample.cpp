// tests/test_eval_sample.cpp — windowed evaluation (train/eval.h) and sampling (train/sample.h)
// on tiny random models: evaluate() equals a hand computation with GPT::loss on the same
// windows; sampling is deterministic in the seed, greedy is the argmax, top-k = 1 is greedy;
// bad inputs (text too short, learned positions beyond L, out-of-range options) are one-line
// errors naming what is wrong.
#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "autograd/variable.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "train/eval.h"
#include "train/sample.h"

using namespace ctx;

namespace {

constexpr int64_t kContext = 16;

ModelConfig tiny_config(bool hierarchical = false) {
  ModelConfig c = testing_util::two_head_cfg(256, 16, 1, 32, kContext, {{"type", "learned"}});
  if (hierarchical) c.posenc["hierarchical"] = true;
  return c;
}

// A tiny model with larger-than-default weights so that its predictions are far from uniform
// (greedy and sampled text then depend on the context).
std::unique_ptr<nn::GPT> tiny_model(uint64_t seed = 1, bool hierarchical = false) {
  auto m = std::make_unique<nn::GPT>(tiny_config(hierarchical));
  m->init_weights(seed);
  Rng rng(seed + 100);
  for (auto& [name, p] : m->named_parameters())
    if (name.find("norm") == std::string::npos) rng.fill_normal(p.data(), 0.0, 0.5);
  return m;
}

std::vector<int32_t> random_tokens(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)rng.below(256);
  return t;
}

using ctx::testing_util::expect_error;

// The mean next-token cross-entropy over windows w = 0..nw-1 of length+1 tokens, one window at a
// time, from the logits: log(sum_v exp(z_v)) - z_target in double per position (not model.loss,
// which is what evaluate() itself calls).
double hand_loss(nn::GPT& model, const std::vector<int32_t>& tok, int64_t length, int64_t nw) {
  NoGradGuard g;
  model.eval();
  double s = 0;
  for (int64_t w = 0; w < nw; ++w) {
    Tensor in = Tensor::empty({1, length}, DType::I64);
    for (int64_t t = 0; t < length; ++t) in.set(t, tok[(size_t)(w * (length + 1) + t)]);
    const Tensor z = model.forward(in).data();  // [1, length, V]
    const int64_t V = z.shape().back();
    for (int64_t t = 0; t < length; ++t) {
      double mx = -INFINITY, se = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, z.at(t * V + v));
      for (int64_t v = 0; v < V; ++v) se += std::exp(z.at(t * V + v) - mx);
      const int32_t target = tok[(size_t)(w * (length + 1) + t + 1)];
      s += mx + std::log(se) - z.at(t * V + target);
    }
  }
  return s / (double)(nw * length);
}

// Greedy continuation computed step by step from the logits.
std::vector<int32_t> hand_greedy(nn::GPT& model, std::vector<int32_t> seq, int64_t n) {
  NoGradGuard g;
  model.eval();
  std::vector<int32_t> out;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t T = std::min<int64_t>((int64_t)seq.size(), kContext);
    Tensor in = Tensor::empty({1, T}, DType::I64);
    for (int64_t t = 0; t < T; ++t) in.set(t, seq[seq.size() - (size_t)T + (size_t)t]);
    Tensor logits = model.forward(in).data();
    int32_t best = 0;
    for (int32_t v = 1; v < 256; ++v)
      if (logits.at((T - 1) * 256 + v) > logits.at((T - 1) * 256 + best)) best = v;
    seq.push_back(best);
    out.push_back(best);
  }
  return out;
}

}  // namespace

TEST(EvalTest, MatchesHandComputedLoss) {
  auto m = tiny_model();
  const int64_t length = 8;
  auto tok = random_tokens(3 * (length + 1) + 5, 7);  // 3 windows and a partial one (unused)
  EvalResult r = evaluate(*m, tok, length, /*batch=*/2, /*max_windows=*/0, "tok");
  EXPECT_EQ(r.length, length);
  EXPECT_EQ(r.windows, 3);
  EXPECT_EQ(r.tokens, 3 * length);
  const double ref = hand_loss(*m, tok, length, 3);
  EXPECT_NEAR(r.loss, ref, 1e-5 * std::abs(ref));
  EXPECT_DOUBLE_EQ(r.ppl, std::exp(r.loss));
  EXPECT_DOUBLE_EQ(r.bpb, r.loss / std::log(2.0));

  // max_windows takes the first windows only.
  EvalResult r2 = evaluate(*m, tok, length, 4, 2, "tok");
  EXPECT_EQ(r2.windows, 2);
  EXPECT_EQ(r2.tokens, 2 * length);
  const double ref2 = hand_loss(*m, tok, length, 2);
  EXPECT_NEAR(r2.loss, ref2, 1e-5 * std::abs(ref2));

  // A full-context window.
  EvalResult r3 = evaluate(*m, tok, kContext, 1, 0, "tok");
  EXPECT_EQ(r3.windows, 1);
  const double ref3 = hand_loss(*m, tok, kContext, 1);
  EXPECT_NEAR(r3.loss, ref3, 1e-5 * std::abs(ref3));

  // A closed form: with every parameter zero the logits are all 0, the prediction is uniform
  // over the 256 byte values and the loss is exactly log 256 (8 bits per byte).
  for (auto& [name, p] : m->named_parameters()) p.data().copy_from(Tensor::zeros(p.shape()));
  EvalResult z = evaluate(*m, tok, length, 2, 0, "tok");
  EXPECT_NEAR(z.loss, std::log(256.0), 1e-6);
  EXPECT_NEAR(z.bpb, 8.0, 1e-6);
}

TEST(EvalTest, DeterministicAndBatchIndependent) {
  auto m = tiny_model();
  auto tok = random_tokens(500, 3);
  EvalResult a = evaluate(*m, tok, 12, 4, 0, "tok");
  EvalResult b = evaluate(*m, tok, 12, 4, 0, "tok");
  EXPECT_EQ(a.loss, b.loss);  // bit-identical
  EvalResult c = evaluate(*m, tok, 12, 1, 0, "tok");
  EXPECT_NEAR(a.loss, c.loss, 1e-5 * a.loss);
  EXPECT_EQ(a.windows, 500 / 13);
  // The model's train/eval state is restored.
  EXPECT_TRUE(m->is_training());
}

TEST(EvalTest, TextTooShortIsAnError) {
  auto m = tiny_model();
  auto tok = random_tokens(8, 1);  // one window at length 8 needs 9 tokens
  expect_error([&] { evaluate(*m, tok, 8, 1, 0, "short.txt"); }, {"short.txt", "8 tokens", "length 8", "9"});
  expect_error([&] { evaluate(*m, {}, 4, 1, 0, "empty.txt"); }, {"empty.txt", "0 tokens", "length 4"});
  expect_error([&] { evaluate(*m, tok, 0, 1, 0, "x"); }, {"length must be >= 1"});
  expect_error([&] { evaluate(*m, tok, 4, 0, 0, "x"); }, {"batch must be >= 1"});
}

TEST(EvalTest, LearnedBeyondContextNeedsHierarchical) {
  auto m = tiny_model();
  auto tok = random_tokens(200, 2);
  expect_error([&] { evaluate(*m, tok, 2 * kContext, 1, 0, "tok"); },
               {"length 32", "learned", "hierarchical"});
  // The same weights with the hierarchical extension evaluate beyond L, and agree with the plain
  // model up to L (the decomposition reproduces wpe[t] for t < L).
  auto h = tiny_model(1, /*hierarchical=*/true);
  EvalResult r = evaluate(*h, tok, 2 * kContext, 2, 0, "tok");
  EXPECT_EQ(r.windows, 200 / 33);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(evaluate(*h, tok, kContext, 2, 0, "tok").loss, evaluate(*m, tok, kContext, 2, 0, "tok").loss, 1e-5);
}

TEST(SampleTest, SeedDeterminesOutput) {
  auto m = tiny_model();
  auto prompt = random_tokens(5, 9);
  SampleOptions o;
  o.max_tokens = 24;
  o.temperature = 1.0;
  o.top_k = 0;
  o.seed = 42;
  auto a = sample(*m, prompt, o), b = sample(*m, prompt, o);
  ASSERT_EQ(a.size(), 24u);
  EXPECT_EQ(a, b);
  o.seed = 43;
  EXPECT_NE(sample(*m, prompt, o), a);
  // Streaming callback sees the same tokens.
  o.seed = 42;
  std::vector<int32_t> streamed;
  sample(*m, prompt, o, [&](int32_t t) { streamed.push_back(t); });
  EXPECT_EQ(streamed, a);
  o.max_tokens = 0;
  EXPECT_TRUE(sample(*m, prompt, o).empty());
}

TEST(SampleTest, GreedyIsArgmaxAndTopKOneIsGreedy) {
  auto m = tiny_model();
  auto prompt = random_tokens(6, 11);
  SampleOptions o;
  o.max_tokens = 20;  // runs past the context of 16: the window slides
  o.keep = kContext;  // learned positions: the last 16 tokens every step (the hand computation)
  o.temperature = 0;
  auto greedy = sample(*m, prompt, o);
  EXPECT_EQ(greedy, hand_greedy(*m, prompt, 20));
  o.temperature = 0.8;
  o.top_k = 1;
  for (uint64_t seed : {0, 1, 2}) {
    o.seed = seed;
    EXPECT_EQ(sample(*m, prompt, o), greedy) << "seed " << seed;
  }
}

TEST(SampleTest, SampleNextTopKAndTemperature) {
  std::vector<float> l = {0.f, 3.f, 1.f, 3.f, 2.f, -1.f};
  Rng rng(5);
  EXPECT_EQ(sample_next(l.data(), 6, 0.0, 0, rng), 1);  // argmax, lowest index on ties
  EXPECT_EQ(sample_next(l.data(), 6, 1.0, 1, rng), 1);  // top-1 = greedy
  // top-k = 3 keeps {1, 3, 4}; all of them are drawn, nothing else.
  int count[6] = {0};
  for (int i = 0; i < 3000; ++i) count[sample_next(l.data(), 6, 1.0, 3, rng)]++;
  EXPECT_EQ(count[0] + count[2] + count[5], 0);
  EXPECT_GT(count[1], 0);
  EXPECT_GT(count[3], 0);
  EXPECT_GT(count[4], 0);
  // Softmax at temperature 1: logits {0, ln 3} -> P(1) = 0.75.
  std::vector<float> two = {0.f, (float)std::log(3.0)};
  int ones = 0;
  for (int i = 0; i < 4000; ++i) ones += sample_next(two.data(), 2, 1.0, 0, rng);
  EXPECT_NEAR(ones / 4000.0, 0.75, 0.03);
  // Temperature T divides the logits: P(1) = 3^(1/T) / (1 + 3^(1/T)). T = 0.5 sharpens it to 0.9,
  // T = 2 flattens it to 0.634 (dividing by T^2 instead would give 0.988 and 0.568; by T^0.5, 0.823
  // and 0.681). 4000 draws: a standard deviation of at most 0.008, so 0.025 is 3 of them and every
  // wrong power is more than 0.045 away. A low temperature makes it near greedy: 3^10 / (1 + 3^10).
  for (const double T : {0.5, 2.0}) {
    const double want = std::pow(3.0, 1 / T) / (1 + std::pow(3.0, 1 / T));
    ones = 0;
    for (int i = 0; i < 4000; ++i) ones += sample_next(two.data(), 2, T, 0, rng);
    EXPECT_NEAR(ones / 4000.0, want, 0.025) << "temperature " << T;
  }
  ones = 0;
  for (int i = 0; i < 1000; ++i) ones += sample_next(two.data(), 2, 0.1, 0, rng);
  EXPECT_GT(ones, 990);
}

TEST(SampleTest, BadOptionsAreErrors) {
  auto m = tiny_model();
  std::vector<int32_t> p = {1, 2, 3};
  SampleOptions o;
  o.temperature = -0.5;
  expect_error([&] { sample(*m, p, o); }, {"--temperature", ">= 0", "-0.5"});
  o = SampleOptions();
  o.top_k = -1;
  expect_error([&] { sample(*m, p, o); }, {"--top-k", ">= 0", "-1"});
  o = SampleOptions();
  o.max_tokens = -3;
  expect_error([&] { sample(*m, p, o); }, {"--max-tokens", ">= 0", "-3"});
  o = SampleOptions();
  expect_error([&] { sample(*m, {}, o); }, {"prompt", "at least one token"});
  expect_error([&] { sample(*m, {1, 300}, o); }, {"prompt token 300", "position 1", "vocab_size 256"});
}

// --segmented: every window is cut into chunks of `segment` tokens evaluated on their own; the
// result equals the token-weighted mean of GPT::loss over exactly those chunks.
TEST(EvalTest, SegmentedEqualsIndependentChunks) {
  auto m = tiny_model(4);
  auto tok = random_tokens(400, 5);
  const int64_t length = 2 * kContext + 5, seg = kContext;  // two full chunks and one of 5
  EvalMode mode;
  mode.segment = seg;
  EvalResult r = evaluate(*m, tok, length, 3, 0, "tok", mode);
  ASSERT_EQ(r.windows, 400 / (length + 1));
  NoGradGuard g;
  double total = 0;
  for (int64_t w = 0; w < r.windows; ++w)
    for (int64_t c0 = 0; c0 < length; c0 += seg) {
      const int64_t len = std::min(seg, length - c0);
      Tensor in = Tensor::empty({1, len}, DType::I64), tg = Tensor::empty({1, len}, DType::I64);
      for (int64_t t = 0; t < len; ++t) {
        in.set(t, tok[(size_t)(w * (length + 1) + c0 + t)]);
        tg.set(t, tok[(size_t)(w * (length + 1) + c0 + t + 1)]);
      }
      total += m->loss(in, tg).data().item() * (double)len;
    }
  EXPECT_NEAR(r.loss, total / (double)r.tokens, 1e-5);
  // A learned model needs no --hierarchical when segmented: only chunks of L positions are encoded.
  EXPECT_NO_THROW(check_eval_length(*m, 400, 4 * kContext, "tok", mode));
  // Segment length >= length is plain evaluation.
  mode.segment = 2 * kContext;
  EXPECT_NEAR(evaluate(*m, tok, kContext, 2, 0, "tok", mode).loss, hand_loss(*m, tok, kContext, 400 / (kContext + 1)), 1e-5);
}

// --window: sliding-window attention. A window covering the whole sequence is full attention;
// a shorter one changes the result; a window of 1 makes every position see only itself, so the
// loss is the same whatever the earlier tokens are.
TEST(EvalTest, SlidingWindow) {
  auto m = tiny_model(6);
  auto tok = random_tokens(300, 7);
  const int64_t length = kContext;
  EvalMode full, wide, narrow;
  wide.window = length;
  narrow.window = 3;
  const double l_full = evaluate(*m, tok, length, 4, 0, "tok", full).loss;
  EXPECT_NEAR(evaluate(*m, tok, length, 4, 0, "tok", wide).loss, l_full, 1e-6);
  const double l_narrow = evaluate(*m, tok, length, 4, 0, "tok", narrow).loss;
  EXPECT_TRUE(std::isfinite(l_narrow));
  EXPECT_GT(std::fabs(l_narrow - l_full), 1e-4);
  // The window evaluated is the one asked for: the hand computation with the model's window set
  // to exactly 3 (a window one wider or narrower differs from it by far more than the 1e-5 the
  // sums' order allows, checked below).
  const int64_t nw = 300 / (length + 1);
  auto windowed_hand_loss = [&](int64_t w) {
    m->set_attention_window(w);
    const double l = hand_loss(*m, tok, length, nw);
    m->set_attention_window(0);
    return l;
  };
  EXPECT_NEAR(l_narrow, windowed_hand_loss(3), 1e-5);
  EXPECT_GT(std::fabs(windowed_hand_loss(4) - windowed_hand_loss(3)), 1e-3);
  EXPECT_GT(std::fabs(windowed_hand_loss(2) - windowed_hand_loss(3)), 1e-3);
  // The model's window is reset afterwards: a plain evaluation is unchanged.
  EXPECT_NEAR(evaluate(*m, tok, length, 4, 0, "tok").loss, l_full, 1e-6);
  // window 1: logits at position t depend on token t and t's position only.
  {
    NoGradGuard g;
    m->eval();
    m->set_attention_window(1);
    Tensor a = Tensor::empty({1, 6}, DType::I64), b = Tensor::empty({1, 6}, DType::I64);
    for (int64_t t = 0; t < 6; ++t) {
      a.set(t, t + 10);
      b.set(t, t < 5 ? 200 - t : 15);  // same last token, different history
    }
    Tensor la = m->forward(a).data(), lb = m->forward(b).data();
    for (int64_t v = 0; v < 256; ++v) EXPECT_NEAR(la.at(5 * 256 + v), lb.at(5 * 256 + v), 1e-5);
    m->set_attention_window(0);
  }
  EvalMode both;
  both.window = 4;
  both.segment = 8;
  expect_error([&] { evaluate(*m, tok, length, 4, 0, "tok", both); }, {"window", "segments"});
}

// Per-position loss: the buckets cover [0, length) in order (the last one shorter), each counts
// windows * its positions, each is the hand-computed mean of the losses at its positions, and
// their count-weighted mean is the overall loss, which is the loss without buckets. Segmented,
// the positions are those of the window (chunk c's first token is position c * segment).
TEST(EvalTest, PerPositionBuckets) {
  auto m = tiny_model(8);
  auto tok = random_tokens(600, 9);
  const int64_t length = kContext, bucket = 5;  // buckets [0,5) [5,10) [10,15) [15,16)
  const EvalResult plain = evaluate(*m, tok, length, 3, 0, "tok");
  const EvalResult r = evaluate(*m, tok, length, 3, 0, "tok", {}, nullptr, bucket);
  EXPECT_TRUE(plain.positions.empty());
  EXPECT_EQ(r.loss, plain.loss);
  ASSERT_EQ(r.positions.size(), 4u);
  // per position, by hand: the mean over the windows of log-sum-exp - logit[target]
  std::vector<double> at((size_t)length, 0.0);
  {
    NoGradGuard g;
    m->eval();
    for (int64_t w = 0; w < r.windows; ++w) {
      Tensor in = Tensor::empty({1, length}, DType::I64);
      for (int64_t t = 0; t < length; ++t) in.set(t, tok[(size_t)(w * (length + 1) + t)]);
      const Tensor z = m->forward(in).data();
      for (int64_t t = 0; t < length; ++t) {
        double mx = -INFINITY, se = 0;
        for (int64_t v = 0; v < 256; ++v) mx = std::max(mx, z.at(t * 256 + v));
        for (int64_t v = 0; v < 256; ++v) se += std::exp(z.at(t * 256 + v) - mx);
        at[(size_t)t] += mx + std::log(se) - z.at(t * 256 + tok[(size_t)(w * (length + 1) + t + 1)]);
      }
    }
    m->train();
  }
  double weighted = 0;
  int64_t counted = 0;
  for (size_t k = 0; k < r.positions.size(); ++k) {
    const PositionBucket& b = r.positions[k];
    EXPECT_EQ(b.begin, (int64_t)k * bucket);
    EXPECT_EQ(b.end, std::min(length, b.begin + bucket));
    EXPECT_EQ(b.count, r.windows * (b.end - b.begin));
    double hand = 0;
    for (int64_t t = b.begin; t < b.end; ++t) hand += at[(size_t)t];
    EXPECT_NEAR(b.loss, hand / (double)b.count, 1e-5);
    weighted += b.loss * (double)b.count;
    counted += b.count;
  }
  EXPECT_EQ(counted, r.tokens);
  EXPECT_NEAR(weighted / (double)counted, r.loss, 1e-12);
  // segmented into chunks of 8: positions 0..7 and 8..15 of the window; chunk starts restart the
  // context, so bucket [8, 10) (a chunk's first tokens) differs from the unsegmented one
  EvalMode seg;
  seg.segment = 8;
  const EvalResult s = evaluate(*m, tok, length, 3, 0, "tok", seg, nullptr, 2);
  ASSERT_EQ(s.positions.size(), 8u);
  EXPECT_NEAR(s.positions[0].loss, evaluate(*m, tok, length, 3, 0, "tok", {}, nullptr, 2).positions[0].loss, 1e-6);
  EXPECT_GT(std::fabs(s.positions[4].loss - evaluate(*m, tok, length, 3, 0, "tok", {}, nullptr, 2).positions[4].loss),
            1e-4);
  double ws = 0;
  for (const PositionBucket& b : s.positions) ws += b.loss * (double)b.count;
  EXPECT_NEAR(ws / (double)s.tokens, s.loss, 1e-12);
  expect_error([&] { evaluate(*m, tok, length, 3, 0, "tok", {}, nullptr, -1); }, {"position_bucket", ">= 0"});
}
