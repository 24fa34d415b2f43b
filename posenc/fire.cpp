// posenc/fire.cpp — `fire` (POSENC_SPEC §7.1): FIRE, Li et al. 2023, a learned bias
// B[h, i, j] = f(psi(i - j) / (psi(max(thr, i)) + eps))_h, f a Linear(1, W) -> ReLU -> Linear(W, H).
// One FIRE module per attention layer (`blocks.{l}.attn.pe.*`), or one for the model (`pe.*`)
// with "shared": true. The bias is one node (fire_bias, autograd/ops_posenc2024.h).
#include <cmath>

#include "autograd/ops_posenc2024.h"
#include "core/device_table.h"
#include "core/rng.h"
#include "nn/layers.h"
#include "posenc/posenc.h"

namespace ctx {
namespace {

struct FireSpec {
  int64_t width = 32;
  double init_c = 0.1, init_L = 512, eps = 1e-6;
  bool shared = false;
};

// One FIRE module: c [1], L_multiplier [1], mlp.fc1 (1 -> W), mlp.fc2 (W -> H).
struct FireModule {
  FireModule(int64_t W, int64_t H) : mod(std::make_shared<nn::Module>()) {
    c = mod->register_parameter("c", Tensor::zeros({1}));
    lm = mod->register_parameter("L_multiplier", Tensor::zeros({1}));
    auto mlp = std::make_shared<nn::Module>();
    fc1 = mlp->register_module("fc1", std::make_shared<nn::Linear>(1, W));
    fc2 = mlp->register_module("fc2", std::make_shared<nn::Linear>(W, H));
    mod->register_module("mlp", mlp);
  }
  // c = init_c, L_multiplier = 1, both Linears as torch.nn.Linear: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  void init(Rng& rng, double init_c) {
    backend_of(c.data()).fill(c.data(), init_c);
    backend_of(lm.data()).fill(lm.data(), 1.0);
    for (auto* fc : {fc1.get(), fc2.get()}) {
      const double k = 1.0 / std::sqrt((double)fc->weight.size(1));
      rng.fill_uniform(fc->weight.data(), -k, k);
      rng.fill_uniform(fc->bias.data(), -k, k);
    }
  }
  std::shared_ptr<nn::Module> mod;
  Variable c, lm;
  std::shared_ptr<nn::Linear> fc1, fc2;
};

// Positions [R, n] of the call in like's dtype, on its device (a constant table): the queries'
// (keys = false) or the keys' positions of each position row (query_position / key_position).
Tensor position_table(const AttnState& st, int64_t n, bool keys, const Tensor& like) {
  const int64_t R = position_rows(st);
  Tensor h = Tensor::empty({R, n}, DType::F64);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < n; ++t)
      h.host<double>()[r * n + t] = (double)(keys ? key_position(st, r, t) : query_position(st, r, t));
  return device_table(like.dtype() == DType::F64 ? h : h.to(like.dtype()), like);
}

class Fire final : public PositionalEncoding {
 public:
  Fire(const ModelConfig& cfg, const FireSpec& s) : s_(s) {
    for (int l = 0; l < (s.shared ? 1 : cfg.n_layers); ++l) mods_.emplace_back(s.width, cfg.n_heads);
  }
  std::string type() const override { return "fire"; }
  std::shared_ptr<nn::Module> shared_module() override { return s_.shared ? mods_[0].mod : nullptr; }
  std::shared_ptr<nn::Module> layer_module(int l) override { return s_.shared ? nullptr : mods_.at(l).mod; }
  void init_parameters(Rng& rng) override {
    for (auto& m : mods_) m.init(rng, s_.init_c);
  }
  // default logits + a [1, H, T, S] bias: the fused attention takes it as is
  bool fused_attention_ok(const AttnState&) const override { return true; }

  bool explicit_positions_ok() const override { return true; }  // i, j = p_i, p_j (§7.3)

  // [R, H, T, S]: query i at q_pos0 + i, key j at j (R = 1), or at explicit positions (R rows)
  Variable bias(AttnState& st) override {
    const FireModule& m = mods_.at(s_.shared ? 0 : st.layer);
    const Tensor& like = m.c.data();
    return fire_bias(m.c, m.lm, m.fc1->weight, m.fc1->bias, m.fc2->weight, m.fc2->bias,
                     position_table(st, st.T, false, like), position_table(st, st.S, true, like), s_.init_L, s_.eps);
  }

 private:
  FireSpec s_;
  std::vector<FireModule> mods_;
};

// posenc {"type": "fire", "mlp_width": 32, "init_c": 0.1, "init_L": 512, "eps": 1e-6, "shared": false}
std::unique_ptr<PositionalEncoding> make_fire(const ModelConfig& cfg, const nlohmann::json& p,
                                              const std::string& source) {
  posenc_check_keys(p, {"mlp_width", "init_c", "init_L", "eps", "shared"}, source);
  FireSpec s;
  s.width = posenc_int(p, "mlp_width", 32, 1, source, "fire");
  s.init_c = posenc_number(p, "init_c", 0.1, source);
  s.init_L = posenc_number(p, "init_L", 512, source);
  s.eps = posenc_number(p, "eps", 1e-6, source);
  for (auto [key, v] : {std::pair<const char*, double>{"init_c", s.init_c}, {"init_L", s.init_L}, {"eps", s.eps}})
    CTX_CHECK(v > 0, source, ": field 'posenc.", key, "' of posenc type 'fire' must be a number > 0, got ",
              p[key].dump());
  s.shared = posenc_bool(p, "shared", false, source);
  return std::make_unique<Fire>(cfg, s);
}

const PosencRegistrar kFire("fire", make_fire);

}  // namespace
}  // namespace ctx
