// train/io/config.h — reading model configs from JSON text and files (strict: duplicate keys are
// an error); the ModelConfig struct, its validation and the presets are nn/config.h.
#pragma once
#include <string>

#include "nn/config.h"

namespace ctx {

// Parses JSON text (duplicate keys are an error) and calls config_from_json.
ModelConfig config_from_string(const std::string& text, const std::string& source);

ModelConfig load_config_file(const std::string& path);

}  // namespace ctx
