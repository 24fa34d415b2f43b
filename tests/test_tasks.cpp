// tests/test_tasks.cpp — the retrieval tasks (train/tasks.h): the needle really sits at the depth,
// the answer is the key / value / span the needle holds, the filler is the text; their scoring
// (train/task_eval.h: the Wilson interval, exact match from the logits, a model that cannot know
// the key scores 0); the training mix (train/task_mix.h: parsing, rows and masks); and the masked
// loss (nn::GPT::masked_loss: its value, and no gradient from the ignored positions).
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "autograd/variable.h"
#include "nn/gpt.h"
#include "train/task_eval.h"
#include "train/task_mix.h"
#include "train/tasks.h"

using namespace ctx;
using ctx::testing_util::expect_error;

namespace {

// A filler text whose bytes never hold a digit, '<', '{' or '=': what the needle brings is unique.
std::vector<int32_t> filler_text(size_t n) {
  const std::string words = "it is a truth universally acknowledged that a single man in possession of a good fortune ";
  std::string s;
  while (s.size() < n) s += words;
  return encode_bytes(s.substr(0, n));
}

std::string text_of(const TaskSequence& s, int64_t begin, int64_t end) {
  return decode_bytes(std::vector<int32_t>(s.tokens.begin() + begin, s.tokens.begin() + end));
}

bool is_subsequence(const std::vector<int32_t>& hay, int64_t b, int64_t e, const std::vector<int32_t>& needle) {
  for (int64_t i = b; i + (int64_t)needle.size() <= e; ++i)
    if (std::equal(needle.begin(), needle.end(), hay.begin() + i)) return true;
  return false;
}

// Every task at several lengths and depths: the layout of tasks.h holds exactly.
TEST(Tasks, LayoutDepthAndAnswer) {
  const TokenStream filler = filler_text(5000);
  const ByteTokenizer tok;
  for (const std::string& name : task_names()) {
    const TaskGenerator gen(name, TaskParams{}, tok, &filler);
    Rng rng(11);
    for (int64_t length : {128, 300, 1000})
      for (double depth : {0.0, 0.3, 0.5, 1.0}) {
        SCOPED_TRACE(name + " length " + std::to_string(length) + " depth " + std::to_string(depth));
        const TaskSequence s = gen.make(length, depth, rng);
        ASSERT_EQ((int64_t)s.tokens.size(), length + 1);
        const int64_t needle = s.needle_end - s.needle_begin, answer = length + 1 - s.answer_begin;
        EXPECT_EQ(s.filler + needle + (s.answer_begin - s.query_begin) + answer, length + 1);
        // the depth: the needle starts round(depth * filler) tokens into the filler
        EXPECT_EQ(s.needle_begin, std::llround(depth * (double)s.filler));
        EXPECT_EQ(s.query_begin - s.needle_end, s.filler - s.needle_begin);
        // the filler around it is one stretch of the text
        std::vector<int32_t> around(s.tokens.begin(), s.tokens.begin() + s.needle_begin);
        around.insert(around.end(), s.tokens.begin() + s.needle_end, s.tokens.begin() + s.query_begin);
        EXPECT_TRUE(around.empty() || is_subsequence(filler.to_vector(), 0, filler.size(), around));
        // the answer is in the needle, and nowhere else before it
        const std::vector<int32_t> ans(s.tokens.begin() + s.answer_begin, s.tokens.end());
        EXPECT_TRUE(is_subsequence(s.tokens, s.needle_begin, s.needle_end, ans));
        EXPECT_FALSE(is_subsequence(s.tokens, 0, s.needle_begin, ans));
        EXPECT_FALSE(is_subsequence(s.tokens, s.needle_end, s.answer_begin, ans));
        const std::string a = text_of(s, s.answer_begin, length + 1), nd = text_of(s, s.needle_begin, s.needle_end);
        if (name == "passkey") {
          EXPECT_EQ(a.size(), 5u);
          EXPECT_EQ(a.find_first_not_of("0123456789"), std::string::npos);
          EXPECT_EQ(nd, " The pass key is " + a + ". ");
          EXPECT_EQ(text_of(s, s.query_begin, s.answer_begin), " What is the pass key? The pass key is ");
        } else if (name == "kv-recall") {
          const std::string q = text_of(s, s.query_begin, s.answer_begin);  // " abc="
          ASSERT_EQ(q.size(), 5u);
          EXPECT_NE(nd.find(q.substr(1) + a), std::string::npos) << nd << " | " << q << a;
          EXPECT_EQ(std::count(nd.begin(), nd.end(), '='), 4);
        } else {
          EXPECT_EQ(a.size(), 16u);
          EXPECT_EQ(a.find_first_not_of("abcdefghijklmnopqrstuvwxyz"), std::string::npos);
          EXPECT_EQ(nd, " <<" + a + ">> ");
          EXPECT_EQ(text_of(s, s.query_begin, s.answer_begin), " <<");
        }
      }
  }
}

TEST(Tasks, DeterministicInTheRng) {
  const TokenStream filler = filler_text(3000);
  const ByteTokenizer tok;
  const TaskGenerator gen("passkey", TaskParams{}, tok, &filler);
  Rng a(5), b(5), c(6);
  const TaskSequence sa = gen.make(200, 0.5, a), sb = gen.make(200, 0.5, b), sc = gen.make(200, 0.5, c);
  EXPECT_EQ(sa.tokens, sb.tokens);
  EXPECT_NE(sa.tokens, sc.tokens);
  // the sizes follow the parameters
  TaskParams p;
  p.digits = 9, p.pairs = 7, p.span = 40;
  Rng r(1);
  EXPECT_EQ(TaskGenerator("passkey", p, tok, &filler).make(200, 0, r).tokens.size() -
                TaskGenerator("passkey", p, tok, &filler).make(200, 0, r).answer_begin, 9u);
  const TaskSequence kv = TaskGenerator("kv-recall", p, tok, &filler).make(300, 0, r);
  const std::string nd = text_of(kv, kv.needle_begin, kv.needle_end);
  EXPECT_EQ(std::count(nd.begin(), nd.end(), '='), 7);
  EXPECT_EQ(kv.tokens.size() - kv.answer_begin, 9u);
  const TaskSequence cp = TaskGenerator("copy", p, tok, &filler).make(300, 0, r);
  EXPECT_EQ(cp.tokens.size() - cp.answer_begin, 40u);
}

TEST(Tasks, BadRequestsAreOneLineErrors) {
  const TokenStream filler = filler_text(500);
  const ByteTokenizer tok;
  expect_error([&] { TaskGenerator("needle", TaskParams{}, tok, &filler); },
               {"unknown task", "needle", "passkey | kv-recall | copy"});
  TaskParams p;
  p.digits = 0;
  expect_error([&] { TaskGenerator("passkey", p, tok, &filler); }, {"--task-digits", "[1, 64]", "got 0"});
  p = {}, p.pairs = 0;
  expect_error([&] { check_task_params(p); }, {"--task-pairs", "got 0"});
  p = {}, p.span = 5000;
  expect_error([&] { check_task_params(p); }, {"--task-span", "got 5000"});
  const TaskGenerator gen("passkey", TaskParams{}, tok, &filler);
  Rng r(1);
  // needle 24 + query 39 + answer 5 = 68 tokens: length 67 is the shortest
  expect_error([&] { gen.make(40, 0.5, r); }, {"passkey", "length 40 is too short", "at least 67"});
  expect_error([&] { gen.check_length(66); }, {"length 66 is too short", "at least 67"});
  EXPECT_EQ(gen.make(67, 0.5, r).filler, 0);
  expect_error([&] { gen.make(200, 1.5, r); }, {"depth must be in [0, 1]", "1.5"});
  expect_error([&] { gen.make(200, -0.1, r); }, {"depth must be in [0, 1]"});
  expect_error([&] { gen.make(2000, 0.5, r); }, {"filler text has 500 tokens", "length 2000"});
}

TEST(TaskEval, WilsonInterval) {
  // closed forms: 0 of n -> [0, z^2 / (n + z^2)]; n of n -> [n / (n + z^2), 1]
  const double z2 = 1.959963984540054 * 1.959963984540054;
  Interval a = wilson_interval(0, 20);
  EXPECT_EQ(a.lo, 0.0);
  EXPECT_NEAR(a.hi, z2 / (20 + z2), 1e-12);
  a = wilson_interval(20, 20);
  EXPECT_NEAR(a.lo, 20 / (20 + z2), 1e-12);
  EXPECT_EQ(a.hi, 1.0);
  a = wilson_interval(10, 20);  // symmetric about 1/2: 0.299..0.701
  EXPECT_NEAR(a.lo + a.hi, 1.0, 1e-12);
  EXPECT_NEAR(a.lo, 0.29929, 1e-4);
  a = wilson_interval(1, 100);  // a textbook value: [0.0018, 0.0545]
  EXPECT_NEAR(a.lo, 0.00177, 1e-4);
  EXPECT_NEAR(a.hi, 0.05449, 1e-4);
  expect_error([] { wilson_interval(3, 0); }, {"wilson_interval"});
}

// Exact match from the logits: an oracle's logits (the answer's one-hot) score every answer token,
// logits on another byte value score none.
TEST(TaskEval, AnswerTokensFromLogits) {
  const TokenStream filler = filler_text(2000);
  const ByteTokenizer tok;
  Rng r(3);
  const TaskSequence s = TaskGenerator("copy", TaskParams{}, tok, &filler).make(100, 0.5, r);
  const int64_t V = 256, L = 100;
  std::vector<float> oracle((size_t)(L * V), 0.f), other((size_t)(L * V), 0.f);
  for (int64_t t = 0; t < L; ++t) {
    oracle[(size_t)(t * V + s.tokens[(size_t)t + 1])] = 5.f;  // row t predicts token t+1
    other[(size_t)(t * V + (s.tokens[(size_t)t + 1] + 1) % V)] = 5.f;  // the next byte value instead
  }
  EXPECT_EQ(answer_tokens_correct(oracle.data(), V, s), 16);
  EXPECT_EQ(answer_tokens_correct(other.data(), V, s), 0);
  oracle[(size_t)((L - 1) * V + 0)] = 9.f;  // the last answer token wrong
  EXPECT_EQ(answer_tokens_correct(oracle.data(), V, s), 15);
}

// A random model cannot know a 5-digit key: exact match 0 (chance 1e-5) in every cell, its 95%
// interval [0, z^2/(n+z^2)], and the cells are deterministic in the seed and independent of the
// other cells asked for.
TEST(TaskEval, RandomModelScoresChance) {
  ModelConfig c = testing_util::two_head_cfg(256, 16, 1, 32, 128, {{"type", "rope"}});
  nn::GPT model(c);
  model.init_weights(1);
  const TokenStream filler = filler_text(3000);
  const ByteTokenizer tok;
  const TaskGenerator gen("passkey", TaskParams{}, tok, &filler);
  const TaskCell a = evaluate_task_cell(model, gen, 100, 0.5, 12, 5, 7);
  EXPECT_EQ(a.trials, 12);
  EXPECT_EQ(a.correct, 0);
  EXPECT_EQ(a.answer_tokens, 60);
  EXPECT_LT(a.token_accuracy, 0.35);
  EXPECT_EQ(a.ci.lo, 0.0);
  EXPECT_NEAR(a.ci.hi, wilson_interval(0, 12).hi, 1e-15);
  const TaskCell b = evaluate_task_cell(model, gen, 100, 0.5, 12, 12, 7);  // another batch size
  EXPECT_EQ(b.tokens_correct, a.tokens_correct);
  EXPECT_TRUE(model.is_training());  // the mode is restored
  EXPECT_NE(task_cell_seed(7, 100, 0.5), task_cell_seed(7, 100, 0.25));
  EXPECT_NE(task_cell_seed(7, 100, 0.5), task_cell_seed(8, 100, 0.5));
}

TEST(TaskMix, ParseErrors) {
  const auto m = parse_task_mix("passkey:0.25,copy:0.5");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].name, "passkey");
  EXPECT_EQ(m[1].rate, 0.5);
  expect_error([] { parse_task_mix("passkey"); }, {"--task-mix", "NAME:P"});
  expect_error([] { parse_task_mix("needle:0.1"); }, {"--task-mix", "unknown task", "needle"});
  expect_error([] { parse_task_mix("passkey:1.5"); }, {"--task-mix", "[0, 1]", "1.5"});
  expect_error([] { parse_task_mix("passkey:-0.1"); }, {"--task-mix", "[0, 1]"});
  expect_error([] { parse_task_mix("passkey:abc"); }, {"--task-mix", "[0, 1]", "abc"});
  expect_error([] { parse_task_mix("copy:0.1,copy:0.2"); }, {"--task-mix", "copy", "twice"});
  expect_error([] { parse_task_mix("copy:0.6,passkey:0.6"); }, {"--task-mix", "add up to 1.2"});
}

