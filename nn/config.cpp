// nn/config.cpp — ModelConfig from / to JSON, validation and presets (see config.h).
#include "nn/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"  // CTX_CHECK, quoted_str

namespace ctx {
namespace {

using json = nlohmann::json;

// Sizes are capped so that products such as 4 * d_model or 3 * d_model * d_model cannot
// overflow int64 arithmetic downstream.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + v[i];
  return out;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1] ? 1u : 0u)});
      diag = up;
    }
  }
  return row[b.size()];
}

// A JSON value for an error message: short and on one line.
std::string shown(const json& v) {
  if (v.is_null()) return "null";
  std::string s = v.dump(-1, ' ', /*ensure_ascii=*/true, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 60) + "...";
  return std::string(v.type_name()) + " " + s;
}

int64_t get_size(const json& j, const char* key, const std::string& where) {
  const json& v = j.at(key);
  CTX_CHECK(v.is_number_integer(), where, ": field '", key, "' must be an integer (got ",
            shown(v), ")");
  // nlohmann keeps parsed non-negative integers as unsigned and ones built in C++ as signed.
  const bool ok = v.is_number_unsigned()
                      ? v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= (uint64_t)kMaxSize
                      : v.get<int64_t>() >= 1 && v.get<int64_t>() <= kMaxSize;
  CTX_CHECK(ok, where, ": field '", key, "' must be a positive integer <= ", kMaxSize, " (got ",
            v.dump(), ")");
  return v.get<int64_t>();
}

double get_number(const json& j, const char* key, const std::string& where) {
  const json& v = j.at(key);
  CTX_CHECK(v.is_number(), where, ": field '", key, "' must be a number (got ", shown(v), ")");
  return v.get<double>();
}

}  // namespace

const std::vector<std::string>& config_keys() {
  static const std::vector<std::string> keys = {
      "vocab_size", "d_model", "n_layers", "n_heads",  "d_ff",   "context",
      "norm",       "norm_eps", "tie_embeddings", "dropout", "posenc"};
  return keys;
}

void validate_config(const ModelConfig& c, const std::string& source) {
  const std::string where = "config " + source;
  auto size_ok = [&](int64_t v, const char* key) {
    CTX_CHECK(v >= 1 && v <= kMaxSize, where, ": field '", key, "' must be a positive integer <= ",
              kMaxSize, " (got ", v, ")");
  };
  size_ok(c.vocab_size, "vocab_size");
  size_ok(c.d_model, "d_model");
  size_ok(c.n_layers, "n_layers");
  size_ok(c.n_heads, "n_heads");
  CTX_CHECK(c.d_ff == -1 || (c.d_ff >= 1 && c.d_ff <= kMaxSize), where,
            ": field 'd_ff' must be a positive integer <= ", kMaxSize,
            " (or omitted for 4 * d_model) (got ", c.d_ff, ")");
  size_ok(c.context, "context");
  CTX_CHECK(c.d_model % c.n_heads == 0, where, ": field 'd_model' (", c.d_model,
            ") must be divisible by field 'n_heads' (", c.n_heads, ") so that head_dim is whole");
  CTX_CHECK(c.norm == "layernorm" || c.norm == "rmsnorm", where, ": field 'norm' must be "
            "\"layernorm\" or \"rmsnorm\" (got ", quoted_str(c.norm), ")");
  CTX_CHECK(std::isfinite(c.norm_eps) && c.norm_eps > 0, where,
            ": field 'norm_eps' must be a finite number > 0 (got ", c.norm_eps, ")");
  CTX_CHECK(std::isfinite(c.dropout) && c.dropout >= 0 && c.dropout < 1, where,
            ": field 'dropout' must be in [0, 1) (got ", c.dropout, ")");
  CTX_CHECK(c.posenc.is_object(), where, ": field 'posenc' must be an object such as "
            "{\"type\": \"rope\"} (got ", shown(c.posenc), ")");
  auto t = c.posenc.find("type");
  CTX_CHECK(t != c.posenc.end(), where, ": field 'posenc' has no key 'type' (expected e.g. "
            "{\"type\": \"rope\"})");
  CTX_CHECK(t->is_string() && !t->get<std::string>().empty(), where,
            ": field 'posenc.type' must be a non-empty string (got ", shown(*t), ")");
}

