// nn/layers.cpp — Linear, Embedding, Norm, MLP (see layers.h). Initial values are set by the
// model (nn/gpt.cpp) so that every parameter's init is written in one place.
#include "nn/layers.h"

namespace ctx::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias, DType dt) {
  weight = register_parameter("weight", Tensor::zeros({out, in}, dt));
  if (has_bias) bias = register_parameter("bias", Tensor::zeros({out}, dt));
}
Variable Linear::forward(const Variable& x) const { return linear(x, weight, bias); }

Embedding::Embedding(int64_t num, int64_t dim, DType dt) {
  weight = register_parameter("weight", Tensor::zeros({num, dim}, dt));
}
Variable Embedding::forward(const Tensor& ids) const { return embedding(weight, ids); }

Norm::Norm(const std::string& k, int64_t dim, double e, DType dt) : kind(k), eps(e) {
  CTX_CHECK(kind == "layernorm" || kind == "rmsnorm", "norm: unknown kind '", kind,
            "' (expected layernorm or rmsnorm)");
  weight = register_parameter("weight", Tensor::full({dim}, 1.0, dt));
  if (kind == "layernorm") bias = register_parameter("bias", Tensor::zeros({dim}, dt));
}
Variable Norm::forward(const Variable& x) const {
  return kind == "layernorm" ? layer_norm(x, weight, bias, eps) : rms_norm(x, weight, eps);
}
std::pair<Variable, Variable> Norm::forward_add(const Variable& x, const Variable& a) const {
  return kind == "layernorm" ? add_layer_norm(x, a, weight, bias, eps) : add_rms_norm(x, a, weight, eps);
}

MLP::MLP(int64_t d, int64_t f, DType dt) {
  fc = register_module("fc", std::make_shared<Linear>(d, f, true, dt));
  proj = register_module("proj", std::make_shared<Linear>(f, d, true, dt));
}
Variable MLP::forward(const Variable& x) const {
  return mlp_gelu(x, fc->weight, fc->bias, proj->weight, proj->bias);  // proj(gelu_tanh(fc(x))) as one node
}

}  // namespace ctx::nn
