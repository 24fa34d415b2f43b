// posenc/rotary.cpp — the rotary family (POSENC_SPEC §2): `rope` (half / interleaved pairing,
// context-extension scaling pi, ntk, dynamic-ntk, yarn, rerope, leaky-rerope, log_n) and `xpos`.
// Frequencies and scales are float32 in the spec's operation order; each angle is the float32
// product float(t) * theta_k whose cos / sin are taken in double and then converted to the
// model dtype (ReRoPE's relative angles are double, as torch_ref). The rotation itself is the
// fused differentiable op rope_rotate (autograd/ops_rope.h).
#include <cmath>
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

// float32 angles float(pos0 + t) * theta_k as doubles: [rows, d/2]
std::vector<double> f32_angles(int64_t pos0, int64_t rows, const std::vector<float>& theta) {
  const int64_t h = (int64_t)theta.size();
  std::vector<double> a((size_t)(rows * h));
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t k = 0; k < h; ++k) a[(size_t)(t * h + k)] = (double)((float)(pos0 + t) * theta[(size_t)k]);
  return a;
}

// ---- rope ----
struct Scaling {
  std::string type;  // empty: no scaling
  double factor = 1.0;
  int64_t L = 0;       // original_context
  int64_t window = 0;  // rerope / leaky-rerope
  double beta_fast = 32.0, beta_slow = 1.0;
  bool has_attention_factor = false;
  double attention_factor = 1.0;
  bool log_n = false;
};

