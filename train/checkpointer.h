// train/checkpointer.h — a training run's checkpoint: <out>/model.safetensors (weights, config,
// step, tokenizer and training options: train/io/checkpoint.h) and <out>/model.optim.safetensors
// (the optimizer state, with the optimizer's step count and the RNG states of the batches and of
// dropout in its __metadata__). Saved so that a crash at any moment leaves a model with a matching
// optimizer file on disk, and read back for a resume that continues the run bit for bit.
#pragma once
#include <cstdint>
#include <string>

#include "core/rng.h"
#include "nn/gpt.h"
#include "train/io/safetensors.h"
#include "train/io/tokenizer.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace ctx {

class Checkpointer {
 public:
  // The run's parts a checkpoint holds; all must outlive the Checkpointer. `data_rng`: the
  // batch sampler's.
  Checkpointer(const TrainOptions& opt, nn::GPT& model, Optimizer& optim, Rng& data_rng, const Tokenizer& tok)
      : opt_(opt), model_(model), optim_(optim), data_rng_(data_rng), tok_(tok) {}
  // The optimizer state, its step count and both RNG states from <dir>/model.optim.safetensors
  // (the model itself is loaded by the caller).
  // Strict: exactly the optimizer's tensors, all finite (second moments non-negative), the step
  // count a non-negative integer, each RNG state well-formed and not all zero.
  void restore(const std::string& dir);
  // The same from a loaded file; `source` names it in errors (tests/fuzz/fuzz_optim.cpp).
  void restore(const SafetensorsFile& f, const std::string& source);
  // The step of the last checkpoint known good (the resumed one, or the last saved).
  void set_last_saved(int64_t step) { last_saved_ = step; }
  // Writes the checkpoint of `step` (optimizer steps done) into opt.out: the optimizer file first,
  // the previous one kept as model.optim.prev.safetensors until the new model is in place.
  // A non-finite parameter or optimizer state (or a negative second moment) is never saved: it
  // throws, naming the tensor and the step, with the files on disk untouched.
  void save(int64_t step);

 private:
  const TrainOptions& opt_;
  nn::GPT& model_;
  Optimizer& optim_;
  Rng& data_rng_;
  const Tokenizer& tok_;
  int64_t last_saved_ = 0;
  void check_finite(int64_t step) const;
};

// For `--resume DIR` of a model saved at `step`: makes <dir>/model.optim.safetensors the
// optimizer state of that step. A run killed between the two writes of a checkpoint has it in
// model.optim.prev.safetensors: rank 0 renames that one back (the other ranks wait). Throws when
// neither file belongs to `step`.
void recover_optimizer_state(const std::string& dir, int64_t step);

}  // namespace ctx
