// nn/layers.h — the basic layers: Linear, Embedding, LayerNorm, RMSNorm, MLP (gelu_tanh).
// Parameter names and shapes follow PyTorch (Linear weight [out, in]).
#pragma once
#include "autograd/ops.h"
#include "nn/module.h"

namespace ctx::nn {

class Linear : public Module {
 public:
  Linear(int64_t in, int64_t out, bool bias = true, DType dt = DType::F32);
  Variable forward(const Variable& x) const;  // x [..., in] -> [..., out]
  Variable weight, bias;
};

class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, DType dt = DType::F32);
  Variable forward(const Tensor& ids) const;  // ids [...] -> [..., dim]
  Variable weight;
};

// LayerNorm (weight, bias) or RMSNorm (weight only), chosen by name.
class Norm : public Module {
 public:
  Norm(const std::string& kind, int64_t dim, double eps, DType dt = DType::F32);
  Variable forward(const Variable& x) const;
  // The residual add in front of the norm, fused into it: {h, forward(h)} with h = x + a
  // (add_layer_norm / add_rms_norm: one kernel each way unless CTXLAB_FUSED_ADD_NORM=0).
  std::pair<Variable, Variable> forward_add(const Variable& x, const Variable& a) const;
  std::string kind;
  double eps;
  Variable weight, bias;
};

class MLP : public Module {
 public:
  MLP(int64_t d, int64_t f, DType dt = DType::F32);
  Variable forward(const Variable& x) const;  // proj(gelu_tanh(fc(x)))
  std::shared_ptr<Linear> fc, proj;
};

}  // namespace ctx::nn
