// fire.cpp — FIRE (Li et al. 2023, "Functional Interpolation for Relative Positions Improves Long
// Context Transformers", arXiv:2310.04418) as a ctxlab positional encoding, written outside
// ctxlab against its installed API (<ctxlab/ctxlab.h>) and registered by name, "fire-example",
// from here (ctxlab's built-in `fire`, POSENC_SPEC §7.1, keeps the name "fire"; README.md lists
// where this one differs). The same file is linked into this example's tests and built as the
// plugin libfire.so for `ctxlab --plugin libfire.so --posenc fire-example`. The formulation and
// its choices: README.md.
//
//   bias[h, i, j] = f( psi(i - j) / (psi(max(L, i)) + eps) )[h]     i, j absolute positions
//   psi(x) = log(|c| x + 1),  L = |L_multiplier * init_L|,  f = Linear(1, W) -> ReLU -> Linear(W, H)
//
// Parameters (one set shared by every layer, as ctxlab's t5 bias): pe.c [1], pe.L_multiplier
// [1], pe.mlp.fc1.{weight [W, 1], bias [W]}, pe.mlp.fc2.{weight [H, W], bias [H]}.
// The bias is composed of ctxlab's differentiable ops, so its backward is theirs (no hand-written
// gradient) and gradcheck proves it.
#include <ctxlab/ctxlab.h>

#include <cmath>

namespace {

using namespace ctx;

// |x| with gradient sign(x) (0 at 0, like torch.abs)
Variable abs_of(const Variable& x) { return add(relu(x), relu(neg(x))); }

// A constant (no gradient) in the dtype and on the device of `like`, from f64 host values.
Variable constant(const std::vector<double>& v, const Shape& shape, const Variable& like) {
  Tensor t = Tensor::from_vector(v, shape);
  if (like.dtype() != DType::F64) t = t.to(like.dtype());
  if (like.device() != t.device()) t = t.to(like.device());
  return Variable(t, false);
}

class Fire final : public PositionalEncoding {
 public:
  Fire(const ModelConfig& cfg, int64_t width, double init_c, double init_L, double eps)
      : H_(cfg.n_heads), width_(width), init_c_(init_c), init_L_(init_L), eps_(eps) {
    mod_ = std::make_shared<nn::Module>();
    c_ = mod_->register_parameter("c", Tensor::zeros({1}));
    L_mult_ = mod_->register_parameter("L_multiplier", Tensor::zeros({1}));
    auto mlp = std::make_shared<nn::Module>();
    fc1_ = mlp->register_module("fc1", std::make_shared<nn::Linear>(1, width_));
    fc2_ = mlp->register_module("fc2", std::make_shared<nn::Linear>(width_, H_));
    mod_->register_module("mlp", mlp);
  }
  std::string type() const override { return "fire-example"; }
  std::shared_ptr<nn::Module> shared_module() override { return mod_; }  // named "pe.*"

  // The reference's: c = init_c, L_multiplier = 1, the MLP as torch.nn.Linear's default
  // (weight and bias U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
  void init_parameters(Rng& rng) override {
    backend_of(c_.data()).fill(c_.data(), init_c_);
    backend_of(L_mult_.data()).fill(L_mult_.data(), 1.0);
    for (auto* fc : {fc1_.get(), fc2_.get()}) {
      const double k = 1.0 / std::sqrt((double)fc->weight.size(1));
      rng.fill_uniform(fc->weight.data(), -k, k);
      rng.fill_uniform(fc->bias.data(), -k, k);
    }
  }

  // Default logits with this bias: the fused attention takes a [1, H, T, S] bias as is.
  bool fused_attention_ok(const AttnState&) const override { return true; }

  // [1, H, T, S]: queries at absolute positions q_pos0 + i (i < T), keys at j (j < S).
  Variable bias(AttnState& st) override {
    const int64_t T = st.T, S = st.S;
    std::vector<double> dist((size_t)(T * S)), pos((size_t)T);
    for (int64_t i = 0; i < T; ++i) {
      pos[(size_t)i] = (double)(st.q_pos0 + i);
      // j > i is masked by attention afterwards; distance 0 there keeps every value finite
      for (int64_t j = 0; j < S; ++j) dist[(size_t)(i * S + j)] = (double)std::max<int64_t>(st.q_pos0 + i - j, 0);
    }
    const Variable& like = c_;
    Variable d = constant(dist, {T, S}, like), p = constant(pos, {T, 1}, like);
    Variable c = reshape(abs_of(c_), {1, 1});                                   // |c|
    Variable L = reshape(abs_of(scale(L_mult_, init_L_)), {1, 1});             // threshold
    Variable num = log(add_scalar(mul(c, d), 1.0));                            // psi(i - j)  [T, S]
    Variable norm = add(p, relu(sub(L, p)));                                   // max(L, i)   [T, 1]
    Variable den = add_scalar(log(add_scalar(mul(c, norm), 1.0)), eps_);      // psi(..) + eps
    Variable x = reshape(div(num, den), {T * S, 1});                           // [T*S, 1]
    Variable f = fc2_->forward(relu(fc1_->forward(x)));                        // [T*S, H]
    return reshape(transpose(f, 0, 1), {1, H_, T, S});
  }

 private:
  int64_t H_, width_;
  double init_c_, init_L_, eps_;
  std::shared_ptr<nn::Module> mod_;
  Variable c_, L_mult_;
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

// posenc {"type": "fire-example", "mlp_width": 32, "init_c": 0.1, "init_L": 512, "eps": 1e-6}
std::unique_ptr<PositionalEncoding> make_fire(const ModelConfig& cfg, const nlohmann::json& p,
                                              const std::string& source) {
  posenc_check_keys(p, {"mlp_width", "init_c", "init_L", "eps"}, source);
  const double width = posenc_number(p, "mlp_width", 32, source);
  const double init_c = posenc_number(p, "init_c", 0.1, source);
  const double init_L = posenc_number(p, "init_L", 512, source);
  const double eps = posenc_number(p, "eps", 1e-6, source);
  CTX_CHECK(width >= 1 && width == std::floor(width), source,
            ": field 'posenc.mlp_width' must be a positive integer, got ", p["mlp_width"].dump());
  CTX_CHECK(init_c > 0, source, ": field 'posenc.init_c' must be > 0, got ", init_c);
  CTX_CHECK(init_L > 0, source, ": field 'posenc.init_L' must be > 0, got ", init_L);
  CTX_CHECK(eps > 0, source, ": field 'posenc.eps' must be > 0, got ", eps);
  return std::make_unique<Fire>(cfg, (int64_t)width, init_c, init_L, eps);
}

// Registered when the program (or the plugin) is loaded.
const PosencRegistrar kFire("fire-example", make_fire);

}  // namespace
