// posenc/rotary.cpp — the rotary family (POSENC_SPEC §2): `rope` (half / interleaved pairing,
// context-extension scaling pi, ntk, dynamic-ntk, yarn, llama3, longrope, rerope, leaky-rerope,
// self-extend, log_n; attention sinks, §6) and `xpos`.
// Frequencies and scales are float32 in the spec's operation order; each angle is the float32
// product float(t) * theta_k whose cos / sin are taken in double and then converted to the
// model dtype (ReRoPE's relative angles are double, as torch_ref). The rotation itself is the
// fused differentiable op rope_rotate (autograd/ops_rope.h); the scalings that select between two
// rotations per (i, j) (rerope, leaky-rerope, self-extend, and sinks) share FarBranch.
#include <cmath>
#include <functional>
#include <optional>
#include <utility>

#include "autograd/ops_rope.h"
#include "core/device_table.h"  // device_table
#include "posenc/posenc.h"

namespace ctx {
namespace {

// ---- parameter validation helpers ----
void require_even_head_dim(const ModelConfig& c, const char* type, const std::string& src) {
  CTX_CHECK(c.head_dim() % 2 == 0, src, ": posenc ", type, " needs an even head_dim (d_model / n_heads = ",
            c.head_dim(), ")");
}

bool is_integral(const nlohmann::json& v) {
  return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
}

// A positive number at p[key] (default def), error naming posenc.<path>.
double positive_number(const nlohmann::json& p, const char* key, double def, const std::string& path,
                       const std::string& src, double min_exclusive = 0.0) {
  if (!p.contains(key) || p[key].is_null()) return def;
  const nlohmann::json& v = p[key];
  CTX_CHECK(v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > min_exclusive, src,
            ": field 'posenc.", path, key, "' must be a number > ", min_exclusive, ", got ", v.dump());
  return v.get<double>();
}

int64_t positive_int(const nlohmann::json& p, const char* key, int64_t def, const std::string& path,
                     const std::string& src) {
  if (!p.contains(key) || p[key].is_null()) return def;
  const nlohmann::json& v = p[key];
  CTX_CHECK(v.is_number() && is_integral(v) && v.get<double>() >= 1, src, ": field 'posenc.", path, key,
            "' must be a positive integer, got ", v.dump());
  return (int64_t)v.get<double>();
}

// theta_k = 1 / powf(base, (2k)/d), k = 0..d/2-1 (float32)
std::vector<float> inv_freqs(float base, int64_t d) {
  std::vector<float> th((size_t)(d / 2));
  for (int64_t k = 0; k < d / 2; ++k) th[(size_t)k] = 1.0f / std::pow(base, (float)(2 * k) / (float)d);
  return th;
}

// cos / sin tables [rows, d/2] of double angles, each multiplied by mul[row * h + k] (or m when
// mul is empty), converted to like's dtype and device.
std::pair<Tensor, Tensor> trig_tables(const std::vector<double>& ang, int64_t rows, int64_t h,
                                      const std::vector<double>& mul, double m, const Variable& like) {
  Tensor C = Tensor::empty({rows, h}, DType::F64), S = Tensor::empty({rows, h}, DType::F64);
  double* c = C.host<double>();
  double* s = S.host<double>();
  for (int64_t i = 0; i < rows * h; ++i) {
    const double f = mul.empty() ? m : mul[(size_t)i];
    c[i] = std::cos(ang[(size_t)i]) * f;
    s[i] = std::sin(ang[(size_t)i]) * f;
  }
  if (like.dtype() != DType::F64) C = C.to(like.dtype()), S = S.to(like.dtype());
  return {device_table(C, like.data()), device_table(S, like.data())};
}

// float32 angles float(pos[t]) * theta_k as doubles: [rows, d/2]
std::vector<double> f32_angles_at(const int64_t* pos, int64_t rows, const std::vector<float>& theta) {
  const int64_t h = (int64_t)theta.size();
  std::vector<double> a((size_t)(rows * h));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t k = 0; k < h; ++k) a[(size_t)(t * h + k)] = (double)((float)pos[t] * theta[(size_t)k]);
  return a;
}
// ... at the contiguous positions pos0, pos0 + 1, ..
std::vector<double> f32_angles(int64_t pos0, int64_t rows, const std::vector<float>& theta) {
  std::vector<int64_t> pos((size_t)rows);
  for (int64_t t = 0; t < rows; ++t) pos[(size_t)t] = pos0 + t;
  return f32_angles_at(pos.data(), rows, theta);
}

// ---- rope ----
struct Scaling {
  std::string type;  // empty: no scaling
  double factor = 1.0;
  int64_t L = 0;       // original_context
  int64_t window = 0;  // rerope / leaky-rerope / self-extend
  double beta_fast = 32.0, beta_slow = 1.0;
  bool has_attention_factor = false;
  double attention_factor = 1.0;
  bool log_n = false;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  std::vector<float> short_factor, long_factor;          // longrope, d/2 each
  int64_t group = 0;                                     // self-extend
};

const std::vector<std::string> kScalingKeys = {
    "type",      "factor",           "original_context", "window",          "beta_fast",
    "beta_slow", "attention_factor", "log_n",            "low_freq_factor", "high_freq_factor",
    "short_factor", "long_factor", "group"};
const char* kScalingTypes = "pi, ntk, dynamic-ntk, yarn, rerope, leaky-rerope, llama3, longrope, self-extend";

// The keys a type accepts: llama3, longrope and self-extend exactly those of their bullet
// (POSENC_SPEC §2); the older types the whole list (keys they do not use are ignored).
std::vector<std::string> scaling_keys(const std::string& type) {
  if (type == "llama3") return {"type", "factor", "low_freq_factor", "high_freq_factor", "original_context"};
  if (type == "longrope")
    return {"type", "short_factor", "long_factor", "factor", "attention_factor", "original_context"};
  if (type == "self-extend") return {"type", "window", "group", "original_context"};
  return kScalingKeys;
}

void check_scaling_keys(const nlohmann::json& sc, const std::string& type, const std::string& src) {
  const std::vector<std::string> keys = scaling_keys(type);
  std::string names;
  for (auto& k : keys) names += (names.empty() ? "" : ", ") + k;
  for (auto& kv : sc.items()) {
    bool ok = false;
    for (auto& k : keys) ok = ok || k == kv.key();
    CTX_CHECK(ok, src, ": unknown key 'posenc.scaling.", kv.key(), "' for scaling type '", type,
              "' (valid keys: ", names, ")");
  }
}

// A longrope list at sc[key]: exactly d/2 finite numbers > 0 (float32).
std::vector<float> factor_list(const nlohmann::json& sc, const char* key, int64_t d, const std::string& src) {
  CTX_CHECK(sc.contains(key) && sc[key].is_array(), src, ": field 'posenc.scaling.", key,
            "' of scaling type 'longrope' must be a list of head_dim/2 = ", d / 2, " numbers > 0",
            sc.contains(key) ? ", got " + sc[key].dump() : std::string(" (missing)"));
  const nlohmann::json& a = sc[key];
  CTX_CHECK((int64_t)a.size() == d / 2, src, ": field 'posenc.scaling.", key, "' must hold head_dim/2 = ", d / 2,
            " numbers, got ", a.size());
  std::vector<float> v;
  for (size_t k = 0; k < a.size(); ++k) {
    CTX_CHECK(a[k].is_number() && std::isfinite(a[k].get<double>()) && a[k].get<double>() > 0, src,
              ": field 'posenc.scaling.", key, "[", k, "]' must be a finite number > 0, got ", a[k].dump());
    v.push_back((float)a[k].get<double>());
  }
  return v;
}

// The keys of llama3 / longrope / self-extend (POSENC_SPEC §2).
void parse_new_scalings(Scaling& s, const nlohmann::json& sc, const ModelConfig& c, const std::string& src) {
  if (s.type == "llama3") {
    CTX_CHECK(sc.contains("factor"), src, ": field 'posenc.scaling.factor' is required for scaling type 'llama3' "
              "(a number > 0, e.g. 8)");
    s.low_freq_factor = positive_number(sc, "low_freq_factor", 1.0, "scaling.", src);
    s.high_freq_factor = positive_number(sc, "high_freq_factor", 4.0, "scaling.", src);
    CTX_CHECK(s.high_freq_factor > s.low_freq_factor, src, ": field 'posenc.scaling.high_freq_factor' must be "
              "greater than low_freq_factor (", s.low_freq_factor, "), got ", s.high_freq_factor);
  } else if (s.type == "longrope") {
    s.short_factor = factor_list(sc, "short_factor", c.head_dim(), src);
    s.long_factor = factor_list(sc, "long_factor", c.head_dim(), src);
    s.factor = positive_number(sc, "factor", (double)c.context / (double)s.L, "scaling.", src);
    CTX_CHECK(s.has_attention_factor || s.factor <= 1 || s.L >= 2, src, ": field 'posenc.scaling.original_context' "
              "must be >= 2 for longrope's attention factor sqrt(1 + ln(factor) / ln(L)), got ", s.L);
  } else if (s.type == "self-extend") {
    CTX_CHECK(sc.contains("group"), src, ": field 'posenc.scaling.group' is required for scaling type "
              "'self-extend' (a positive integer, e.g. 4)");
    s.group = positive_int(sc, "group", 1, "scaling.", src);
  }
}

Scaling parse_scaling(const nlohmann::json& sc, const ModelConfig& c, const std::string& src) {
  Scaling s;
  if (sc.is_null()) return s;
  CTX_CHECK(sc.is_object(), src, ": field 'posenc.scaling' must be an object like {\"type\": \"yarn\", "
            "\"factor\": 4} (or null), got ", sc.dump());
  CTX_CHECK(sc.contains("type") && sc["type"].is_string(), src, ": field 'posenc.scaling.type' must be one of ",
            kScalingTypes, sc.contains("type") ? ", got " + sc["type"].dump() : std::string(" (missing)"));
  s.type = sc["type"].get<std::string>();
  const std::string types = std::string(", ") + kScalingTypes + ",";
  CTX_CHECK(types.find(", " + s.type + ",") != std::string::npos, src, ": field 'posenc.scaling.type' must be one of ",
            kScalingTypes, ", got \"", s.type, "\"");
  check_scaling_keys(sc, s.type, src);
  s.factor = positive_number(sc, "factor", s.type == "leaky-rerope" ? 16.0 : 1.0, "scaling.", src);
  s.L = positive_int(sc, "original_context", c.context, "scaling.", src);
  s.window = positive_int(sc, "window", s.L / 2, "scaling.", src);
  const bool windowed = s.type == "rerope" || s.type == "leaky-rerope" || s.type == "self-extend";
  CTX_CHECK(s.window >= 1 || !windowed, src, ": field 'posenc.scaling.window' defaults to original_context / 2 = 0; "
            "give a positive integer");
  s.beta_fast = positive_number(sc, "beta_fast", 32.0, "scaling.", src);
  s.beta_slow = positive_number(sc, "beta_slow", 1.0, "scaling.", src);
  if (sc.contains("attention_factor") && !sc["attention_factor"].is_null()) {
    const auto& v = sc["attention_factor"];
    CTX_CHECK(v.is_number() && std::isfinite(v.get<double>()), src,
              ": field 'posenc.scaling.attention_factor' must be a number, got ", v.dump());
    s.has_attention_factor = true;
    s.attention_factor = v.get<double>();
  }
  if (sc.contains("log_n")) {
    CTX_CHECK(sc["log_n"].is_boolean(), src, ": field 'posenc.scaling.log_n' must be true or false, got ",
              sc["log_n"].dump());
    s.log_n = sc["log_n"].get<bool>();
  }
  parse_new_scalings(s, sc, c, src);
  return s;
}

// The float32 frequency tables of the scalings whose theta' is per-k arithmetic on theta.
// llama3 (HF _compute_llama3_parameters): wavelength lambda_k = 2 pi / theta_k against
// lo = L / low_freq_factor and hi = L / high_freq_factor (float32).
std::vector<float> llama3_freqs(std::vector<float> th, const Scaling& sc) {
  const float s = (float)sc.factor, lf = (float)sc.low_freq_factor, hf = (float)sc.high_freq_factor;
  const float L = (float)sc.L, lo = L / lf, hi = L / hf, two_pi = (float)(2.0 * 3.14159265358979323846);
  for (auto& x : th) {
    const float lam = two_pi / x;
    if (lam > lo) {
      x = x / s;
    } else if (!(lam < hi)) {  // hi <= lambda <= lo: smooth blend
      const float sm = (L / lam - lf) / (hf - lf);
      x = ((1.0f - sm) * x) / s + sm * x;
    }
  }
  return th;
}

// longrope (HF _compute_longrope_parameters): theta_k' = 1 / (ext_k * powf(base, 2k/d)), ext the
// long list when the forward passes L (n > L), else the short one.
std::vector<float> longrope_freqs(float base, int64_t d, int64_t n, const Scaling& sc) {
  const std::vector<float>& ext = n > sc.L ? sc.long_factor : sc.short_factor;
  std::vector<float> th((size_t)(d / 2));
  for (int64_t k = 0; k < d / 2; ++k)
    th[(size_t)k] = 1.0f / (ext[(size_t)k] * std::pow(base, (float)(2 * k) / (float)d));
  return th;
}

// The second rotary branch of rerope, leaky-rerope, self-extend and attention sinks: where
// far(i, j) (absolute query i, key j) the logit is scale (R_{q_pos(i)} q_i . R_{k_pos(j)} k_j),
// elsewhere the ordinary scale (R_i q_i . R_j k_j). k_pos empty: k unrotated (rerope); k_near:
// k as the ordinary branch rotates it (sinks). f32: angles are the float32 products
// float(pos) * theta_k of every rope angle; otherwise double products (ReRoPE, as torch_ref).
struct FarBranch {
  std::function<double(int64_t)> q_pos, k_pos;
  std::function<bool(int64_t, int64_t)> far;
  bool k_near = false;
  bool f32 = true;
};

class Rope final : public PositionalEncoding {
 public:
  Rope(const ModelConfig& c, double base, RopePairing pairing, Scaling sc)
      : d_(c.head_dim()), base_(base), pairing_(pairing), sc_(std::move(sc)) {}
  std::string type() const override { return "rope"; }
  // two-branch scalings and sinks build their own logits
  bool fused_attention_ok(const AttnState& st) const override { return !far_branch(st); }
  // Sinks (POSENC_SPEC §6) with no scaling or one whose theta' and m do not depend on T.
  bool sinks_ok() const override {
    const std::string& t = sc_.type;
    return t.empty() || t == "pi" || t == "ntk" || t == "yarn" || t == "llama3";
  }
  // Explicit positions (POSENC_SPEC §7.3): angle float(p) theta_k' for the one-branch scalings.
  bool explicit_positions_ok() const override {
    const std::string& t = sc_.type;
    return t.empty() || t == "pi" || t == "ntk" || t == "dynamic-ntk" || t == "yarn" || t == "llama3" ||
           t == "longrope";
  }

