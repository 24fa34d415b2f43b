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

 private:
  int layer_;
  int64_t H_, Dh_, D_;
  double dropout_;
  PositionalEncoding* pe_;
};

}  // namespace ctx::nn
