// train/train_options.cpp — the training options: to and from the JSON a checkpoint records, and
// the range check of each, named by its command-line flag (see trainer.h).
#include "train/trainer.h"
#include "train/task_mix.h"

#include <cmath>
#include <limits>

namespace ctx {

nlohmann::json train_options_to_json(const TrainOptions& o) {
  return {{"data", o.data}, {"val_data", o.val_data}, {"data_field", o.data_field}, {"out", o.out},
          {"steps", o.steps}, {"batch", o.batch}, {"accum", o.accum},
          {"deterministic", o.deterministic},
          {"context", o.context}, {"window", o.window}, {"optimizer", o.optimizer}, {"lr", o.lr}, {"min_lr", o.min_lr},
          {"warmup", o.warmup}, {"beta1", o.beta1}, {"beta2", o.beta2}, {"eps", o.eps},
          {"weight_decay", o.weight_decay}, {"momentum", o.momentum}, {"grad_clip", o.grad_clip},
          {"val_fraction", o.val_fraction}, {"log_interval", o.log_interval},
          {"eval_interval", o.eval_interval}, {"eval_batches", o.eval_batches},
          {"ckpt_interval", o.ckpt_interval}, {"seed", o.seed}, {"plot", o.plot}, {"quiet", o.quiet},
          {"task_mix", o.task_mix}, {"task_digits", o.task_params.digits}, {"task_pairs", o.task_params.pairs},
          {"task_span", o.task_params.span}};
}

TrainOptions train_options_from_json(const nlohmann::json& j, const std::string& source) {
  TrainOptions o;
  nlohmann::json ref = train_options_to_json(o);
  CTX_CHECK(j.is_object(), source, ": train options must be a JSON object");
  for (auto& kv : j.items()) {
    CTX_CHECK(ref.contains(kv.key()), source, ": unknown train option '", kv.key(), "'");
    CTX_CHECK(std::string(ref[kv.key()].type_name()) == kv.value().type_name() ||
                  (ref[kv.key()].is_number() && kv.value().is_number()),
              source, ": train option '", kv.key(), "' must be ", ref[kv.key()].type_name(), ", got ",
              kv.value().dump());
    ref[kv.key()] = kv.value();
  }
  o.data = ref["data"]; o.val_data = ref["val_data"]; o.data_field = ref["data_field"];
  o.out = ref["out"]; o.steps = ref["steps"]; o.batch = ref["batch"];
  o.accum = ref["accum"]; o.deterministic = ref["deterministic"]; o.context = ref["context"]; o.window = ref["window"]; o.optimizer = ref["optimizer"]; o.lr = ref["lr"];
  o.min_lr = ref["min_lr"]; o.warmup = ref["warmup"]; o.beta1 = ref["beta1"]; o.beta2 = ref["beta2"];
  o.eps = ref["eps"]; o.weight_decay = ref["weight_decay"]; o.momentum = ref["momentum"];
  o.grad_clip = ref["grad_clip"]; o.val_fraction = ref["val_fraction"]; o.log_interval = ref["log_interval"];
  o.eval_interval = ref["eval_interval"]; o.eval_batches = ref["eval_batches"];
  o.ckpt_interval = ref["ckpt_interval"]; o.seed = ref["seed"]; o.plot = ref["plot"]; o.quiet = ref["quiet"];
  o.task_mix = ref["task_mix"]; o.task_params.digits = ref["task_digits"]; o.task_params.pairs = ref["task_pairs"];
  o.task_params.span = ref["task_span"];
  return o;
}

// Every option in range, named as its command-line flag (train and finetune share these; a
// resumed run's saved options pass through here too).
void validate_train_options(const TrainOptions& o) {
  auto positive_int = [](int64_t v, const char* flag) {
    CTX_CHECK(v >= 1, flag, " must be a positive integer, got ", v);
  };
  auto at_least_zero = [](int64_t v, const char* flag, const char* zero) {
    CTX_CHECK(v >= 0, flag, " must be >= 0 (0: ", zero, "), got ", v);
  };
  auto number_in = [](double v, double lo, bool lo_open, double hi, bool hi_open, const char* flag) {
    const bool ok = std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (std::isinf(hi)) CTX_CHECK(ok, flag, " must be a finite number ", lo_open ? "> " : ">= ", lo, ", got ", v);
    CTX_CHECK(ok, flag, " must be in ", lo_open ? "(" : "[", lo, ", ", hi, hi_open ? ")" : "]", ", got ", v);
  };
  const double inf = std::numeric_limits<double>::infinity();
  positive_int(o.steps, "--steps");
  positive_int(o.batch, "--batch");
  positive_int(o.accum, "--accum");
  CTX_CHECK(o.context == -1 || o.context >= 1, "--context must be a positive integer, got ", o.context);
  CTX_CHECK(o.window >= 0, "--window must be >= 0 positions (0 = full causal attention, e.g. 64), got ", o.window);
  CTX_CHECK(o.optimizer == "adamw" || o.optimizer == "sgd", "--optimizer must be adamw or sgd, got '", o.optimizer,
            "'");
  number_in(o.lr, 0, true, inf, true, "--lr");
  number_in(o.min_lr, 0, false, o.lr, false, "--min-lr (at most --lr)");
  at_least_zero(o.warmup, "--warmup", "no warmup");
  number_in(o.beta1, 0, false, 1, true, "--beta1");
  number_in(o.beta2, 0, false, 1, true, "--beta2");
  number_in(o.eps, 0, true, inf, true, "AdamW eps");
  number_in(o.weight_decay, 0, false, inf, true, "--weight-decay");
  number_in(o.momentum, 0, false, 1, true, "--momentum");
  number_in(o.grad_clip, 0, false, inf, true, "--grad-clip (0: off)");
  number_in(o.val_fraction, 0, true, 1, true, "--val-fraction");
  positive_int(o.log_interval, "--log-interval");
  at_least_zero(o.eval_interval, "--eval-interval", "at the end only");
  positive_int(o.eval_batches, "--eval-batches");
  at_least_zero(o.ckpt_interval, "--ckpt-interval", "a checkpoint at the end only");
  CTX_CHECK(!o.data_field.empty(), "--data-field must name the JSONL field that holds the text, e.g. text; got \"\"");
  if (!o.task_mix.empty()) parse_task_mix(o.task_mix);
  check_task_params(o.task_params);
}

}  // namespace ctx