  // theta_k' [d/2] (float32) for a forward whose largest position is n - 1, and the cos/sin
  // factor m (YaRN's and LongRoPE's attention factor; 1 otherwise).
  std::pair<std::vector<float>, double> freqs(int64_t n) const {
    const std::string& t = sc_.type;
    const float fb = (float)base_;
    if (t.empty() || t == "rerope" || t == "leaky-rerope" || t == "self-extend") return {inv_freqs(fb, d_), 1.0};
    const float s = (float)sc_.factor, ex = (float)d_ / (float)(d_ - 2);
    if (t == "pi") {
      auto th = inv_freqs(fb, d_);
      for (auto& x : th) x = x / s;
      return {th, 1.0};
    }
    if (t == "ntk") return {inv_freqs(fb * std::pow(s, ex), d_), 1.0};
    if (t == "dynamic-ntk") {
      float b = fb;
      if (n > sc_.L) b = b * std::pow(s * (float)n / (float)sc_.L - (s - 1.0f), ex);
      return {inv_freqs(b, d_), 1.0};
    }
    if (t == "llama3") return {llama3_freqs(inv_freqs(fb, d_), sc_), 1.0};
    if (t == "longrope") {
      const double m = sc_.has_attention_factor ? sc_.attention_factor
                       : sc_.factor > 1 ? std::sqrt(1.0 + std::log(sc_.factor) / std::log((double)sc_.L))
                                        : 1.0;
      return {longrope_freqs(fb, d_, n, sc_), m};
    }
    return yarn_freqs();
  }

