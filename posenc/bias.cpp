// posenc/bias.cpp — additive causal biases (POSENC_SPEC §3): `alibi`, `kerple` (log / power),
// `sandwich` and `t5`. One mechanism serves all four: each encoding gives a per-head table over
// the distances of the call (0..n-1, or the distinct p_i - p_j of explicit positions, POSENC_SPEC
// §7.3: [H, n], a Variable, trainable or not), and distance_bias()
// gathers it by the distance index of every (i, j) with index_select, so trainable tables get
// their scatter-add backward for free. In the common case (no explicit positions, no sinks) the
// table itself is the score term (RelTerms::dist_bias): the fused attention reads it in its tiles
// where the backend can (CUDA's tensor-core kernels), else it is gathered the same way.
#include <algorithm>
#include <cmath>

#include "core/device_table.h"  // device_table
#include "core/rng.h"
#include "core/step_graph.h"  // recorded_choice
#include "posenc/posenc.h"

namespace ctx {

// Causal T5 bucket of a distance n >= 0 (float32 logf, truncation; POSENC_SPEC §3).
int64_t posenc_t5_bucket(int64_t n, int64_t num_buckets, int64_t max_distance) {
  const int64_t me = num_buckets / 2;
  if (n < me) return n;
  const float v = std::log((float)n / (float)me) / std::log((float)max_distance / (float)me) *
                  (float)(num_buckets - me);
  return std::min(num_buckets - 1, me + (int64_t)v);
}

// ALiBi slopes (float32): 2^(-8 h1 / H), non-powers of two interleaved as the paper's code.
std::vector<float> posenc_alibi_slopes(int64_t H) {
  auto pow2 = [](int64_t n) {
    std::vector<float> s;
    for (int64_t h1 = 1; h1 <= n; ++h1) s.push_back(std::pow(2.0f, (float)(-8 * h1) / (float)n));
    return s;
  };
  if ((H & (H - 1)) == 0) return pow2(H);
  int64_t c = 1;
  while (c * 2 <= H) c *= 2;
  std::vector<float> s = pow2(c), s2 = pow2(2 * c);
  for (int64_t i = 0; (int64_t)s.size() < H; i += 2) s.push_back(s2[(size_t)i]);
  return s;
}

namespace {

// The distances of one call: `values` (ascending) and, for every (row, i, j), the index of its
// distance max(r, 0) in them ([rows * T * S]). r = q_pos0 + i - j, a sink key beyond the window
// at its cache distance (sink_distance); with explicit positions (POSENC_SPEC §7.3) r = p_i - p_j
// per batch row and `values` the distinct distances that occur (never a table up to 2^24).
// Masked entries j > i read distance 0; the causal mask removes them.
struct Distances {
  std::vector<int64_t> values, index;
  int64_t rows = 1;
};

Distances distances(const AttnState& st) {
  Distances d;
  d.rows = position_rows(st);
  d.index.resize((size_t)(d.rows * st.T * st.S));
  for (int64_t b = 0; b < d.rows; ++b)
    for (int64_t i = 0; i < st.T; ++i)
      for (int64_t j = 0; j < st.S; ++j) {
        const int64_t r = st.positions ? query_position(st, b, i) - key_position(st, b, j)
                                       : sink_distance(st, st.q_pos0 + i, j);
        d.index[(size_t)((b * st.T + i) * st.S + j)] = std::max<int64_t>(r, 0);
      }
  if (!st.positions) {  // contiguous: values 0 .. q_pos0 + T - 1, the index is the distance itself
    d.values.resize((size_t)std::max<int64_t>(st.q_pos0 + st.T, 1));
    for (size_t t = 0; t < d.values.size(); ++t) d.values[t] = (int64_t)t;
    return d;
  }
  d.values = d.index;
  std::sort(d.values.begin(), d.values.end());
  d.values.erase(std::unique(d.values.begin(), d.values.end()), d.values.end());
  for (int64_t& x : d.index) x = std::lower_bound(d.values.begin(), d.values.end(), x) - d.values.begin();
  return d;
}

// B[b, h, i, j] = table[h, index(b, i, j)]: [rows, H, T, S] from table [H, values.size()]
Variable distance_bias(const Variable& table, const AttnState& st, const Distances& d) {
  const int64_t H = table.size(0);
  Tensor idx = Tensor::empty({(int64_t)d.index.size()}, DType::I64);
  std::copy(d.index.begin(), d.index.end(), idx.host<int64_t>());
  Variable g = index_select(table, 1, device_table(idx, table.data()));  // [H, rows * T * S]
  if (d.rows == 1) return reshape(g, {1, H, st.T, st.S});
  return permute(reshape(g, {H, d.rows, st.T, st.S}), {1, 0, 2, 3});
}

// A constant [H, n] table (double values) in the model's dtype and device.
Variable const_table(const std::vector<double>& v, int64_t H, int64_t n, const Variable& like) {
  Tensor t = Tensor::empty({H, n}, DType::F64);
  std::copy(v.begin(), v.end(), t.host<double>());
  if (like.dtype() != DType::F64) t = t.to(like.dtype());
  return Variable(device_table(t, like.data()), false);
}

// Base of the four: bias(st) = distance_bias(table(distances, st), st); fixed tables are cached
// per (distances, dtype, device) since every layer of a forward asks for the same one.
class DistanceBias : public PositionalEncoding {
 public:
  explicit DistanceBias(const ModelConfig& c) : H_(c.n_heads), d_(c.head_dim()) {}
  // default logits + bias [1, H, T, S] (distance_bias): the fused attention takes it as is
  bool fused_attention_ok(const AttnState&) const override { return true; }
  bool sinks_ok() const override { return true; }  // B at the sink's cache distance (distance_bias)
  bool explicit_positions_ok() const override { return true; }  // delta = p_i - p_j (§7.3)
  Variable bias(AttnState& st) override {
    const Distances d = distances(st);
    return distance_bias(table_of(d.values, st), st, d);
  }
  // The common case (queries at q_pos0 = S - T against keys 0.., no explicit positions, no
  // sinks): the distance of (i, j) is q_pos0 + i - j, so the table over the distances 0 .. S - 1
  // itself is the term (RelTerms::dist_bias), which the fused attention reads in its tiles
  // (the CUDA tensor-core kernels; other kernels expand it, core/attention_dist_bias.h) and
  // relative_logits gathers as distance_bias() would. Otherwise bias(st) as [rows, H, T, S].
  ScoreTerms terms(AttnState& st) override {
    if (st.positions || st.sinks > 0 || st.k_pos0 != 0 || st.q_pos0 != st.S - st.T || st.S < 1)
      return PositionalEncoding::terms(st);
    std::vector<int64_t> values((size_t)st.S);
    for (int64_t r = 0; r < st.S; ++r) values[(size_t)r] = r;
    ScoreTerms t;
    t.q = st.q;
    t.scale = st.scale;
    t.rel.dist_bias = table_of(values, st);  // [H, S]
    t.rel.dist_bias_constant = fixed();       // the kept table of a fixed encoding: its gather may be kept too
    return t;
  }

