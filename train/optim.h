// train/optim.h — optimizers over a model's named parameters: AdamW (libtorch defaults,
// decoupled weight decay, no decay on biases / norms / embeddings by default) and SGD with
// momentum; global grad-norm clipping. State tensors are exposed by name for checkpoints
// (MODEL_SPEC §5: exp_avg.<param>, exp_avg_sq.<param>).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "nn/module.h"

namespace ctx {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
};

// True for parameters that take weight decay: matrices of Linear layers. Biases, norm weights,
// embeddings (wte, wpe, lm_head tied or not) and encoding tables are excluded by default.
bool default_decays(const std::string& name, const Tensor& t);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(double lr) = 0;  // uses each parameter's .grad(); undefined grad = skip
  virtual std::vector<std::pair<std::string, Tensor>> state() = 0;  // for checkpoints
  virtual void load_state(const std::map<std::string, Tensor>& s, const std::string& source) = 0;
  int64_t steps = 0;
};

class AdamW final : public Optimizer {
 public:
  AdamW(const nn::NamedParams& params, const AdamWOptions& opt);
  void step(double lr) override;
  std::vector<std::pair<std::string, Tensor>> state() override;
  void load_state(const std::map<std::string, Tensor>& s, const std::string& source) override;

 private:
  nn::NamedParams params_;
  std::vector<Tensor> m_, v_;
  std::vector<bool> decay_;
  AdamWOptions opt_;
};

class SGD final : public Optimizer {
 public:
  SGD(const nn::NamedParams& params, double momentum, double weight_decay);
  void step(double lr) override;
  std::vector<std::pair<std::string, Tensor>> state() override;
  void load_state(const std::map<std::string, Tensor>& s, const std::string& source) override;

 private:
  nn::NamedParams params_;
  std::vector<Tensor> buf_;
  std::vector<bool> decay_;
  double momentum_, wd_;
};

// Global L2 norm of all gradients; if max_norm > 0 and the norm exceeds it, scales every
// gradient by max_norm / norm (PyTorch clip_grad_norm_). Returns the norm before clipping.
double clip_grad_norm(const nn::NamedParams& params, double max_norm);

// Learning rate at `step` (0-based): linear warmup to lr over `warmup` steps, then cosine decay
// to min_lr at `total` steps (constant min_lr after).
double lr_warmup_cosine(int64_t step, int64_t warmup, int64_t total, double lr, double min_lr);

}  // namespace ctx
