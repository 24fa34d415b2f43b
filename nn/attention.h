// nn/attention.h — causal multi-head self-attention with a positional-encoding object plugged
// in through its hooks (posenc/posenc.h). One implementation serves every encoding.
#pragma once
#include "nn/layers.h"
#include "posenc/posenc.h"

namespace ctx::nn {

class Attention : public Module {
 public:
  Attention(const ModelConfig& cfg, int layer, PositionalEncoding* pe, DType dt = DType::F32);
  // x: [B, T, D] -> [B, T, D]
  Variable forward(const Variable& x, Rng* dropout_rng) const;
  std::shared_ptr<Linear> qkv, proj;
  // Segment memory (posenc memory_length() > 0): the last inputs of the previous segment,
  // detached; [B, M, D]. Cleared by reset_memory().
  void reset_memory() const { mem_ = Tensor(); }
  const Tensor& memory() const { return mem_; }

 private:
  mutable Tensor mem_;
  int layer_;
  int64_t H_, Dh_, D_;
  double dropout_;
  PositionalEncoding* pe_;
};

}  // namespace ctx::nn