  void rotate(AttnState& st) override {
    // q: [B, H, T, Dh], k: [B, H, S, Dh]; query t sits at position q_pos0 + t, key j at k_pos0 + j
    if (sc_.log_n) {  // q_i *= max(1, ln(i+1) / ln(L)) at query position i (float32 table [R, 1, T, 1])
      const int64_t R = position_rows(st);
      Tensor f = Tensor::empty(R == 1 ? Shape{st.T, 1} : Shape{R, 1, st.T, 1}, DType::F64);
      const float lnL = std::log((float)sc_.L);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t t = 0; t < st.T; ++t)
          f.host<double>()[r * st.T + t] =
              (double)std::max(1.0f, std::log((float)(query_position(st, r, t) + 1)) / lnL);
      Tensor ft = device_table(f.to(st.q.dtype()), st.q.data());
      st.q = mul(st.q, Variable(ft, false));
    }
    if (far_branch(st)) return;  // logits() builds both branches
    // keys sit at k_pos0.. (0 except a decoding step rotating only its new keys)
    const int64_t n = position_extent(st), h = d_ / 2;
    auto [theta, m] = freqs(n);
    if (st.positions) return rotate_explicit(st, theta, m);
    auto [Ck, Sk] = trig_tables(f32_angles(st.k_pos0, st.S, theta), st.S, h, {}, m, st.k);
    if (st.q_pos0 == st.k_pos0 && st.T == st.S) {
      st.q = rope_rotate(st.q, Ck, Sk, pairing_);
    } else {
      auto [Cq, Sq] = trig_tables(f32_angles(st.q_pos0, st.T, theta), st.T, h, {}, m, st.q);
      st.q = rope_rotate(st.q, Cq, Sq, pairing_);
    }
    st.k = rope_rotate(st.k, Ck, Sk, pairing_);
  }

