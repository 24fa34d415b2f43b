// train/task_mix.h — retrieval tasks mixed into training (`--task-mix NAME:P[,NAME:P...]`):
// each row of a batch becomes, with probability P, a sequence of task NAME (train/tasks.h) at a
// uniform random depth in the training text, its targets ignored (nn::GPT::kIgnoreTarget) except
// the answer's; the rows left are the text batch as drawn. The trainer then takes the mean over
// rows of each row's mean loss (nn::GPT::masked_loss). The draws come from the batch sampler's
// Rng, which checkpoints save: a resumed run draws the same rows.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "train/tasks.h"

namespace ctx {

struct TaskRate {
  std::string name;
  double rate = 0;
};
// "passkey:0.2,copy:0.1" -> {{passkey, 0.2}, {copy, 0.1}}. Throws one line naming --task-mix:
// not NAME:P, an unknown task, P outside [0, 1], a task twice, rates summing past 1.
std::vector<TaskRate> parse_task_mix(const std::string& text);

class TaskMixer {
 public:
  // Checks every task fits sequences of T tokens (+1) and `filler` (which must outlive this).
  TaskMixer(const std::vector<TaskRate>& mix, const TaskParams& params, const Tokenizer& tok,
            const TokenStream* filler, int64_t T);
  // Replaces rows of inputs x and targets y ([B, T] i64, host) as described above; returns the
  // number of task rows.
  int64_t apply(Tensor& x, Tensor& y, Rng& rng) const;

 private:
  std::vector<double> rates_;
  std::vector<std::unique_ptr<TaskGenerator>> gens_;
  int64_t T_;
};

}  // namespace ctx
