// posenc/floater.cpp — `floater` (POSENC_SPEC §5; Liu et al. 2020): positions from the ODE
// dp/dt = W2 tanh(W1 p + b1 + t w_t) + b2, p(0) = p0, integrated with classic RK4 (step
// dt / substeps); x_i += p(i dt), once, at the input. Keys: hidden F (64), dt (0.01),
// substeps (1). Shared parameters pe.p0 [D], pe.fc.weight [F, D], pe.fc.bias [F], pe.time [F],
// pe.proj.weight [D, F], pe.proj.bias [D]. The solver is one autograd node differentiated
// through every stage (autograd/ops_ode.cpp); positions beyond L are integrated further.
#include <cmath>

#include "autograd/ops_position_gen.h"
#include "core/rng.h"
#include "posenc/posenc.h"

namespace ctx {
namespace {

class Floater final : public PositionalEncoding {
 public:
  Floater(const ModelConfig& c, int64_t F, double dt, int64_t substeps) : D_(c.d_model), F_(F) {
    spec_.dt = dt;
    spec_.substeps = substeps;
    mod_ = std::make_shared<nn::Module>();
    p0_ = mod_->register_parameter("p0", Tensor::zeros({D_}));
    auto fc = mod_->register_module("fc", std::make_shared<nn::Module>());
    w1_ = fc->register_parameter("weight", Tensor::zeros({F_, D_}));
    b1_ = fc->register_parameter("bias", Tensor::zeros({F_}));
    wt_ = mod_->register_parameter("time", Tensor::zeros({F_}));
    auto proj = mod_->register_module("proj", std::make_shared<nn::Module>());
    w2_ = proj->register_parameter("weight", Tensor::zeros({D_, F_}));
    b2_ = proj->register_parameter("bias", Tensor::zeros({D_}));
  }
  std::string type() const override { return "floater"; }
  bool sinks_ok() const override { return true; }  // the mask only (POSENC_SPEC §6)
  bool fused_attention_ok(const AttnState&) const override { return true; }
  std::shared_ptr<nn::Module> shared_module() override { return mod_; }
  void init_parameters(Rng& rng) override {
    const double a = 1.0 / std::sqrt((double)D_);
    rng.fill_normal(p0_.data(), 0.0, 0.02);
    rng.fill_uniform(w1_.data(), -a, a);
    rng.fill_uniform(b1_.data(), -a, a);
    rng.fill_uniform(wt_.data(), -1.0, 1.0);
    rng.fill_normal(w2_.data(), 0.0, 0.02);
    backend_of(b2_.data()).fill(b2_.data(), 0.0);
  }
  Variable embed(const Variable& x, int64_t pos0) override {
    const int64_t T = x.size(1);
    OdeSpec s = spec_;
    s.n = pos0 + T;
    Variable P = ode_positions(p0_, w1_, b1_, wt_, w2_, b2_, s);  // [pos0 + T, D]
    if (pos0 > 0) P = slice(P, 0, pos0, pos0 + T);
    return add(x, P);                                              // broadcast over the batch
  }

  // Decoding: P[i] depends only on the RK4 steps before it (t = step * eta, from 0), so the
  // positions of the whole generation are integrated once, to `capacity`, and each call reads
  // its rows — instead of integrating from 0 to n on every token.
  std::unique_ptr<PosencDecodeState> begin_decode(int64_t capacity) override {
    auto d = std::make_unique<Decode>();
    d->capacity = capacity;
    return d;
  }
  Variable embed_tokens_decode(const Variable& wte, const Tensor& tokens, int64_t pos0,
                               PosencDecodeState* state) override {
    auto* d = dynamic_cast<Decode*>(state);
    if (!d) return embed_tokens(wte, tokens, pos0);
    const int64_t T = tokens.size(1);
    CTX_CHECK(pos0 + T <= d->capacity, "posenc floater: decoding reached position ", pos0 + T - 1,
              " beyond the cache capacity ", d->capacity);
    if (!d->P.defined()) {
      OdeSpec s = spec_;
      s.n = d->capacity;
      d->P = ode_positions(p0_, w1_, b1_, wt_, w2_, b2_, s);  // [capacity, D]
    }
    return add(embedding(wte, tokens), slice(d->P, 0, pos0, pos0 + T));
  }

 private:
  struct Decode : PosencDecodeState {
    int64_t capacity = 0;
    Variable P;  // [capacity, D]
  };
  int64_t D_, F_;
  OdeSpec spec_;
  std::shared_ptr<nn::Module> mod_;
  Variable p0_, w1_, b1_, wt_, w2_, b2_;
};

std::unique_ptr<PositionalEncoding> make_floater(const ModelConfig& c, const nlohmann::json& p,
                                                 const std::string& src) {
  posenc_check_keys(p, {"hidden", "dt", "substeps"}, src);
  const int64_t F = posenc_int(p, "hidden", 64, 1, src, "floater");
  const double dt = posenc_number(p, "dt", 0.01, src);
  CTX_CHECK(std::isfinite(dt) && dt > 0, src, ": field 'posenc.dt' of posenc type 'floater' must be "
            "a finite number > 0, got ", p["dt"].dump());
  const int64_t substeps = posenc_int(p, "substeps", 1, 1, src, "floater");
  return std::make_unique<Floater>(c, F, dt, substeps);
}

}  // namespace

// Registered by name as the library loads (posenc/registry.cpp; executables link the whole library).
static PosencRegistrar r("floater", make_floater);

}  // namespace ctx
