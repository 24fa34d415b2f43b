// tests/fuzz/fuzz_config.cpp — libFuzzer target for config parsing and validation, and for what
// consumes a config: the positional-encoding registry (make_posenc, check_length) and the
// checkpoint/config consistency check of load_checkpoint.
// Any text must either give a valid ModelConfig or throw ctx::Error; a config that loads must
// survive config_to_json -> config_from_json unchanged. For a config that loads (and is small
// enough to build in the fuzzer's memory limit):
//   * make_posenc either builds the encoding or throws ctx::Error, and so does check_length at
//     a few lengths;
//   * a fixed checkpoint (the tensors of the tiny learned-positions model) carrying the fuzzed
//     config in __metadata__.config either loads — only if the config's parameters are exactly
//     those tensors — or is rejected with ctx::Error.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/gpt.h"
#include "posenc/posenc.h"
#include "train/io/checkpoint.h"
#include "train/io/config.h"
#include "train/io/safetensors.h"

static void fail(const char* what) {
  std::fprintf(stderr, "fuzz_config: %s\n", what);
  std::abort();
}

// Whether building the model (and its encoding tables) stays within a few MB: the registry
// accepts large sizes by design, which would only measure the fuzzer's memory limit.
static bool small_enough(const ctx::ModelConfig& c) {
  if (c.vocab_size > 512 || c.d_model > 64 || c.n_layers > 2 || c.n_heads > 16 || c.d_ff > 256 ||
      c.context > 512)
    return false;
  bool ok = true;
  std::vector<const nlohmann::json*> todo = {&c.posenc};
  while (!todo.empty() && ok) {
    const nlohmann::json* j = todo.back();
    todo.pop_back();
    if (j->is_number() && std::abs(j->get<double>()) > 4096) ok = false;
    if (j->is_structured())
      for (const auto& v : *j) todo.push_back(&v);
  }
  return ok;
}

// The fixed checkpoint: tensors of the tiny preset with learned positions.
struct FixedCheckpoint {
  std::vector<std::pair<std::string, ctx::Tensor>> tensors;
  std::string path;
};
static const FixedCheckpoint& fixed() {
  static const FixedCheckpoint f = [] {
    FixedCheckpoint r;
    ctx::ModelConfig c = ctx::preset_config("tiny");
    c.posenc = {{"type", "learned"}};
    ctx::nn::GPT m(c);
    m.init_weights(1);
    for (auto& [name, p] : m.named_parameters()) r.tensors.emplace_back(name, p.data().clone());
    r.path = "/tmp/fuzz_config_" + std::to_string(getpid()) + ".safetensors";
    return r;
  }();
  return f;
}

static void check_posenc(const ctx::ModelConfig& c) {
  std::unique_ptr<ctx::PositionalEncoding> pe;
  try {
    pe = ctx::make_posenc(c, "fuzz.json");
  } catch (const ctx::Error&) {
    return;
  }
  if (!pe) fail("make_posenc returned null without an error");
  for (int64_t T : {int64_t(1), c.context, 2 * c.context + 1}) {
    try {
      pe->check_length(T);
    } catch (const ctx::Error&) {
    }
  }
}

static void check_checkpoint(const ctx::ModelConfig& c) {
  const FixedCheckpoint& f = fixed();
  const std::map<std::string, std::string> meta = {
      {"format", "ctxlab/1"}, {"config", ctx::config_to_json(c).dump()}, {"step", "0"}};
  {
    std::string bytes = ctx::safetensors_header(f.tensors, meta);
    for (const auto& nt : f.tensors) bytes.append((const char*)nt.second.raw(), nt.second.nbytes());
    std::ofstream(f.path, std::ios::binary | std::ios::trunc).write(bytes.data(), (std::streamsize)bytes.size());
  }
  ctx::LoadedModel lm;
  try {
    lm = ctx::load_checkpoint(f.path);
  } catch (const ctx::Error&) {
    return;  // the config does not match the tensors: the expected outcome for most inputs
  }
  auto params = lm.model->named_parameters();
  if (params.size() != f.tensors.size()) fail("checkpoint loaded with a different number of parameters");
  for (size_t i = 0; i < params.size(); ++i) {
    bool found = false;
    for (const auto& nt : f.tensors)
      if (nt.first == params[i].first) {
        if (nt.second.shape() != params[i].second.shape()) fail("checkpoint loaded with a shape mismatch");
        found = true;
      }
    if (!found) fail("checkpoint loaded without a tensor for a parameter");
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ctx::ModelConfig c;
  try {
    c = ctx::config_from_string(std::string((const char*)data, size), "fuzz.json");
  } catch (const ctx::Error&) {
    return 0;
  }
  if (c.d_model % c.n_heads != 0 || c.d_ff <= 0) fail("invalid config accepted");
  try {
    nlohmann::json j = ctx::config_to_json(c);
    ctx::ModelConfig d = ctx::config_from_json(j, "roundtrip");
    if (ctx::config_to_json(d) != j) fail("round trip changed the config");
    (void)j.dump();
  } catch (const ctx::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("re-reading our own output threw");
  }
  if (!small_enough(c)) return 0;
  check_posenc(c);
  check_checkpoint(c);
  return 0;
}