  // Rotated key j depends on n only through dynamic NTK's base and LongRoPE's list, which change
  // once n > L: the full recompute at length n rotates every key with freqs(n), so a cache must
  // re-rotate them. (Two-branch scalings leave k to logits(), which uses the raw keys.)
  bool decode_keys_stable(int64_t n) const override { return !(n_dependent() && n > sc_.L); }
  // Beyond L they change the rotation of every position in every layer, so the earlier layers'
  // outputs (the cached keys and values of layers > 0) change too.
  int64_t decode_limit() const override { return n_dependent() ? sc_.L : 0; }

  // One-branch scalings whose rotation of position p is the same at every length up to capacity
  // (dynamic NTK / LongRoPE only within L); log_n scales q by its own table: the hooks.
  std::optional<DecodeTables> decode_tables(int64_t capacity, const Tensor& like) override {
    const std::string& t = sc_.type;
    if (sc_.log_n || t == "rerope" || t == "leaky-rerope" || t == "self-extend" ||
        (n_dependent() && capacity > sc_.L))
      return std::nullopt;
    const auto fr = freqs(capacity);
    auto [C, S] = trig_tables(f32_angles(0, capacity, fr.first), capacity, d_ / 2, {}, fr.second,
                              Variable(like, false));
    DecodeTables tb;
    tb.cos = C;
    tb.sin = S;
    tb.interleaved = pairing_ == RopePairing::Interleaved;
    return tb;
  }

