// posenc/complex_order.cpp — `complex-order` (POSENC_SPEC §5; Wang et al. 2020): word w at
// position t is z e^{i omega_w t} per complex dimension k, z = wte[w, 2k] + i wte[w, 2k+1]
// (amplitude and initial phase in Cartesian form in the token table), omega = pe.freq.weight
// [V, D/2], init freq[w, k] = 1 / powf(10000, 2k / D) (the sinusoidal frequencies). The rotated
// pairs replace wte[tokens] as the input of block 0 (embed_tokens hook; the output layer is
// unchanged). One autograd node with gradients to wte and freq (autograd/ops_complex.cpp).
#include <cmath>

#include "autograd/ops_position_gen.h"
#include "core/device_table.h"  // to_device_like
#include "core/rng.h"
#include "posenc/posenc.h"

namespace ctx {
namespace {

class ComplexOrder final : public PositionalEncoding {
 public:
  explicit ComplexOrder(const ModelConfig& c) : V_(c.vocab_size), D_(c.d_model) {
    mod_ = std::make_shared<nn::Module>();
    auto freq = mod_->register_module("freq", std::make_shared<nn::Module>());
    freq_ = freq->register_parameter("weight", Tensor::zeros({V_, D_ / 2}));
  }
  std::string type() const override { return "complex-order"; }
  bool sinks_ok() const override { return true; }  // the mask only (POSENC_SPEC §6)
  bool fused_attention_ok(const AttnState&) const override { return true; }
  std::shared_ptr<nn::Module> shared_module() override { return mod_; }
  void init_parameters(Rng&) override {
    Tensor host = Tensor::empty({V_, D_ / 2}, DType::F64);
    for (int64_t w = 0; w < V_; ++w)
      for (int64_t k = 0; k < D_ / 2; ++k)
        host.host<double>()[w * (D_ / 2) + k] = 1.0f / std::pow(10000.0f, (float)(2 * k) / (float)D_);
    Tensor& dst = freq_.data();
    backend_of(dst).convert(to_device_like(host, dst), dst);
  }
  Variable embed_tokens(const Variable& wte, const Tensor& tokens, int64_t pos0) override {
    return complex_order_embed(wte, freq_, tokens, pos0);  // [B, T, D]
  }

 private:
  int64_t V_, D_;
  std::shared_ptr<nn::Module> mod_;
  Variable freq_;
};

std::unique_ptr<PositionalEncoding> make_complex_order(const ModelConfig& c, const nlohmann::json& p,
                                                       const std::string& src) {
  posenc_check_keys(p, {}, src);
  CTX_CHECK(c.d_model % 2 == 0, src, ": posenc type 'complex-order' needs an even d_model (pairs of "
            "real channels are complex dimensions), got d_model ", c.d_model);
  return std::make_unique<ComplexOrder>(c);
}

}  // namespace

// Registered by name as the library loads (posenc/registry.cpp; executables link the whole library).
static PosencRegistrar r("complex-order", make_complex_order);

}  // namespace ctx
