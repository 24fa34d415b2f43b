// train/io/limits.cpp — memory estimates and refusals (see limits.h).
#include "train/io/limits.h"

#include <unistd.h>

#include <cstdio>

#include "core/error.h"

namespace ctx {

double machine_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? (double)pages * (double)page : 0.0;
}

std::string gib(double bytes) {
  char b[64];
  if (bytes >= 1e3 * 1073741824.0) std::snprintf(b, sizeof b, "%.3g GiB", bytes / 1073741824.0);
  else std::snprintf(b, sizeof b, "%.1f GiB", bytes / 1073741824.0);
  return b;
}

double estimated_parameters(const ModelConfig& c) {
  const double d = (double)c.d_model, L = (double)c.n_layers, V = (double)c.vocab_size, ctx = (double)c.context;
  const double ff = c.d_ff > 0 ? (double)c.d_ff : 4.0 * d;
  const double per_layer = 4 * d * d + 4 * d + 2 * d * ff + ff + d + 4 * d;  // attention, MLP, two norms
  // embeddings (+ an untied head), learned positions at most context x d, the final norm
  return L * per_layer + V * d * (c.tie_embeddings ? 1 : 2) + ctx * d + 2 * d;
}

namespace {
void refuse_over(double need, const std::string& what, const std::string& hint) {
  const double mem = machine_memory_bytes();
  if (mem <= 0 || need <= mem) return;
  throw Error(str(what, " needs about ", gib(need), ", more than this machine's memory (", gib(mem), "); ", hint));
}
}  // namespace

void check_model_fits(const ModelConfig& cfg, const std::string& source) {
  const double p = estimated_parameters(cfg);
  refuse_over(p * 4.0 * 2.0, str(source, ": a model of ", (double)p, " parameters (d_model ", cfg.d_model, ", ",
                                 cfg.n_layers, " layers, vocab ", cfg.vocab_size, ")"),
              "refused before allocating (reduce n_layers, d_model, d_ff or vocab_size)");
}

void check_training_fits(const ModelConfig& cfg, const std::string& source, int64_t batch, int64_t T,
                         int64_t history) {
  check_model_fits(cfg, source);
  const double p = estimated_parameters(cfg);
  const double model = p * 4.0 * 4.0;  // weights, gradients, two moments
  const double d = (double)cfg.d_model, L = (double)cfg.n_layers, H = (double)cfg.n_heads;
  const double ff = cfg.d_ff > 0 ? (double)cfg.d_ff : 4.0 * d;
  // per token and layer: the saved inputs of the norms, attention and MLP (~ 12 d + 2 ff), the
  // attention probabilities (H x T); plus the logits and their gradient
  const double per_row = (double)T * (L * (12 * d + 2 * ff + 2 * H * (double)T) + 3 * (double)cfg.vocab_size) * 4.0;
  const double acts = per_row * (double)batch;
  const double hist = (double)history * 8.0 * 4.0;
  const double mem = machine_memory_bytes();
  if (mem <= 0 || model + acts + hist <= mem) return;
  refuse_over(model, str("train: the model (", source, ") with its gradients and optimizer state"),
              "refused before allocating (reduce n_layers, d_model or vocab_size)");
  if (hist > mem / 2)
    refuse_over(model + acts + hist, str("train: --log-interval x --accum = ", history, " logged values per report"),
                "refused before training (use a smaller --log-interval)");
  if (per_row * 1.0 + model > mem)
    refuse_over(model + per_row, str("train: context ", T, " (--context or config.context) for one row"),
                "refused before training (use a shorter --context)");
  refuse_over(model + acts + hist, str("train: --batch ", batch, " at context ", T, " (activations ", gib(acts),
                                       ", model with optimizer state ", gib(model), ")"),
              str("refused before training (use a smaller --batch with --accum; at most about ",
                  (long long)((mem - model - hist) / per_row), " rows fit)"));
}

void check_count_fits(double count, double elem_bytes, const std::string& what) {
  refuse_over(count * elem_bytes, str(what, " ", (double)count), "refused before allocating");
}

}  // namespace ctx