  // Two-branch logits (FarBranch): where far(i, j) the second branch, else the ordinary one.
  // Gradients flow through the selected branch.
  Variable logits(AttnState& st) override {
    const std::optional<FarBranch> fb = far_branch(st);
    if (!fb) return PositionalEncoding::logits(st);
    // named, not a structured binding: a lambda below uses them (clang 14 rejects capturing bindings)
    const auto fr = freqs(std::max(st.S, st.q_pos0 + st.T));
    const auto& theta = fr.first;
    const auto m = fr.second;
    const int64_t h = d_ / 2, p0 = st.q_pos0;
    // rotation of x's rows by pos_of(row) (angles as fb->f32 says, times m)
    auto rot = [&](const Variable& x, int64_t rows, const std::function<double(int64_t)>& pos_of) {
      std::vector<double> a((size_t)(rows * h));
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t k = 0; k < h; ++k) {
          const double p = pos_of(t);
          a[(size_t)(t * h + k)] = fb->f32 ? (double)((float)p * theta[(size_t)k]) : p * (double)theta[(size_t)k];
        }
      auto [C, S] = trig_tables(a, rows, h, {}, m, x);
      return rope_rotate(x, C, S, pairing_);
    };
    const Variable kn = rot(st.k, st.S, [](int64_t j) { return (double)j; });
    Variable near = scale(matmul(rot(st.q, st.T, [&](int64_t t) { return (double)(p0 + t); }), kn, false, true),
                          st.scale);                                                          // [B, H, T, S]
    const Variable qf = rot(st.q, st.T, [&](int64_t t) { return fb->q_pos(p0 + t); });
    const Variable kf = fb->k_near ? kn : fb->k_pos ? rot(st.k, st.S, fb->k_pos) : st.k;
    Variable far = scale(matmul(qf, kf, false, true), st.scale);                             // [B, H, T, S]
    Tensor mask = Tensor::empty({st.T, st.S}, near.dtype());  // [T, S]: 1 = the ordinary branch
    for (int64_t i = 0; i < st.T; ++i)
      for (int64_t j = 0; j < st.S; ++j) mask.set(i * st.S + j, fb->far(p0 + i, j) ? 0.0 : 1.0);
    Variable s = where(device_table(mask, near.data()), near, far);
    Variable b = bias(st);
    return b.defined() ? add(s, b) : s;
  }

 private:
  bool n_dependent() const { return sc_.type == "dynamic-ntk" || sc_.type == "longrope"; }

  // Explicit positions (§7.3; queries and keys of row b both at p[b, :], S = T): one table
  // [T, d/2] for a shared row (the fused rotation over the whole batch), else row b of q and k
  // rotated by its own table and the rows concatenated (composed; the gradient flows per row).
  void rotate_explicit(AttnState& st, const std::vector<float>& theta, double m) const {
    const Positions& p = *st.positions;
    const int64_t h = d_ / 2;
    std::vector<Variable> qs, ks;
    for (int64_t r = 0; r < p.rows; ++r) {
      auto [C, S] = trig_tables(f32_angles_at(p.p.data() + r * p.T, p.T, theta), p.T, h, {}, m, st.k);
      const Variable q = p.rows == 1 ? st.q : slice(st.q, 0, r, r + 1);  // [1 or B, H, T, Dh]
      const Variable k = p.rows == 1 ? st.k : slice(st.k, 0, r, r + 1);
      qs.push_back(rope_rotate(q, C, S, pairing_));
      ks.push_back(rope_rotate(k, C, S, pairing_));
    }
    st.q = p.rows == 1 ? qs[0] : concat(qs, 0);
    st.k = p.rows == 1 ? ks[0] : concat(ks, 0);
  }

  // YaRN (HF _compute_yarn_parameters): theta blended between theta/s and theta by a ramp over k.
  std::pair<std::vector<float>, double> yarn_freqs() const {
    auto th = inv_freqs((float)base_, d_);
    const float s = (float)sc_.factor;
    const double pi = 3.14159265358979323846;
    auto fcd = [&](double r) { return (double)d_ * std::log((double)sc_.L / (2 * pi * r)) / (2 * std::log(base_)); };
    double low = std::max(std::floor(fcd(sc_.beta_fast)), 0.0);
    double high = std::min(std::ceil(fcd(sc_.beta_slow)), (double)(d_ - 1));
    if (high == low) high += 0.001;
    for (int64_t k = 0; k < d_ / 2; ++k) {
      float ramp = ((float)k - (float)low) / (float)(high - low);
      ramp = std::min(1.0f, std::max(0.0f, ramp));
      float x = th[(size_t)k];
      th[(size_t)k] = (x / s) * ramp + x * (1.0f - ramp);
    }
    double m = sc_.has_attention_factor ? sc_.attention_factor
                                        : (sc_.factor > 1 ? 0.1 * std::log(sc_.factor) + 1.0 : 1.0);
    return {th, m};
  }

  // The second branch of this scaling (or of the sinks of st), or none: plain rotation.
  std::optional<FarBranch> far_branch(const AttnState& st) const {
    const std::string& t = sc_.type;
    const int64_t w = sc_.window;
    FarBranch fb;
    fb.far = [w](int64_t i, int64_t j) { return i - j >= w; };
    if (t == "rerope") {
      fb.q_pos = [w](int64_t) { return (double)w; };
      fb.f32 = false;
    } else if (t == "leaky-rerope") {
      const double lk = sc_.factor;
      fb.q_pos = [w, lk](int64_t i) { return (double)w + ((double)i - (double)w) / lk; };
      fb.k_pos = [lk](int64_t j) { return (double)j / lk; };
      fb.f32 = false;
    } else if (t == "self-extend") {  // P(i) = floor(i/G) + W - floor(W/G), keys at floor(j/G)
      const int64_t G = sc_.group;
      fb.q_pos = [w, G](int64_t i) { return (double)(i / G + w - w / G); };
      fb.k_pos = [G](int64_t j) { return (double)(j / G); };
    } else if (st.sinks > 0) {  // a sink key beyond the window: q at its cache rank min(i, S + W - 1)
      const int64_t S = st.sinks, W = st.window;
      fb.far = [S, W](int64_t i, int64_t j) { return j < S && i - j >= W; };
      fb.q_pos = [S, W](int64_t i) { return (double)std::min(i, S + W - 1); };
      fb.k_near = true;
    } else {
      return std::nullopt;
    }
    return fb;
  }

  int64_t d_;
  double base_;
  RopePairing pairing_;
  Scaling sc_;
};