 protected:
  virtual bool fixed() const { return true; }
  // [H, n]: the bias of each head at the distances dist[0..n-1].
  virtual Variable table(const std::vector<int64_t>& dist, const AttnState& st) = 0;
  int64_t H_, d_;

 private:
  // table(values, st), cached for the fixed tables
  Variable table_of(const std::vector<int64_t>& values, const AttnState& st) {
    if (!fixed()) return table(values, st);
    if (!cache_.defined() || cache_values_ != values || cache_.dtype() != st.q.dtype() ||
        cache_.device() != st.q.device()) {
      cache_ = table(values, st);
      cache_values_ = values;
    }
    return cache_;
  }
  Variable cache_;
  std::vector<int64_t> cache_values_;
};

// alibi: B = -m_h * delta
class Alibi final : public DistanceBias {
 public:
  using DistanceBias::DistanceBias;
  std::string type() const override { return "alibi"; }
  Variable table(const std::vector<int64_t>& dist, const AttnState& st) override {
    const int64_t n = (int64_t)dist.size();
    std::vector<float> m = posenc_alibi_slopes(H_);
    std::vector<double> v((size_t)(H_ * n));
    for (int64_t h = 0; h < H_; ++h)
      for (int64_t t = 0; t < n; ++t) v[(size_t)(h * n + t)] = -(double)m[(size_t)h] * (double)dist[(size_t)t];
    return const_table(v, H_, n, st.q);
  }
};

// sandwich: B = (sum_{k=1..d/2} cos(delta w_k) - d/2) * H / (8 h1), w_k = 1 / powf(10000, 2k/d)
class Sandwich final : public DistanceBias {
 public:
  using DistanceBias::DistanceBias;
  std::string type() const override { return "sandwich"; }
  Variable table(const std::vector<int64_t>& dist, const AttnState& st) override {
    const int64_t n = (int64_t)dist.size();
    std::vector<float> w;
    for (int64_t k = 1; k <= d_ / 2; ++k) w.push_back(1.0f / std::pow(10000.0f, (float)(2 * k) / (float)d_));
    std::vector<double> per(n);
    for (int64_t t = 0; t < n; ++t) {
      double s = 0;
      for (float wk : w) s += std::cos((double)((float)dist[(size_t)t] * wk));
      per[(size_t)t] = s - (double)d_ / 2;
    }
    std::vector<double> v((size_t)(H_ * n));
    for (int64_t h = 0; h < H_; ++h)
      for (int64_t t = 0; t < n; ++t) v[(size_t)(h * n + t)] = per[(size_t)t] * ((double)H_ / (8.0 * (double)(h + 1)));
    return const_table(v, H_, n, st.q);
  }
};

// t5: B[h, i, j] = W[b(i - j), h], W = pe.rel_bias.weight [num_buckets, H]
class T5 final : public DistanceBias {
 public:
  T5(const ModelConfig& c, int64_t nb, int64_t md) : DistanceBias(c), nb_(nb), md_(md) {
    mod_ = std::make_shared<nn::Module>();
    w_ = mod_->register_parameter("rel_bias.weight", Tensor::zeros({nb_, H_}));
  }
  std::string type() const override { return "t5"; }
  std::shared_ptr<nn::Module> shared_module() override { return mod_; }
  void init_parameters(Rng& rng) override { rng.fill_normal(w_.data(), 0.0, 0.02); }
  bool fixed() const override { return false; }
  Variable table(const std::vector<int64_t>& dist, const AttnState&) override {
    const int64_t n = (int64_t)dist.size();
    Tensor b = Tensor::empty({n}, DType::I64);
    for (int64_t t = 0; t < n; ++t) b.host<int64_t>()[t] = posenc_t5_bucket(dist[(size_t)t], nb_, md_);
    return transpose(index_select(w_, 0, device_table(b, w_.data())), 0, 1);  // [n, H] -> [H, n]
  }

