// nn/config.h — the model configuration (MODEL_SPEC §2): JSON <-> ModelConfig with strict
// validation (unknown keys, wrong types and inconsistent sizes are one-line errors naming the
// source and the field), and the built-in presets (tiny, small, medium). Reading configs from
// text and files: train/io/config.h.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ctx {

struct ModelConfig {
  int64_t vocab_size = 256;
  int64_t d_model = 256;
  int64_t n_layers = 6;
  int64_t n_heads = 8;
  int64_t d_ff = -1;  // -1: 4 * d_model (config_from_json resolves it)
  int64_t context = 256;
  std::string norm = "layernorm";  // "layernorm" | "rmsnorm"
  double norm_eps = 1e-5;
  bool tie_embeddings = true;
  double dropout = 0.0;
  nlohmann::json posenc = {{"type", "none"}};  // validated in detail by the posenc registry

  int64_t head_dim() const { return d_model / n_heads; }
  int64_t ff_dim() const { return d_ff > 0 ? d_ff : 4 * d_model; }  // d_ff with -1 resolved
};

// The keys a config may contain, in the order config_to_json writes them.
const std::vector<std::string>& config_keys();

// Builds and validates a config from JSON; missing keys take the defaults above. `source` (a
// file name or e.g. "preset small") starts every error message.
ModelConfig config_from_json(const nlohmann::json& j, const std::string& source);
// Checks an already-built config (e.g. one assembled in code) with the same rules.
void validate_config(const ModelConfig& c, const std::string& source);

// Every field, d_ff resolved.
nlohmann::json config_to_json(const ModelConfig& c);

// "tiny" (d 64, 2 layers, 4 heads, context 64), "small" (d 256, 6 layers, 8 heads, context 256),
// "medium" (d 512, 8 layers, 8 heads, context 512); vocab 256, layernorm, tied, learned positions.
ModelConfig preset_config(const std::string& name);
const std::vector<std::string>& preset_names();

}  // namespace ctx