// ---- xpos (torchscale): interleaved rotation, q' = rot(q) * s, k' = rot(k) / s ----
class XPos final : public PositionalEncoding {
 public:
  XPos(const ModelConfig& c, double base, double gamma) : d_(c.head_dim()), base_(base), gamma_(gamma) {}
  std::string type() const override { return "xpos"; }
  bool fused_attention_ok(const AttnState&) const override { return true; }
  // The scale's centre c moves with S: a cache re-rotates every raw key each step.
  bool decode_keys_stable(int64_t) const override { return false; }

  void rotate(AttnState& st) override {
    // q: [B, H, T, Dh], k: [B, H, S, Dh]; s[t, k] = zeta_k ^ ((t + c) / gamma), c = floor(-S / 2)
    CTX_CHECK(st.k_pos0 == 0, "posenc xpos: keys must start at position 0 (decode_keys_stable is false)");
    const int64_t h = d_ / 2, S = st.S;
    const int64_t c = -((S + 1) / 2);
    const std::vector<float> theta = inv_freqs((float)base_, d_);
    std::vector<float> zeta((size_t)h);
    for (int64_t k = 0; k < h; ++k)
      zeta[(size_t)k] = ((float)(2 * k) + (float)(0.4 * (double)d_)) / (float)(1.4 * (double)d_);
    const float g = (float)gamma_;
    auto scales = [&](int64_t pos0, int64_t rows, bool inverse) {
      std::vector<double> s((size_t)(rows * h));
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t k = 0; k < h; ++k) {
          double v = (double)std::pow(zeta[(size_t)k], (float)(pos0 + t + c) / g);
          s[(size_t)(t * h + k)] = inverse ? 1.0 / v : v;
        }
      return s;
    };
    auto [Cq, Sq] = trig_tables(f32_angles(st.q_pos0, st.T, theta), st.T, h, scales(st.q_pos0, st.T, false), 1.0, st.q);
    auto [Ck, Sk] = trig_tables(f32_angles(0, S, theta), S, h, scales(0, S, true), 1.0, st.k);
    st.q = rope_rotate(st.q, Cq, Sq, RopePairing::Interleaved);
    st.k = rope_rotate(st.k, Ck, Sk, RopePairing::Interleaved);
  }

 private:
  int64_t d_;
  double base_, gamma_;
};

