// train/io/config.cpp — config_from_string / load_config_file (see config.h).
#include "train/io/config.h"

#include "train/io/fileio.h"

namespace ctx {

ModelConfig config_from_string(const std::string& text, const std::string& source) {
  using json = nlohmann::json;
  json j = parse_json_strict<json>(text.data(), text.data() + text.size(), "config " + source);
  return config_from_json(j, source);
}

ModelConfig load_config_file(const std::string& path) {
  return config_from_string(read_file(path, "config"), path);
}

}  // namespace ctx
