// posenc/recurrent.cpp — `rnn` (POSENC_SPEC §5; Neishi & Yoshinaga 2019): one GRU layer over the
// token embeddings replaces them (x_t <- h_t, h_0 = 0), PyTorch's equations and gate order
// (r, z, n). Shared parameters pe.weight_ih / weight_hh [3D, D], pe.bias_ih / bias_hh [3D],
// init U(-1/sqrt(D), 1/sqrt(D)). The recurrence is one autograd node (autograd/ops_gru.cpp).
// Every forward starts from h_0 = 0 at position 0: an offset (pos0 > 0) is an error; incremental
// decoding (embed_tokens_decode) carries h from call to call instead.
#include <cmath>
#include <vector>

#include "autograd/ops_position_gen.h"
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
  bool sinks_ok() const override { return true; }  // the mask only (POSENC_SPEC §6)
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

  // Decoding: the GRU carries its last hidden state h [B, D] from one call to the next. The first
  // call (position 0) runs gru_sequence as embed() does; later calls continue the recurrence from
  // h with the same equations composed from ops (sigmoid(a) = (1 + tanh(a / 2)) / 2).
  std::unique_ptr<PosencDecodeState> begin_decode(int64_t) override { return std::make_unique<Decode>(); }
  Variable embed_tokens_decode(const Variable& wte, const Tensor& tokens, int64_t pos0,
                               PosencDecodeState* state) override {
    auto* d = dynamic_cast<Decode*>(state);
    if (!d) return embed_tokens(wte, tokens, pos0);
    const Variable x = embedding(wte, tokens);  // [B, T, D]
    const int64_t B = x.size(0), T = x.size(1), D = D_;
    CTX_CHECK(pos0 == d->pos, "posenc rnn: decoding must feed positions in order; the state is at ",
              d->pos, ", got position ", pos0);
    Variable out;
    if (pos0 == 0) {
      out = gru_sequence(x, w_ih_, w_hh_, b_ih_, b_hh_);  // [B, T, D]
    } else {
      auto sigmoid = [](const Variable& a) { return scale(add_scalar(tanh(scale(a, 0.5)), 1.0), 0.5); };
      std::vector<Variable> rows;
      Variable h = d->h;  // [B, D]
      for (int64_t t = 0; t < T; ++t) {
        Variable gi = linear(reshape(slice(x, 1, t, t + 1), {B, D}), w_ih_, b_ih_);  // [B, 3D]
        Variable gh = linear(h, w_hh_, b_hh_);                                        // [B, 3D]
        Variable r = sigmoid(add(slice(gi, 1, 0, D), slice(gh, 1, 0, D)));
        Variable z = sigmoid(add(slice(gi, 1, D, 2 * D), slice(gh, 1, D, 2 * D)));
        Variable n = tanh(add(slice(gi, 1, 2 * D, 3 * D), mul(r, slice(gh, 1, 2 * D, 3 * D))));
        h = add(n, mul(z, sub(h, n)));  // (1 - z) n + z h
        rows.push_back(reshape(h, {B, 1, D}));
      }
      out = T == 1 ? rows[0] : concat(rows, 1);
    }
    d->h = reshape(slice(out, 1, T - 1, T), {B, D});
    d->pos = pos0 + T;
    return out;
  }

 private:
  struct Decode : PosencDecodeState {
    Variable h;       // [B, D]: the hidden state after position pos - 1
    int64_t pos = 0;  // the next position
  };
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

// Registered by name as the library loads (posenc/registry.cpp; executables link the whole library).
static PosencRegistrar r("rnn", make_rnn);

}  // namespace ctx