// Rate 1: every row a task sequence, its targets ignored but the answer; rate 0: the batch as it
// was; rate 0.5: about half the rows; the same rows for the same Rng.
TEST(TaskMix, RowsAndMasks) {
  const TokenStream filler = filler_text(4000);
  const ByteTokenizer tok;
  const int64_t B = 64, T = 96;
  auto batch = [&] {
    Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
    for (int64_t i = 0; i < B * T; ++i) x.host<int64_t>()[i] = 7, y.host<int64_t>()[i] = 8;
    return std::make_pair(x, y);
  };
  {
    auto [x, y] = batch();
    Rng r(1);
    EXPECT_EQ(TaskMixer({{"copy", 1.0}}, TaskParams{}, tok, &filler, T).apply(x, y, r), B);
    for (int64_t b = 0; b < B; ++b) {
      int64_t kept = 0;
      for (int64_t t = 0; t < T; ++t) {
        const int64_t tg = y.host<int64_t>()[b * T + t];
        if (tg >= 0 && t + 1 < T) {
          EXPECT_EQ(x.host<int64_t>()[b * T + t + 1], tg);  // the next input
        }
        kept += tg >= 0;
        if (tg >= 0) {
          EXPECT_GE(t, T - 16);  // only the last 16 (the span) are scored
        }
      }
      EXPECT_EQ(kept, 16);
    }
  }
  {
    auto [x, y] = batch();
    Rng r(1);
    EXPECT_EQ(TaskMixer({{"copy", 0.0}}, TaskParams{}, tok, &filler, T).apply(x, y, r), 0);
    for (int64_t i = 0; i < B * T; ++i) ASSERT_EQ(y.host<int64_t>()[i], 8);
  }
  auto [x1, y1] = batch();
  auto [x2, y2] = batch();
  Rng r1(9), r2(9);
  const TaskMixer half({{"passkey", 0.25}, {"kv-recall", 0.25}}, TaskParams{}, tok, &filler, T);
  const int64_t n = half.apply(x1, y1, r1);
  EXPECT_GT(n, B / 4);
  EXPECT_LT(n, 3 * B / 4);
  EXPECT_EQ(half.apply(x2, y2, r2), n);
  for (int64_t i = 0; i < B * T; ++i) ASSERT_EQ(y1.host<int64_t>()[i], y2.host<int64_t>()[i]);
  expect_error([&] { TaskMixer({{"passkey", 0.5}}, TaskParams{}, tok, &filler, 32); },
               {"--task-mix passkey", "training length 32", "too short"});
}

