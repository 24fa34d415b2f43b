// tests/fuzz/fuzz_config.cpp — libFuzzer target for config parsing and validation.
// Any text must either give a valid ModelConfig or throw ctx::Error; a config that loads must
// survive config_to_json -> config_from_json unchanged.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "train/config.h"

static void fail(const char* what) {
  std::fprintf(stderr, "fuzz_config: %s\n", what);
  std::abort();
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
  return 0;
}
