// train/io/checkpoint.cpp — save / load model checkpoints (see checkpoint.h).
#include "train/io/checkpoint.h"

#include <cmath>
#include <set>

#include "core/device_table.h"  // to_host
#include "train/io/config.h"  // config_from_string
#include "train/io/limits.h"
#include "train/io/safetensors.h"

namespace ctx {

void save_checkpoint(const std::string& path, nn::GPT& model, int64_t step,
                     const std::map<std::string, std::string>& extra) {
  std::vector<std::pair<std::string, Tensor>> ts;
  for (auto& [name, p] : model.named_parameters()) {
    Tensor t = to_host(p.data());
    ts.emplace_back(name, t.dtype() == DType::F32 ? t : t.to(DType::F32));
  }
  std::map<std::string, std::string> meta = extra;
  meta["format"] = "ctxlab/1";
  meta["config"] = config_to_json(model.cfg).dump();
  meta["step"] = std::to_string(step);
  if (model.attention_window() > 0) meta["attention_window"] = std::to_string(model.attention_window());
  else meta.erase("attention_window");
  save_safetensors(path, ts, meta);
}

// A NaN or infinite weight makes every loss NaN: refuse the file, naming the first bad element
// (MODEL_SPEC §5: "any violation is a clear error").
// t: a tensor as read from the file (CPU, F32 or F64: F16/BF16 arrive as F32).
template <class T>
static int64_t first_non_finite(const T* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}
static void check_finite(const Tensor& t, const std::string& path, const std::string& name) {
  const int64_t i = t.dtype() == DType::F32 ? first_non_finite(t.data<float>(), t.numel())
                    : t.dtype() == DType::F64 ? first_non_finite(t.data<double>(), t.numel())
                                              : -1;
  CTX_CHECK(i < 0, path, ": tensor '", name, "' holds a non-finite value (", t.at(i), ") at flat index ", i,
            "; a checkpoint's parameters must be finite");
}

// A count in __metadata__ (strict: digits only, no sign, no trailing text, within int64); the
// error names the file, the field and what it must be.
static int64_t metadata_count(const std::string& v, const std::string& path, const char* field, const char* want) {
  size_t used = 0;
  int64_t n = -1;
  try {
    if (!v.empty() && v[0] >= '0' && v[0] <= '9') n = std::stoll(v, &used);
  } catch (...) {
  }
  CTX_CHECK(used == v.size() && n >= 0, path, ": __metadata__.", field, " is ", quoted_str(v), ", expected ", want);
  return n;
}

LoadedModel load_checkpoint(const std::string& path, DType dt, const nlohmann::json& posenc_override,
                            int64_t context_override) {
  SafetensorsFile f = load_safetensors(path);
  auto fmt = f.metadata.find("format");
  CTX_CHECK(fmt != f.metadata.end(), path, ": __metadata__.format missing (expected \"ctxlab/1\")");
  CTX_CHECK(fmt->second == "ctxlab/1", path, ": __metadata__.format is \"", fmt->second,
            "\", expected \"ctxlab/1\"");
  auto cj = f.metadata.find("config");
  CTX_CHECK(cj != f.metadata.end(), path, ": __metadata__.config missing");
  ModelConfig cfg = config_from_string(cj->second, path + " (__metadata__.config)");
  check_model_fits(cfg, path + " (__metadata__.config)");  // before the model is built
  if (!posenc_override.is_null())
    for (auto& kv : posenc_override.items()) cfg.posenc[kv.key()] = kv.value();
  if (context_override > 0) {
    cfg.context = context_override;
    validate_config(cfg, path + " (__metadata__.config with context " + std::to_string(context_override) + ")");
  }
  LoadedModel out;
  auto st = f.metadata.find("step");
  if (st != f.metadata.end()) out.step = metadata_count(st->second, path, "step", "a non-negative integer");
  auto aw = f.metadata.find("attention_window");
  const int64_t window = aw == f.metadata.end() ? 0 : metadata_count(aw->second, path, "attention_window",
                                                                      "a positive integer (train --window W)");
  CTX_CHECK(aw == f.metadata.end() || window >= 1, path, ": __metadata__.attention_window is ", quoted_str(aw->second),
            ", expected a positive integer (train --window W)");
  out.metadata = f.metadata;
  out.tokenizer = tokenizer_from_metadata(f.metadata, path);
  if (out.tokenizer)
    CTX_CHECK(out.tokenizer->vocab_size() == cfg.vocab_size, path, ": the recorded tokenizer has ",
              out.tokenizer->vocab_size(), " tokens but config.vocab_size is ", cfg.vocab_size);
  out.model = std::make_unique<nn::GPT>(cfg, dt, path);
  std::set<std::string> expected;
  for (auto& [name, p] : out.model->named_parameters()) {
    expected.insert(name);
    auto it = f.tensors.find(name);
    CTX_CHECK(it != f.tensors.end(), path, ": tensor '", name, "' is missing (the config needs it with shape ",
              shape_str(p.shape()), ")");
    const Tensor& t = it->second;
    CTX_CHECK(is_float(t.dtype()), path, ": tensor '", name, "' has dtype ", dtype_name(t.dtype()),
              ", expected F32");
    CTX_CHECK(t.shape() == p.shape(), path, ": tensor '", name, "' has shape ", shape_str(t.shape()),
              ", expected ", shape_str(p.shape()), " for this config");
    p.data().copy_from(t);
    check_finite(t, path, name);
  }
  for (auto& n : f.names)
    CTX_CHECK(expected.count(n), path, ": unexpected tensor '", n, "' (not a parameter of this config)");
  out.model->set_attention_window(window);  // trained with --window W: evaluated with it by default
  return out;
}

}  // namespace ctx
