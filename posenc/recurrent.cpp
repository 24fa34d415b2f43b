// posenc/recurrent.cpp — `rnn` (POSENC_SPEC §5; Neishi & Yoshinaga 2019): one GRU layer over the
// token embeddings replaces them (x_t <- h_t, h_0 = 0), PyTorch's equations and gate order
// (r, z, n). Shared parameters pe.weight_ih / weight_hh [3D, D], pe.bias_ih / bias_hh [3D],
// init U(-1/sqrt(D), 1/sqrt(D)). The recurrence is one autograd node (autograd/ops_gru.cpp).
// Every forward starts from h_0 = 0 at position 0: an offset (pos0 > 0) is an error.
#include <cmath>

#include "autograd/ops_survey.h"
#include "core/rng.h"
#include "posenc/posenc.h"

namespace ctx {
namespace {

class Recurrent final : public PositionalEncoding {
 public:
  explicit Recurrent(const ModelConfig& c) : D_(c.d_model) {
    mod_ = std::make_shared<nn::Module>();
    w_ih_ = mod_->register_parameter("weight_ih", Tensor::zeros({3 * D_, D_}));
    w_hh_ = mod_->register_parameter("weight_hh", Tensor::zeros({3 * D_, D_}));
    b_ih_ = mod_->register_parameter("bias_ih", Tensor::zeros({3 * D_}));
    b_hh_ = mod_->register_parameter("bias_hh", Tensor::zeros({3 * D_}));
  }
  std::string type() const override { return "rnn"; }
  bool fused_attention_ok(const AttnState&) const override { return true; }
  std::shared_ptr<nn::Module> shared_module() override { return mod_; }
  void init_parameters(Rng& rng) override {
    const double a = 1.0 / std::sqrt((double)D_);
    for (Variable* v : {&w_ih_, &w_hh_, &b_ih_, &b_hh_}) rng.fill_uniform(v->data(), -a, a);
  }
  Variable embed(const Variable& x, int64_t pos0) override {
    CTX_CHECK(pos0 == 0, "posenc rnn: the GRU starts from h_0 = 0 at position 0 of every sequence; "
              "got a sequence starting at position ", pos0, " (expected 0)");
    return gru_sequence(x, w_ih_, w_hh_, b_ih_, b_hh_);  // [B, T, D]
  }

 private:
  int64_t D_;
  std::shared_ptr<nn::Module> mod_;
  Variable w_ih_, w_hh_, b_ih_, b_hh_;
};

std::unique_ptr<PositionalEncoding> make_rnn(const ModelConfig& c, const nlohmann::json& p,
                                             const std::string& src) {
  posenc_check_keys(p, {}, src);
  return std::make_unique<Recurrent>(c);
}

}  // namespace

// Called by posenc/registry.cpp (ensure_registered).
void posenc_register_recurrent() { static PosencRegistrar r("rnn", make_rnn); }

}  // namespace ctx