std::unique_ptr<PositionalEncoding> make_rope(const ModelConfig& c, const nlohmann::json& p,
                                              const std::string& src) {
  posenc_check_keys(p, {"base", "pairing", "scaling"}, src);
  require_even_head_dim(c, "rope", src);
  double base = positive_number(p, "base", 10000.0, "", src, 1.0);
  std::string pairing = posenc_string(p, "pairing", "half", src);
  CTX_CHECK(pairing == "half" || pairing == "interleaved", src,
            ": field 'posenc.pairing' must be \"half\" or \"interleaved\", got \"", pairing, "\"");
  Scaling sc = parse_scaling(p.contains("scaling") ? p["scaling"] : nlohmann::json(), c, src);
  return std::make_unique<Rope>(c, base, pairing == "half" ? RopePairing::Half : RopePairing::Interleaved,
                                std::move(sc));
}

std::unique_ptr<PositionalEncoding> make_xpos(const ModelConfig& c, const nlohmann::json& p,
                                              const std::string& src) {
  posenc_check_keys(p, {"base", "scale_base"}, src);
  require_even_head_dim(c, "xpos", src);
  double base = positive_number(p, "base", 10000.0, "", src);
  double gamma = positive_number(p, "scale_base", 512.0, "", src);
  return std::make_unique<XPos>(c, base, gamma);
}

}  // namespace

// Registered by name as the library loads (posenc/registry.cpp; executables link the whole library).
static PosencRegistrar r1("rope", make_rope);
static PosencRegistrar r2("xpos", make_xpos);

}  // namespace ctx