Scaling parse_scaling(const nlohmann::json& sc, const ModelConfig& c, const std::string& src) {
  Scaling s;
  if (sc.is_null()) return s;
  CTX_CHECK(sc.is_object(), src, ": field 'posenc.scaling' must be an object like {\"type\": \"yarn\", "
            "\"factor\": 4} (or null), got ", sc.dump());
  static const std::vector<std::string> keys = {"type",     "factor",    "original_context", "window",
                                                "beta_fast", "beta_slow", "attention_factor", "log_n"};
  static const std::vector<std::string> types = {"pi", "ntk", "dynamic-ntk", "yarn", "rerope", "leaky-rerope"};
  for (auto& kv : sc.items()) {
    bool ok = false;
    for (auto& k : keys) ok = ok || k == kv.key();
    CTX_CHECK(ok, src, ": unknown key 'posenc.scaling.", kv.key(), "' (valid keys: type, factor, "
              "original_context, window, beta_fast, beta_slow, attention_factor, log_n)");
  }
  CTX_CHECK(sc.contains("type") && sc["type"].is_string(), src,
            ": field 'posenc.scaling.type' must be one of pi, ntk, dynamic-ntk, yarn, rerope, leaky-rerope",
            sc.contains("type") ? ", got " + sc["type"].dump() : std::string(" (missing)"));
  s.type = sc["type"].get<std::string>();
  bool known = false;
  for (auto& t : types) known = known || t == s.type;
  CTX_CHECK(known, src, ": field 'posenc.scaling.type' must be one of pi, ntk, dynamic-ntk, yarn, rerope, "
            "leaky-rerope, got \"", s.type, "\"");
  s.factor = positive_number(sc, "factor", s.type == "leaky-rerope" ? 16.0 : 1.0, "scaling.", src);
  s.L = positive_int(sc, "original_context", c.context, "scaling.", src);
  s.window = positive_int(sc, "window", s.L / 2, "scaling.", src);
  CTX_CHECK(s.window >= 1, src, ": field 'posenc.scaling.window' defaults to original_context / 2 = 0; "
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
  return s;
}

class Rope final : public PositionalEncoding {
 public:
  Rope(const ModelConfig& c, double base, RopePairing pairing, Scaling sc)
      : d_(c.head_dim()), base_(base), pairing_(pairing), sc_(std::move(sc)) {}
  std::string type() const override { return "rope"; }
  bool fused_attention_ok(const AttnState&) const override { return !is_rerope(); }  // rerope: own logits

  // theta_k' [d/2] (float32) for a forward whose largest position is n - 1, and the cos/sin
  // factor m (YaRN's attention factor; 1 otherwise).
  std::pair<std::vector<float>, double> freqs(int64_t n) const {
    const std::string& t = sc_.type;
    const float fb = (float)base_;
    if (t.empty() || t == "rerope" || t == "leaky-rerope") return {inv_freqs(fb, d_), 1.0};
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
    // yarn (HF _compute_yarn_parameters)
    auto th = inv_freqs(fb, d_);
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

  void rotate(AttnState& st) override {
    // q: [B, H, T, Dh], k: [B, H, S, Dh]; query t sits at position q_pos0 + t, key j at k_pos0 + j
    if (sc_.log_n) {  // q_i *= max(1, ln(i+1) / ln(L)) (float32 table [T, 1])
      Tensor f = Tensor::empty({st.T, 1}, DType::F64);
      const float lnL = std::log((float)sc_.L);
      for (int64_t t = 0; t < st.T; ++t)
        f.host<double>()[t] = (double)std::max(1.0f, std::log((float)(st.q_pos0 + t + 1)) / lnL);
      Tensor ft = device_table(f.to(st.q.dtype()), st.q.data());
      st.q = mul(st.q, Variable(ft, false));
    }
    if (is_rerope()) return;  // logits() builds both branches
    // keys sit at k_pos0.. (0 except a decoding step rotating only its new keys)
    const int64_t n = std::max(st.k_pos0 + st.S, st.q_pos0 + st.T), h = d_ / 2;
    auto [theta, m] = freqs(n);
    auto [Ck, Sk] = trig_tables(f32_angles(st.k_pos0, st.S, theta), st.S, h, {}, m, st.k);
    if (st.q_pos0 == st.k_pos0 && st.T == st.S) {
      st.q = rope_rotate(st.q, Ck, Sk, pairing_);
    } else {
      auto [Cq, Sq] = trig_tables(f32_angles(st.q_pos0, st.T, theta), st.T, h, {}, m, st.q);
      st.q = rope_rotate(st.q, Cq, Sq, pairing_);
    }
    st.k = rope_rotate(st.k, Ck, Sk, pairing_);
  }

  // Rotated key j depends on n only through dynamic NTK's base, which changes once n > L: the
  // full recompute at length n rotates every key with freqs(n), so a cache must re-rotate them.
  // (rerope / leaky-rerope leave k to logits(), which uses the raw keys.)
  bool decode_keys_stable(int64_t n) const override { return !(sc_.type == "dynamic-ntk" && n > sc_.L); }
  // Beyond L dynamic NTK changes the rotation of every position in every layer each step, so the
  // earlier layers' outputs (the cached keys and values of layers > 0) change too.
  int64_t decode_limit() const override { return sc_.type == "dynamic-ntk" ? sc_.L : 0; }

  // ReRoPE / leaky ReRoPE: S_ij = scale (R_i q_i . R_j k_j) where i - j < w (j <= i), else the
  // far branch: rerope scale (R_w q_i . k_j); leaky: q rotated by (w + (i - w)/k), k by j/k, so
  // that the relative angle is w + (i - j - w)/k. Gradients flow through the selected branch.
  Variable logits(AttnState& st) override {
    if (!is_rerope()) return PositionalEncoding::logits(st);
    const int64_t h = d_ / 2, w = sc_.window;
    const std::vector<float> theta = freqs(std::max(st.S, st.q_pos0 + st.T)).first;
    auto angles = [&](int64_t rows, auto pos_of) {  // double angles pos_of(t) * theta_k
      std::vector<double> a((size_t)(rows * h));
      for (int64_t t = 0; t < rows; ++t)
        for (int64_t k = 0; k < h; ++k) a[(size_t)(t * h + k)] = pos_of(t) * (double)theta[(size_t)k];
      return a;
    };
    const int64_t p0 = st.q_pos0;
    // near branch: ordinary rotation (double angles)
    auto [Cq, Sq] = trig_tables(angles(st.T, [&](int64_t t) { return (double)(p0 + t); }), st.T, h, {}, 1.0, st.q);
    auto [Ck, Sk] = trig_tables(angles(st.S, [&](int64_t j) { return (double)j; }), st.S, h, {}, 1.0, st.k);
    Variable near = scale(matmul(rope_rotate(st.q, Cq, Sq, pairing_), rope_rotate(st.k, Ck, Sk, pairing_),
                                 false, true), st.scale);                 // [B, H, T, S]
    Variable qf, kf;
    if (sc_.type == "rerope") {
      auto [Cw, Sw] = trig_tables(angles(st.T, [&](int64_t) { return (double)w; }), st.T, h, {}, 1.0, st.q);
      qf = rope_rotate(st.q, Cw, Sw, pairing_);
      kf = st.k;
    } else {
      const double lk = sc_.factor;
      auto [Cl, Sl] = trig_tables(angles(st.T, [&](int64_t t) { return (double)w + ((double)(p0 + t) - w) / lk; }),
                                  st.T, h, {}, 1.0, st.q);
      auto [Cm, Sm] = trig_tables(angles(st.S, [&](int64_t j) { return (double)j / lk; }), st.S, h, {}, 1.0, st.k);
      qf = rope_rotate(st.q, Cl, Sl, pairing_);
      kf = rope_rotate(st.k, Cm, Sm, pairing_);
    }
    Variable far = scale(matmul(qf, kf, false, true), st.scale);         // [B, H, T, S]
    // mask [T, S]: 1 where i - j < w (the near branch; masked j > i included)
    Tensor mask = Tensor::empty({st.T, st.S}, near.dtype());
    for (int64_t i = 0; i < st.T; ++i)
      for (int64_t j = 0; j < st.S; ++j) mask.set(i * st.S + j, (p0 + i) - j < w ? 1.0 : 0.0);
    mask = device_table(mask, near.data());
    Variable s = where(mask, near, far);
    Variable b = bias(st);
    return b.defined() ? add(s, b) : s;
  }

 private:
  bool is_rerope() const { return sc_.type == "rerope" || sc_.type == "leaky-rerope"; }
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