ModelConfig config_from_json(const json& j, const std::string& source) {
  const std::string where = "config " + source;
  CTX_CHECK(j.is_object(), where, ": must be a JSON object (got ", j.type_name(), ")");
  const auto& keys = config_keys();
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    std::string best;
    size_t best_d = 3;  // suggest only close matches
    for (const auto& cand : keys) {
      size_t d = edit_distance(k, cand);
      if (d < best_d) best_d = d, best = cand;
    }
    throw Error(str(where, ": unknown key ", quoted_str(k),
                    best.empty() ? std::string() : " (did you mean '" + best + "'?)",
                    "; valid keys: ", joined(keys)));
  }
  ModelConfig c;
  if (j.contains("vocab_size")) c.vocab_size = get_size(j, "vocab_size", where);
  if (j.contains("d_model")) c.d_model = get_size(j, "d_model", where);
  if (j.contains("n_layers")) c.n_layers = get_size(j, "n_layers", where);
  if (j.contains("n_heads")) c.n_heads = get_size(j, "n_heads", where);
  if (j.contains("d_ff")) c.d_ff = get_size(j, "d_ff", where);
  if (j.contains("context")) c.context = get_size(j, "context", where);
  if (j.contains("norm")) {
    const json& v = j.at("norm");
    CTX_CHECK(v.is_string(), where, ": field 'norm' must be a string, \"layernorm\" or "
              "\"rmsnorm\" (got ", shown(v), ")");
    c.norm = v.get<std::string>();
  }
  if (j.contains("norm_eps")) c.norm_eps = get_number(j, "norm_eps", where);
  if (j.contains("tie_embeddings")) {
    const json& v = j.at("tie_embeddings");
    CTX_CHECK(v.is_boolean(), where, ": field 'tie_embeddings' must be a boolean, true or false "
              "(got ", shown(v), ")");
    c.tie_embeddings = v.get<bool>();
  }
  if (j.contains("dropout")) c.dropout = get_number(j, "dropout", where);
  if (j.contains("posenc")) c.posenc = j.at("posenc");
  validate_config(c, source);
  if (c.d_ff == -1) c.d_ff = 4 * c.d_model;
  return c;
}

json config_to_json(const ModelConfig& c) {
  json j = json::object();
  j["vocab_size"] = c.vocab_size;
  j["d_model"] = c.d_model;
  j["n_layers"] = c.n_layers;
  j["n_heads"] = c.n_heads;
  j["d_ff"] = c.ff_dim();
  j["context"] = c.context;
  j["norm"] = c.norm;
  j["norm_eps"] = c.norm_eps;
  j["tie_embeddings"] = c.tie_embeddings;
  j["dropout"] = c.dropout;
  j["posenc"] = c.posenc;
  return j;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"tiny", "small", "medium"};
  return names;
}

ModelConfig preset_config(const std::string& name) {
  ModelConfig c;
  c.vocab_size = 256;
  c.norm = "layernorm";
  c.tie_embeddings = true;
  c.posenc = {{"type", "learned"}};
  if (name == "tiny") {
    c.d_model = 64, c.n_layers = 2, c.n_heads = 4, c.context = 64;
  } else if (name == "small") {
    c.d_model = 256, c.n_layers = 6, c.n_heads = 8, c.context = 256;
  } else if (name == "medium") {
    c.d_model = 512, c.n_layers = 8, c.n_heads = 8, c.context = 512;
  } else {
    throw Error(str("config: unknown preset ", quoted_str(name), " (valid presets: ",
                    joined(preset_names()), ")"));
  }
  c.d_ff = 4 * c.d_model;
  validate_config(c, "preset " + name);
  return c;
}

}  // namespace ctx
