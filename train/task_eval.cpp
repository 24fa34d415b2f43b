// train/task_eval.cpp — a retrieval task's accuracy per (length, depth) (see task_eval.h).
#include "train/task_eval.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "autograd/variable.h"
#include "core/device_table.h"  // to_host

namespace ctx {

Interval wilson_interval(int64_t successes, int64_t trials, double z) {
  CTX_CHECK(trials > 0 && successes >= 0 && successes <= trials, "wilson_interval: ", successes, " of ", trials,
            " trials");
  const double n = (double)trials, p = (double)successes / n, z2 = z * z;
  const double centre = (p + z2 / (2 * n)) / (1 + z2 / n);
  const double half = z * std::sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n);
  // exact at the ends (0 of n: lo = 0; n of n: hi = 1), where the subtraction would round
  return {successes == 0 ? 0.0 : std::max(0.0, centre - half), successes == trials ? 1.0 : std::min(1.0, centre + half)};
}

int64_t answer_tokens_correct(const float* logits, int64_t V, const TaskSequence& s) {
  int64_t right = 0;
  for (size_t t = (size_t)s.answer_begin; t < s.tokens.size(); ++t) {
    const float* row = logits + (int64_t)(t - 1) * V;  // row t-1 predicts token t
    const int64_t best = std::max_element(row, row + V) - row;  // the first of equal maxima
    right += best == s.tokens[t];
  }
  return right;
}

uint64_t task_cell_seed(uint64_t seed, int64_t length, double depth) {
  uint64_t bits = 0;
  std::memcpy(&bits, &depth, sizeof bits);
  uint64_t h = seed;
  for (uint64_t v : {(uint64_t)length, bits}) {
    h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2);
    h *= 0xBF58476D1CE4E5B9ULL;
  }
  return h;
}

namespace {

// Scores sequences [0, n) into `cell`: one forward of [n, length].
void score_batch(nn::GPT& model, const std::vector<TaskSequence>& seqs, int64_t length, TaskCell& cell) {
  const int64_t n = (int64_t)seqs.size();
  Tensor in = Tensor::empty({n, length}, DType::I64);
  int64_t* ip = in.host<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < length; ++t) ip[i * length + t] = seqs[(size_t)i].tokens[(size_t)t];
  Tensor z = to_host(model.forward(in).data());  // [n, length, V]
  if (z.dtype() != DType::F32) z = z.to(DType::F32);
  const int64_t V = model.cfg.vocab_size;
  const float* zp = z.host<float>();
  for (int64_t i = 0; i < n; ++i) {
    const TaskSequence& s = seqs[(size_t)i];
    const int64_t answer = (int64_t)s.tokens.size() - s.answer_begin;
    const int64_t right = answer_tokens_correct(zp + i * length * V, V, s);
    cell.answer_tokens += answer;
    cell.tokens_correct += right;
    cell.correct += right == answer;
  }
}

}  // namespace

TaskCell evaluate_task_cell(nn::GPT& model, const TaskGenerator& gen, int64_t length, double depth, int64_t trials,
                            int64_t batch, uint64_t seed, int64_t window) {
  CTX_CHECK(trials >= 1, "evaluate_task: trials must be >= 1, got ", trials);
  CTX_CHECK(batch >= 1, "evaluate_task: batch must be >= 1, got ", batch);
  TaskCell cell;
  cell.length = length;
  cell.depth = depth;
  cell.trials = trials;
  Rng rng(task_cell_seed(seed, length, depth));
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  const int64_t own_window = model.attention_window();
  model.eval();
  model.set_attention_window(window);
  try {
    for (int64_t t0 = 0; t0 < trials; t0 += batch) {
      std::vector<TaskSequence> seqs;
      for (int64_t i = t0; i < std::min(trials, t0 + batch); ++i) seqs.push_back(gen.make(length, depth, rng));
      score_batch(model, seqs, length, cell);
    }
  } catch (...) {
    model.set_attention_window(own_window);
    model.train(was_training);
    throw;
  }
  model.set_attention_window(own_window);
  model.train(was_training);
  cell.accuracy = (double)cell.correct / (double)trials;
  cell.ci = wilson_interval(cell.correct, trials);
  cell.token_accuracy = (double)cell.tokens_correct / (double)cell.answer_tokens;
  return cell;
}

}  // namespace ctx
