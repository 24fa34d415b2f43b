// train/optim.h — optimizers over a model's named parameters: AdamW (libtorch defaults,
// decoupled weight decay, no decay on biases / norms / embeddings by default) and SGD with
// momentum; global grad-norm clipping. State tensors are exposed by name for checkpoints
// (MODEL_SPEC §5: exp_avg.<param>, exp_avg_sq.<param>).
// The fused AdamW (the default where the backend has Fused::FlatAdamW) keeps parameters,
// gradients and both moments in flat buffers (FlatParams) on the parameters' device: every
// parameter and state tensor is a view into them, and a step (grad-norm clip folded in) is two
// backend calls, Backend::sum_squares and Backend::adamw_flat, that allocate nothing; the norm
// stays on the device and is read back only to be returned (logging).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "nn/module.h"
#include "train/value_bounds.h"

namespace ctx {

struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  // true: the fused step over flat buffers (parameters become views of one buffer), when the
  // parameters allow it (FlatParams::supported); false: the per-tensor reference, one backend
  // adamw call per parameter. Both give the same update bit for bit from the same gradients and
  // clip factor; the fused clip_and_step sums the grad norm in f64 (clip_grad_norm: f32 per
  // tensor), so a clipped step's factor may differ from the reference's by its f32 rounding.
  bool fused = true;
};

// True for parameters that take weight decay: matrices of Linear layers. Biases, norm weights,
// embeddings (wte, wpe, lm_head tied or not) and encoding tables are excluded by default.
bool default_decays(const std::string& name, const Tensor& t);

// One flat buffer for the values and one for the gradients of a list of parameters (one device,
// one float dtype, each Variable once): every parameter's data becomes a view of its range of
// `values`, and its gradient slot (VarImpl::grad_slot) the same range of `grads`, so backward
// lands gradients in the flat buffer (copied on the first accumulation, added after). Names,
// order, shapes and values are unchanged. Ranges start on 64-byte boundaries; the padding
// between them is zero in both buffers and stays zero.
class FlatParams {
 public:
  struct Range {
    std::string name;
    VarPtr var;
    int64_t offset = 0, numel = 0;  // elements, into values / grads
  };
  // Whether the parameters can share one buffer; if not, `why` says which one cannot.
  static bool supported(const nn::NamedParams& params, std::string* why = nullptr);
  explicit FlatParams(const nn::NamedParams& params);
  ~FlatParams();  // the parameters keep their views; the gradient slots are released
  FlatParams(const FlatParams&) = delete;
  FlatParams& operator=(const FlatParams&) = delete;

  // Re-establishes the views where something replaced them: a parameter whose data was
  // reassigned (same shape and dtype) has its values copied in and becomes a view again; a
  // gradient that is not its slot is copied into the slot. Pointer compares when nothing changed.
  void sync();
  bool is_view(size_t i) const;       // parameter i's data is its range of `values`
  bool grad_is_view(size_t i) const;  // parameter i's grad is defined and its range of `grads`
  Tensor range_of(const Tensor& flat, size_t i) const;  // range i of a flat buffer, shaped

  DType dtype = DType::F32;
  Device device = Device::CPU;
  int64_t total = 0;  // elements of each flat buffer, padding included
  Tensor values, grads;
  std::vector<Range> ranges;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual void step(double lr) = 0;  // uses each parameter's .grad(); undefined grad = skip
  // clip_grad_norm(params, max_norm) then step(lr); returns the norm before clipping. The fused
  // AdamW folds the clip scale into its update and leaves the gradients as they are.
  double clip_and_step(double lr, double max_norm);
  // The same without reading anything back: returns the squared norm before clipping as one f64
  // element on the parameters' device (the fused AdamW: computed there in one reduction and never
  // copied to the host; valid until the next call). The trainer copies it aside and reads it at
  // the logging interval. The per-tensor path (clip_grad_norm) sums on the host.
  virtual Tensor clip_and_step_deferred(double lr, double max_norm);
  void zero_grad();  // drops every parameter's gradient (no allocation, no memset)
  // The gradients as one flat buffer, for a single allreduce of them all (train/dist): the buffer
  // when the optimizer keeps one (the fused AdamW's FlatParams::grads) and every defined gradient
  // is a view of it; nullptr otherwise (each gradient is then reduced on its own).
  virtual const Tensor* flat_grads() const { return nullptr; }
  // Elements of that flat buffer, padding included; 0 when the optimizer keeps none.
  virtual int64_t flat_grads_numel() const { return 0; }
  virtual std::vector<std::pair<std::string, Tensor>> state() = 0;  // for checkpoints
  virtual void load_state(const std::map<std::string, Tensor>& s, const std::string& source) = 0;
  // Restarts the host's bounds on the parameters that want one (VarImpl::wants_value_bound) from
  // their values and state read now (a few small device -> host copies; train/value_bounds.h):
  // AdamW keeps such bounds through its updates; other optimizers promise nothing. The trainer
  // calls it before its first step and at each report.
  virtual void anchor_value_bounds() {}
  int64_t steps = 0;

