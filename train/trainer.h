// train/trainer.h — the training loop: batches, forward/backward with gradient accumulation,
// clipping, optimizer, warmup + cosine schedule, a progress line, periodic validation, metrics
// (JSONL + CSV), atomic checkpoints with optimizer state, and exact resume. The loop is
// train/trainer.cpp; its logs train/run_log.h, its checkpoints train/checkpointer.h.
#pragma once
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "nn/gpt.h"
#include "train/io/tokenizer.h"
#include "train/tasks.h"

namespace ctx {

struct TrainOptions {
  std::string data;          // corpus: comma-separated files / directories; "" = the shipped corpus
  std::string val_data;      // validation files ("": the last val_fraction of `data`)
  std::string data_field = "text";  // the text field of JSONL files
  std::string out = "runs/run";
  int64_t steps = 1000;
  int64_t batch = 8;
  int64_t accum = 1;         // micro-batches per optimizer step
  bool deterministic = false;  // per-sequence leaves + gradient tree: bit-identical whatever N (grad_tree.h)
  int64_t context = -1;      // training sequence length (-1: config.context)
  // Sliding-window attention during training (train --window W): each token attends to its last W
  // positions only, with the attention kernels evaluation's --window runs. 0: the model's own
  // (none for a new model; a loaded checkpoint's, train/io/checkpoint.h). The checkpoint records
  // the window, so eval and sample use it by default.
  int64_t window = 0;
  std::string optimizer = "adamw";  // adamw | sgd
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup = 100;
  double beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, momentum = 0.9;
  double grad_clip = 1.0;    // 0 = off
  double val_fraction = 0.1;
  int64_t log_interval = 10, eval_interval = 200, eval_batches = 8, ckpt_interval = 500;
  uint64_t seed = 1337;
  bool plot = true;
  bool quiet = false;
  // Retrieval tasks mixed into the batches, "NAME:P[,NAME:P...]" ("" = none; train/task_mix.h),
  // with their sizes.
  std::string task_mix;
  TaskParams task_params;
  // Replace an existing run in `out` (train/run_dir.h); without it a new run there is refused.
  // Not saved with the run.
  bool force = false;
  // Text -> tokens (nullptr: bytes). Not part of the JSON below: the checkpoint records it in
  // its own metadata (train/io/tokenizer.h), and --resume restores it from there.
  std::shared_ptr<const Tokenizer> tokenizer;
};

nlohmann::json train_options_to_json(const TrainOptions& o);
TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& source);

struct TrainResult {
  int64_t steps = 0;
  double final_train_loss = 0, final_val_loss = 0;
  double seconds = 0;
  // SIGINT / SIGTERM stopped the run (after finishing its step and writing a checkpoint): the
  // signal's number, the CLI exits 128 + it. 0: the run ended normally or by stop_after.
  int signal = 0;
};

// Trains `model` (already initialised or loaded). start_step > 0 with `resume_dir` restores the
// optimizer and RNG states saved there. Writes <out>/model.safetensors (+ .optim.safetensors),
// <out>/metrics.jsonl, <out>/train.csv, <out>/val.csv and <out>/loss.png (gnuplot).
// stop_after > 0 ends the run (with a checkpoint) after that many optimizer steps in total,
// as an interruption would; `--resume` then continues it. after_step (tests): called at the end
// of every step with its 1-based number and whether the step read its losses back (a report:
// the logging interval, or a step that evaluates, checkpoints or stops).
// SIGINT / SIGTERM while the loop runs: the step finishes, a checkpoint is written and train()
// returns with TrainResult::signal set; a second signal ends the process at once. Rank 0 takes
// the run directory first (train/run_dir.h: writable, not another run unless resumed or
// opt.force, locked for the run's life).
// Throws ctx::Error naming the command-line flag of the first option out of range.
void validate_train_options(const TrainOptions& o);

TrainResult train(nn::GPT& model, const TrainOptions& opt, int64_t start_step = 0,
                  const std::string& resume_dir = "", int64_t stop_after = -1,
                  const std::function<void(int64_t step, bool reported)>& after_step = {});

}  // namespace ctx