 private:
  int64_t nb_, md_;
  std::shared_ptr<nn::Module> mod_;
  Variable w_;
};

// kerple: log B = -r1 ln(1 + r2 delta); power B = -r1 delta^r2 (d/dr2 = 0 at delta = 0).
// r1, r2 = pe.r1, pe.r2 [H]; projected in place (clamped) before each forward.
class Kerple final : public DistanceBias {
 public:
  Kerple(const ModelConfig& c, bool power) : DistanceBias(c), power_(power) {
    mod_ = std::make_shared<nn::Module>();
    r1_ = mod_->register_parameter("r1", Tensor::zeros({H_}));
    r2_ = mod_->register_parameter("r2", Tensor::zeros({H_}));
    // the projection's check on a device reads their host-side bounds (project, below)
    r1_.impl()->wants_value_bound = true;
    r2_.impl()->wants_value_bound = true;
  }
  std::string type() const override { return "kerple"; }
  std::shared_ptr<nn::Module> shared_module() override { return mod_; }
  void init_parameters(Rng& rng) override {
    rng.fill_uniform(r1_.data(), 0.0, power_ ? 1.0 : 2.0);
    rng.fill_uniform(r2_.data(), 0.0, power_ ? 2.0 : 1.0);
  }
  bool fixed() const override { return false; }

  // In place, like the reference code's param.data.clamp_ (idempotent; every layer calls it).
  // A tensor already inside its bounds is not written: a write (a mutable access) drops the kept
  // bf16 copies of the whole storage, which is the optimizer's flat buffer of every parameter, and
  // every layer's Linear would convert it again (docs/performance.md). The CPU reads the values;
  // a device asks the parameter's host-side bound (VarImpl::value_bound, kept through AdamW's
  // updates: train/value_bounds.h) and clamps where the bound does not show every value inside
  // (no copy either way; the choice is checked again before a CUDA Graph replays it).
  void project() {
    clamp(r1_, 0.01, INFINITY);
    clamp(r2_, 0.01, power_ ? 2.0 : INFINITY);
  }
  static bool bound_inside(const VarImpl& v, double lo, double hi) {
    const ValueBound* b = known_value_bound(v);
    return b && b->lo >= lo && b->hi <= hi;
  }
  static void clamp(Variable& p, double lo, double hi) {
    Tensor& t = p.data();
    if (t.device() == Device::CPU) {
      const Tensor& c = t;  // read without a mutable access
      auto inside = [&](auto* v) {
        for (int64_t i = 0; i < c.numel(); ++i)
          if (!(v[i] >= lo && v[i] <= hi)) return false;  // (NaN: outside)
        return true;
      };
      if (c.dtype() == DType::F32 ? inside(c.data<float>()) : inside(c.data<double>())) return;
    } else {
      const VarPtr& v = p.impl();
      if (recorded_choice([v, lo, hi] { return bound_inside(*v, lo, hi); })) return;
    }
    backend_of(t).unary(UnaryOp::Clamp, t, t, lo, hi);
  }

