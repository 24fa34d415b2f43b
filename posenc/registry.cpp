// posenc/registry.cpp — the encoding registry by name, parameter parsing helpers, and the
// default logits hook shared by every encoding that does not own its scores.
#include <dlfcn.h>

#include <cmath>
#include <map>

#include "core/rng.h"
#include "posenc/posenc.h"

namespace ctx {

static std::map<std::string, PosencFactory>& registry() {
  static std::map<std::string, PosencFactory> r;
  return r;
}

// Names registered twice (a plugin reusing a built-in's name): the first registration stays and
// the name is kept here for posenc_take_duplicates() (a static constructor cannot throw).
static std::vector<std::string>& duplicates() {
  static std::vector<std::string> d;
  return d;
}

PosencRegistrar::PosencRegistrar(const char* type, PosencFactory f) {
  if (!registry().emplace(type, f).second) duplicates().push_back(type);
}

std::vector<std::string> posenc_take_duplicates() {
  std::vector<std::string> d;
  d.swap(duplicates());
  return d;
}

std::vector<std::string> posenc_types() {
  std::vector<std::string> v;
  for (auto& kv : registry()) v.push_back(kv.first);
  return v;
}

// The shared object a factory lives in when it is not the one that holds the built-ins (a
// --plugin library), else "".
static std::string factory_library(PosencFactory f) {
  Dl_info self{}, info{};
  if (!dladdr(reinterpret_cast<void*>(&posenc_types), &self) || !dladdr(reinterpret_cast<void*>(f), &info) ||
      !info.dli_fname || (self.dli_fname && std::string(self.dli_fname) == info.dli_fname))
    return "";
  return info.dli_fname;
}

// "SOURCE: the factory of posenc type 'T' (from the plugin LIB) returned no encoding ..."; the
// plugin is named unless `source` names it already.
static std::string null_factory_message(const std::string& type, PosencFactory f, const std::string& source) {
  const std::string lib = factory_library(f);
  const bool named = lib.empty() || source.find(lib) != std::string::npos;
  return str(source, ": the factory of posenc type '", type, "'", named ? "" : " (from the plugin " + lib + ")",
             " returned no encoding (nullptr); it must return a PositionalEncoding or throw ctx::Error");
}

// Runs a factory; a nullptr result is an error naming the type and its plugin, never a model
// without an encoding (a crash at its first use).
static std::unique_ptr<PositionalEncoding> build(const std::string& type, PosencFactory f, const ModelConfig& cfg,
                                                 const nlohmann::json& p, const std::string& source) {
  std::unique_ptr<PositionalEncoding> pe = f(cfg, p, source);
  if (!pe) throw Error(null_factory_message(type, f, source));
  return pe;
}

std::unique_ptr<PositionalEncoding> make_posenc(const ModelConfig& cfg, const std::string& source) {
  const nlohmann::json& p = cfg.posenc;
  CTX_CHECK(p.is_object(), source, ": field 'posenc' must be an object like {\"type\": \"rope\"}");
  CTX_CHECK(p.contains("type") && p["type"].is_string(), source,
            ": field 'posenc.type' must be a string");
  std::string type = p["type"].get<std::string>();
  auto it = registry().find(type);
  if (it == registry().end()) {
    std::string names;
    for (auto& n : posenc_types()) names += (names.empty() ? "" : ", ") + n;
    throw Error(str(source, ": unknown posenc.type '", type, "' (expected one of: ", names, ")"));
  }
  // "randomized": M (POSENC_SPEC §7.3) is a key of every encoding that takes explicit positions:
  // checked here, once, and hidden from the factory (learned reads M from cfg.posenc for its table).
  posenc_randomized(p, cfg.context, source);  // validates M
  nlohmann::json own = p;
  own.erase("randomized");
  std::unique_ptr<PositionalEncoding> pe = build(type, it->second, cfg, own, source);
  CTX_CHECK(!p.contains("randomized") || pe->explicit_positions_ok(), source, ": unknown key 'posenc.randomized' "
            "for posenc ", own.dump(), ": randomized positions (POSENC_SPEC §7.3) need an encoding that takes "
            "explicit positions: none, learned (not hierarchical), sinusoidal, rope (no scaling, or pi, ntk, "
            "dynamic-ntk, yarn, llama3, longrope), alibi, kerple, sandwich, t5, fire");
  return pe;
}

void posenc_probe(const std::vector<std::string>& types, const ModelConfig& cfg, const std::string& source) {
  for (const std::string& type : types) {
    auto it = registry().find(type);
    CTX_CHECK(it != registry().end(), source, ": posenc type '", type, "' is not registered");
    ModelConfig c = cfg;
    c.posenc = nlohmann::json{{"type", type}};
    std::unique_ptr<PositionalEncoding> pe;
    try {
      pe = it->second(c, c.posenc, source);
    } catch (const std::exception&) {
      continue;  // needs parameters: checked when a model names it
    }
    if (!pe) throw Error(null_factory_message(type, it->second, source));
  }
}

void posenc_check_keys(const nlohmann::json& p, const std::vector<std::string>& allowed,
                       const std::string& source) {
  for (auto& kv : p.items()) {
    if (kv.key() == "type") continue;
    bool ok = false;
    for (auto& a : allowed) ok = ok || a == kv.key();
    if (!ok) {
      std::string names;
      for (auto& a : allowed) names += (names.empty() ? "" : ", ") + a;
      throw Error(str(source, ": unknown key 'posenc.", kv.key(), "' for posenc type '",
                      p["type"].get<std::string>(), "' (valid keys: ",
                      names.empty() ? "none" : names, ")"));
    }
  }
}

double posenc_number(const nlohmann::json& p, const char* key, double def, const std::string& source) {
  if (!p.contains(key)) return def;
  CTX_CHECK(p[key].is_number(), source, ": field 'posenc.", key, "' must be a number, got ", p[key].dump());
  return p[key].get<double>();
}

int64_t posenc_int(const nlohmann::json& p, const char* key, int64_t def, int64_t lo,
                   const std::string& source, const char* type) {
  double v = posenc_number(p, key, (double)def, source);
  CTX_CHECK(v == std::floor(v) && v >= (double)lo && v < 1e15, source, ": field 'posenc.", key,
            "' of posenc type '", type, "' must be an integer >= ", lo, ", got ",
            p.contains(key) ? p[key].dump() : std::to_string(v));
  return (int64_t)v;
}

bool posenc_bool(const nlohmann::json& p, const char* key, bool def, const std::string& source) {
  if (!p.contains(key)) return def;
  CTX_CHECK(p[key].is_boolean(), source, ": field 'posenc.", key, "' must be true or false, got ",
            p[key].dump());
  return p[key].get<bool>();
}

std::string posenc_string(const nlohmann::json& p, const char* key, const std::string& def,
                          const std::string& source) {
  if (!p.contains(key)) return def;
  CTX_CHECK(p[key].is_string(), source, ": field 'posenc.", key, "' must be a string, got ", p[key].dump());
  return p[key].get<std::string>();
}

ScoreTerms PositionalEncoding::terms(AttnState& st) {
  ScoreTerms t;
  t.q = st.q;
  t.scale = st.scale;
  t.bias = bias(st);
  return t;
}

const ScoreTerms& PositionalEncoding::score_terms(AttnState& st) {
  if (!st.terms) st.terms = terms(st);
  return *st.terms;
}

Variable PositionalEncoding::logits(AttnState& st) {
  const ScoreTerms& t = score_terms(st);
  return relative_logits(t.q, st.k, t.bias, t.scale, t.rel);  // [B, H, T, S]
}

Variable PositionalEncoding::output(AttnState& st, const Variable& p) {
  return relative_output(p, st.v, score_terms(st).rel);  // [B, H, T, Dh]
}

Variable PositionalEncoding::fused_attention(AttnState& st, int64_t window, const DropoutMask& dropout) {
  if (!fused_attention_ok(st)) return Variable();
  const ScoreTerms& t = score_terms(st);
  if (t.bias.defined() && t.bias.dim() == 4 && t.bias.size(0) != 1) return Variable();  // per-batch bias
  // st.k / st.v may be a decoding step's cache buffers, of which the first st.S rows are keys
  const int64_t keys = st.k.size(2) != st.S ? st.S : 0;
  return fused_causal_attention(t.q, st.k, st.v, t.bias, t.scale, window, t.rel, keys, dropout,
                                st.stats);  // [B, H, T, Dh]
}

}  // namespace ctx
