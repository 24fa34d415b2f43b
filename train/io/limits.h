// train/io/limits.h — refusing what cannot fit, before allocating (docs/reliability.md): a rough
// upper estimate of the memory a model (its parameters), a training run (parameters, gradients,
// optimizer state, activations of one micro-batch, the loss histories) or a generation needs,
// against this machine's physical memory. Estimates err high by design; only a request that
// cannot fit is refused, in one line naming the option, the estimate and the machine's memory.
#pragma once
#include <cstdint>
#include <string>

#include "nn/config.h"

namespace ctx {

// Physical memory of this machine in bytes (sysconf); 0 when unknown (then nothing is refused).
double machine_memory_bytes();
// "12.3 GiB"
std::string gib(double bytes);
// The parameters of a model of `cfg` (an estimate within a few percent, as a double: no overflow).
double estimated_parameters(const ModelConfig& cfg);
// Throws when the parameters of `cfg` alone (F32, twice: the model and a copy being loaded or
// saved) exceed the machine's memory. `source` names where the config came from (a file, a
// preset "with --set n_layers=...", a checkpoint's __metadata__.config).
void check_model_fits(const ModelConfig& cfg, const std::string& source);
// Training: parameters, gradients, two AdamW moments, the activations of a micro-batch of
// `batch` rows of `T` tokens, and `history` logged values per report. Names --batch / --context
// / --log-interval when they make the difference, the config otherwise.
void check_training_fits(const ModelConfig& cfg, const std::string& source, int64_t batch, int64_t T,
                         int64_t history);
// Throws when `count` elements of `elem_bytes` each exceed the machine's memory: `what` names
// the option (e.g. "sample: --max-tokens").
void check_count_fits(double count, double elem_bytes, const std::string& what);

}  // namespace ctx