 protected:
  explicit Optimizer(const nn::NamedParams& params) : params_(params) {}
  nn::NamedParams params_;
};

class AdamW final : public Optimizer {
 public:
  AdamW(const nn::NamedParams& params, const AdamWOptions& opt);
  void step(double lr) override;
  Tensor clip_and_step_deferred(double lr, double max_norm) override;
  // step(lr) on gradients read as grad_scale * g (rounded to the dtype, as clip_grad_norm's
  // in-place scale leaves them); the gradients themselves are not changed by the fused path.
  void step_scaled(double lr, double grad_scale);
  // The step's constants from the device (AdamWHyper::terms), for steps recorded into a CUDA Graph
  // (core/step_graph.h, train/trainer.cpp): after use_device_terms(), every update must follow a
  // begin_step(lr), which advances the step count and writes that step's constants into a device
  // buffer (three fills: outside the recording), where the fused update reads them. Fused only.
  void use_device_terms();
  void begin_step(double lr);
  // After a replay of a recorded update (begin_step's step, run by the device without this host
  // code): the host's bounds on the parameters (value_bounds()) take the step as an eager update
  // does. Not after the replay that runs the step just recorded (its host code counted it).
  void replayed_update(double lr);
  // A recording abandoned before it ran (its host code advanced the bounds for an update that never
  // happened): the bounds as they were before it, published again (the values are unchanged).
  void restore_value_bounds(const AdamWBounds& before) {
    bounds_ = before;
    bounds_.publish();
  }
  bool device_terms() const { return terms_.defined(); }
  std::vector<std::pair<std::string, Tensor>> state() override;
  void load_state(const std::map<std::string, Tensor>& s, const std::string& source) override;
  void anchor_value_bounds() override { bounds_.anchor(m_, v_); }
  const AdamWBounds& value_bounds() const { return bounds_; }
  bool fused() const { return flat_ != nullptr; }
  const FlatParams* flat() const { return flat_.get(); }
  const Tensor* flat_grads() const override;
  int64_t flat_grads_numel() const override { return flat_ ? flat_->total : 0; }

  // The flat buffers are updated in pieces (FlatChunk, core/backend.h) with one decay setting:
  // chunks never straddle a parameter without a gradient or a change of decay, and hold at most
  // kChunk elements.
  static constexpr int64_t kChunk = 16384;

 private:
  void prepare_fused();         // sync the views; rebuild chunks_ when the set of gradients changed
  // ++steps, one AdamW pass over chunks_; norm_sq: undefined, or norm_sq_ for clipping at max_norm
  void fused_update(double lr, double grad_scale, const Tensor& norm_sq, double max_norm);

  std::vector<Tensor> m_, v_;  // per parameter (views of m_flat_ / v_flat_ when fused)
  std::vector<bool> decay_;
  AdamWOptions opt_;
  // fused state
  std::unique_ptr<FlatParams> flat_;
  Tensor m_flat_, v_flat_;
  std::vector<char> active_;    // per parameter: had a gradient when chunks_ was built
  std::vector<FlatChunk> chunks_;  // capacity reserved up front: rebuilding never allocates
  Tensor norm_sq_;                 // f64 [1] on the parameters' device: sum_squares' output
  Tensor terms_;                   // f64 [3] (use_device_terms): this step's AdamWStepTerms
  AdamWHyper hyper(double lr) const;  // this step's hyper-parameters (step = steps)
  bool chunks_valid_ = false;
  AdamWBounds bounds_;  // the host's bounds on the parameters that want one (advanced with steps)
};

class SGD final : public Optimizer {
 public:
  SGD(const nn::NamedParams& params, double momentum, double weight_decay);
  void step(double lr) override;
  std::vector<std::pair<std::string, Tensor>> state() override;
  void load_state(const std::map<std::string, Tensor>& s, const std::string& source) override;

 private:
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
