// posenc/fire.cpp — `fire` (POSENC_SPEC §7.1): FIRE, Li et al. 2023, a learned bias
// B[h, i, j] = f(psi(i - j) / (psi(max(thr, i)) + eps))_h, f a Linear(1, W) -> ReLU -> Linear(W, H).
// One FIRE module per attention layer (`blocks.{l}.attn.pe.*`), or one for the model (`pe.*`)
// with "shared": true. The bias is one node (fire_bias, autograd/ops_posenc2024.h).
// When every query of a call sits below thr, max(thr, i) = thr and B depends on (h, i - j) alone:
// terms() then hands the attention a per-head distance table (RelTerms::dist_bias, the same node
// evaluated on the S distances) instead of the [1, H, T, S] bias (FastPath::FireTable). On a
// device the decision reads no value: it takes L_multiplier's host-side bound (VarImpl::value_bound,
// kept through AdamW's updates by train/value_bounds.h) and keeps the per-pair bias where the
// bound cannot tell.
#include <algorithm>
#include <cmath>

#include "autograd/ops_posenc2024.h"
#include "core/device_table.h"
#include "core/fast_paths.h"
#include "core/rng.h"
#include "core/step_graph.h"
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
    lm.impl()->wants_value_bound = true;  // thr's decision on a device reads its bound (distance_table_applies)
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

// Positions [R, n] in like's dtype, on its device (a constant table): position(r, t).
template <class At>
Tensor positions_of(int64_t R, int64_t n, const Tensor& like, At position) {
  Tensor h = Tensor::empty({R, n}, DType::F64);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t t = 0; t < n; ++t) h.host<double>()[r * n + t] = (double)position(r, t);
  return device_table(like.dtype() == DType::F64 ? h : h.to(like.dtype()), like);
}
// The queries' (keys = false) or the keys' positions of each position row of the call
// (query_position / key_position): [R, n].
Tensor position_table(const AttnState& st, int64_t n, bool keys, const Tensor& like) {
  return positions_of(position_rows(st), n, like, [&](int64_t r, int64_t t) {
    return keys ? key_position(st, r, t) : query_position(st, r, t);
  });
}

// Whether query position p is strictly below thr = |lm init_L| as the distance kernel computes
// them (fire_formula.h, in lm's dtype F): then max(thr, p) = thr with the whole gradient to thr.
template <class F>
bool below_threshold(int64_t p, F lm, double init_L) {
  return (F)p < std::fabs(lm * (F)init_L);
}

// The same question for every lm of dtype F in a bound [lo, hi]: Yes for all of them, No for all,
// or Unknown. thr grows with |lm| (rounding is monotone), and an F value x >= lo is >= (F)lo (lo
// rounded either way), an x <= hi is <= (F)hi: the interval's smallest and largest |x| in F are
// bounded by the rounded ends.
enum class Below { Yes, No, Unknown };
template <class F>
Below below_threshold_for(int64_t p, double lo, double hi, double init_L) {
  const F flo = (F)lo, fhi = (F)hi;
  const F smallest = lo > 0 ? flo : hi < 0 ? (F)std::fabs(fhi) : F(0);
  const F largest = std::max((F)std::fabs(flo), (F)std::fabs(fhi));
  if (below_threshold(p, smallest, init_L)) return Below::Yes;
  if (!below_threshold(p, largest, init_L)) return Below::No;
  return Below::Unknown;
}
Below below_threshold_for(int64_t p, const VarImpl& lm, double init_L) {
  const ValueBound* b = known_value_bound(lm);
  if (!b) return Below::Unknown;
  return lm.data.dtype() == DType::F64 ? below_threshold_for<double>(p, b->lo, b->hi, init_L)
                                       : below_threshold_for<float>(p, b->lo, b->hi, init_L);
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
    const FireModule& m = module(st);
    const Tensor& like = m.c.data();
    return fire_bias(m.c, m.lm, m.fc1->weight, m.fc1->bias, m.fc2->weight, m.fc2->bias,
                     position_table(st, st.T, false, like), position_table(st, st.S, true, like), s_.init_L, s_.eps);
  }
  // Where distance_table_applies(st): the table [H, S] as the call's only term (the attention
  // reads table[h, i + (S - T) - j], core/backend.h AttnRel::dist_bias); else bias(st).
  ScoreTerms terms(AttnState& st) override {
    if (!distance_table_applies(st)) return PositionalEncoding::terms(st);
    ScoreTerms t;
    t.q = st.q;
    t.scale = st.scale;
    t.rel.dist_bias = distance_table(st);
    return t;
  }

 private:
  const FireModule& module(const AttnState& st) const { return mods_.at(s_.shared ? 0 : st.layer); }

  // The distance-table case: the layout AttnRel::dist_bias assumes (queries at q_pos0 = S - T
  // against keys 0..S-1, no explicit positions; FIRE refuses sinks), the switch on, and every
  // query position, the largest being S - 1, strictly below thr (at a tie the max splits its
  // gradient, which a function of i - j alone cannot carry). Where lm is not on the host, the
  // decision is its host-side bound's (no copy), frozen in a CUDA Graph recording with a check
  // that it still holds (recorded_choice); where the bound cannot tell, the per-pair bias,
  // or with the switch set to 1 the value itself (one device -> host copy).
  bool distance_table_applies(const AttnState& st) const {
    if (st.positions || st.sinks > 0 || st.k_pos0 != 0 || st.q_pos0 != st.S - st.T || st.S < 1) return false;
    if (!fast_path_enabled(FastPath::FireTable)) return false;
    const Tensor& lm = module(st).lm.data();
    const int64_t p = st.S - 1;
    if (!host_readable(lm)) {
      const VarPtr& v = module(st).lm.impl();
      const Below b = recorded_choice([v, p, init_L = s_.init_L] { return below_threshold_for(p, *v, init_L); });
      if (b != Below::Unknown) return b == Below::Yes;
      if (!fast_path_forced_on(FastPath::FireTable)) return false;
    }
    const Tensor h = host_values(lm);  // no copy where host_readable, else one
    return h.dtype() == DType::F64 ? below_threshold(p, h.data<double>()[0], s_.init_L)
                                   : below_threshold(p, h.data<float>()[0], s_.init_L);
  }
  // table [H, S]: table[h, r] = f(psi(r) / (psi(thr) + eps))_h, fire_bias itself on one query at
  // position S - 1 (below thr: max(thr, S - 1) = thr, the normaliser of every query of the call)
  // against keys at S - 1 - r, so that u = r exactly and the operation order is the per-pair one.
  Variable distance_table(const AttnState& st) const {
    const FireModule& m = module(st);
    const Tensor& like = m.c.data();
    const int64_t S = st.S;
    const Tensor pq = positions_of(1, 1, like, [&](int64_t, int64_t) { return S - 1; });
    const Tensor pk = positions_of(1, S, like, [&](int64_t, int64_t r) { return S - 1 - r; });
    const Variable b = fire_bias(m.c, m.lm, m.fc1->weight, m.fc1->bias, m.fc2->weight, m.fc2->bias, pq, pk,
                                 s_.init_L, s_.eps);  // [1, H, 1, S]
    return reshape(b, {b.size(1), S});
  }

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
