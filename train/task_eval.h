// train/task_eval.h — scoring a model on a retrieval task (train/tasks.h): accuracy per
// (length, depth) over independent trials, with a 95% Wilson interval. A trial is correct when
// the model's argmax at every answer position is the answer token given the answer so far
// (teacher forcing): the same verdict as greedy decoding of |answer| tokens after the query, in
// one forward pass. Runs in eval mode without a graph; deterministic in the seed.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/gpt.h"
#include "train/tasks.h"

namespace ctx {

struct Interval {
  double lo = 0, hi = 0;
};
// The Wilson score interval of `successes` out of `trials` (> 0) at normal quantile z (1.96: 95%).
Interval wilson_interval(int64_t successes, int64_t trials, double z = 1.959963984540054);

struct TaskCell {
  int64_t length = 0;
  double depth = 0;
  int64_t trials = 0, correct = 0;  // sequences, and those whose whole answer was right
  double accuracy = 0;              // correct / trials
  Interval ci;                      // 95% Wilson interval of accuracy
  int64_t answer_tokens = 0, tokens_correct = 0;
  double token_accuracy = 0;        // tokens_correct / answer_tokens (chance: 1/10 for digits, 1/26 for letters)
};

// Answer tokens whose prediction is right: logits [length, V] (row-major, host) of one sequence,
// row t predicting token t+1.
int64_t answer_tokens_correct(const float* logits, int64_t V, const TaskSequence& s);

// The seed of cell (length, depth) under `seed`: each cell draws its own sequences, so a cell's
// result does not depend on the other lengths and depths asked for.
uint64_t task_cell_seed(uint64_t seed, int64_t length, double depth);

// `trials` sequences of `gen` at (length, depth), `batch` per forward (>= 1), with sliding-window
// attention of `window` positions (0: full). The caller checks the length against the model
// (check_eval_length) and the task (TaskGenerator::check_length).
TaskCell evaluate_task_cell(nn::GPT& model, const TaskGenerator& gen, int64_t length, double depth, int64_t trials,
                            int64_t batch, uint64_t seed, int64_t window = 0);

}  // namespace ctx
