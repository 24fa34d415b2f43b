// tests/fuzz/fuzz_safetensors.cpp — libFuzzer target for the safetensors reader.
// Any byte string must either load or throw ctx::Error (anything else — a crash, an ASan/UBSan
// report, another exception type — is a bug). A file that loads must survive a round trip
// through safetensors_header with identical names, metadata and tensor bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "train/io/safetensors.h"

static void fail(const char* what) {
  std::fprintf(stderr, "fuzz_safetensors: round trip failed: %s\n", what);
  std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ctx::SafetensorsFile f;
  try {
    f = ctx::load_safetensors_bytes(data, size, "fuzz.safetensors");
  } catch (const ctx::Error&) {
    return 0;  // rejected with a message: the expected outcome for most inputs
  }
  if (f.names.size() != f.tensors.size()) fail("names/tensors size");
  std::vector<std::pair<std::string, ctx::Tensor>> ts;
  for (const auto& n : f.names) ts.emplace_back(n, f.at(n));
  try {
    std::string bytes = ctx::safetensors_header(ts, f.metadata);
    for (const auto& nt : ts) bytes.append((const char*)nt.second.raw(), nt.second.nbytes());
    ctx::SafetensorsFile g =
        ctx::load_safetensors_bytes((const uint8_t*)bytes.data(), bytes.size(), "roundtrip");
    if (g.names != f.names) fail("names");
    if (g.metadata != f.metadata) fail("metadata");
    for (const auto& n : f.names) {
      const ctx::Tensor& a = f.at(n);
      const ctx::Tensor& b = g.at(n);
      if (a.dtype() != b.dtype() || a.shape() != b.shape()) fail("dtype/shape");
      if (std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0) fail("bytes");
    }
  } catch (const ctx::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("re-reading our own output threw");
  }
  return 0;
}