// masked_loss: the mean over rows of each row's mean over its kept targets (plain rows: equal to
// loss()), and the ignored positions give no gradient: changing the inputs after the last kept
// target (which only ignored predictions read) leaves every parameter gradient as it was.
TEST(MaskedLoss, ValueAndNoGradientFromIgnoredTargets) {
  ModelConfig c = testing_util::two_head_cfg(32, 16, 2, 32, 16, {{"type", "rope"}});
  nn::GPT model(c);
  model.init_weights(2);
  const int64_t B = 2, T = 12;
  Rng r(4);
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) x.host<int64_t>()[i] = (int64_t)r.below(32), y.host<int64_t>()[i] = (int64_t)r.below(32);
  // plain targets: the same as loss()
  EXPECT_NEAR(model.masked_loss(x, y).data().item(), model.loss(x, y).data().item(), 1e-6);
  Tensor ym = y.clone();  // row 0 keeps positions 3 and 5, row 1 keeps position 7
  for (int64_t t = 0; t < T; ++t) {
    if (t != 3 && t != 5) ym.host<int64_t>()[t] = nn::GPT::kIgnoreTarget;
    if (t != 7) ym.host<int64_t>()[T + t] = nn::GPT::kIgnoreTarget;
  }
  Tensor per;
  {
    NoGradGuard g;
    per = model.token_losses(x, y);
  }
  const double want = ((per.at(3) + per.at(5)) / 2 + per.at(T + 7)) / 2;
  auto grads = [&](const Tensor& xin) {
    model.zero_grad();
    Variable l = model.masked_loss(xin, ym);
    l.backward();
    std::vector<Tensor> g;
    for (auto& [name, p] : model.named_parameters()) g.push_back(p.grad().clone());
    return std::make_pair(l.data().item(), g);
  };
  const auto [l1, g1] = grads(x);
  EXPECT_NEAR(l1, want, 1e-6);
  Tensor x2 = x.clone();  // inputs after the last kept position of each row
  for (int64_t t = 6; t < T; ++t) x2.host<int64_t>()[t] = (x.host<int64_t>()[t] + 1) % 32;
  for (int64_t t = 8; t < T; ++t) x2.host<int64_t>()[T + t] = (x.host<int64_t>()[T + t] + 1) % 32;
  const auto [l2, g2] = grads(x2);
  EXPECT_EQ(l1, l2);
  double differ = 0, norm = 0;
  for (size_t i = 0; i < g1.size(); ++i)
    for (int64_t k = 0; k < g1[i].numel(); ++k) {
      differ = std::max(differ, std::abs(g1[i].at(k) - g2[i].at(k)));
      norm = std::max(norm, std::abs(g1[i].at(k)));
    }
  EXPECT_GT(norm, 1e-4);
  EXPECT_LE(differ, 1e-6 * norm);
  // the same change moves the unmasked loss's gradients (the check above can fail)
  model.zero_grad();
  model.loss(x, y).backward();
  const Tensor gu1 = model.named_parameters().front().second.grad().clone();
  model.zero_grad();
  model.loss(x2, y).backward();
  double moved = 0;
  const Tensor gu2 = model.named_parameters().front().second.grad();
  for (int64_t k = 0; k < gu1.numel(); ++k) moved = std::max(moved, std::abs(gu1.at(k) - gu2.at(k)));
  EXPECT_GT(moved, 1e-6);
  Tensor bad = ym.clone();
  for (int64_t t = 0; t < T; ++t) bad.host<int64_t>()[T + t] = nn::GPT::kIgnoreTarget;
  expect_error([&] { model.masked_loss(x, bad); }, {"masked_loss", "row 1", "ignored"});
  bad.host<int64_t>()[T] = -2;
  expect_error([&] { model.masked_loss(x, bad); }, {"masked_loss", "-2"});
}

}  // namespace