  Variable table(const std::vector<int64_t>& dist, const AttnState& st) override {
    const int64_t n = (int64_t)dist.size();
    project();
    const DType dt = r1_.dtype();
    Variable r1 = reshape(r1_, {H_, 1}), r2 = reshape(r2_, {H_, 1});
    Tensor dl = Tensor::empty({1, n}, DType::F64);
    if (!power_) {  // -r1 * ln(1 + r2 * delta)
      for (int64_t t = 0; t < n; ++t) dl.host<double>()[t] = (double)dist[(size_t)t];
      Variable delta(to_like(dl, dt, st), false);
      return neg(mul(r1, log(add_scalar(mul(r2, delta), 1.0))));
    }
    // -r1 * [delta > 0] * exp(r2 * ln(delta)), with ln(0) read as 0 so nothing is NaN
    Tensor keep = Tensor::empty({1, n}, DType::F64);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t x = dist[(size_t)t];
      dl.host<double>()[t] = x > 0 ? std::log((double)x) : 0.0;
      keep.host<double>()[t] = x > 0 ? 1.0 : 0.0;
    }
    Variable lnd(to_like(dl, dt, st), false), k(to_like(keep, dt, st), false);
    return neg(mul(r1, mul(exp(mul(r2, lnd)), k)));
  }

 private:
  static Tensor to_like(Tensor t, DType dt, const AttnState& st) {
    if (dt != DType::F64) t = t.to(dt);
    return device_table(t, st.q.data());
  }
  bool power_;
  std::shared_ptr<nn::Module> mod_;
  Variable r1_, r2_;
};

std::unique_ptr<PositionalEncoding> make_alibi(const ModelConfig& c, const nlohmann::json& p,
                                               const std::string& src) {
  posenc_check_keys(p, {}, src);
  return std::make_unique<Alibi>(c);
}

std::unique_ptr<PositionalEncoding> make_sandwich(const ModelConfig& c, const nlohmann::json& p,
                                                  const std::string& src) {
  posenc_check_keys(p, {}, src);
  CTX_CHECK(c.head_dim() % 2 == 0, src, ": posenc sandwich needs an even head_dim (d_model / n_heads = ",
            c.head_dim(), ")");
  return std::make_unique<Sandwich>(c);
}

std::unique_ptr<PositionalEncoding> make_kerple(const ModelConfig& c, const nlohmann::json& p,
                                                const std::string& src) {
  posenc_check_keys(p, {"variant"}, src);
  std::string v = posenc_string(p, "variant", "log", src);
  CTX_CHECK(v == "log" || v == "power", src, ": field 'posenc.variant' must be \"log\" or \"power\", got \"",
            v, "\"");
  return std::make_unique<Kerple>(c, v == "power");
}

int64_t t5_int(const nlohmann::json& p, const char* key, int64_t def, const std::string& src) {
  if (!p.contains(key)) return def;
  const auto& v = p[key];
  CTX_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, src, ": field 'posenc.", key,
            "' must be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

std::unique_ptr<PositionalEncoding> make_t5(const ModelConfig& c, const nlohmann::json& p,
                                            const std::string& src) {
  posenc_check_keys(p, {"num_buckets", "max_distance"}, src);
  int64_t nb = t5_int(p, "num_buckets", 32, src), md = t5_int(p, "max_distance", 128, src);
  CTX_CHECK(nb % 2 == 0 && nb >= 2, src, ": field 'posenc.num_buckets' must be an even positive integer, got ", nb);
  CTX_CHECK(md > nb / 2, src, ": field 'posenc.max_distance' must exceed num_buckets / 2 = ", nb / 2, ", got ", md);
  return std::make_unique<T5>(c, nb, md);
}

}  // namespace

// Registered by name as the library loads (posenc/registry.cpp; executables link the whole library).
static PosencRegistrar r1("alibi", make_alibi);
static PosencRegistrar r2("kerple", make_kerple);
static PosencRegistrar r3("sandwich", make_sandwich);
static PosencRegistrar r4("t5", make_t5);

}  // namespace ctx
