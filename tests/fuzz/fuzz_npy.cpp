// tests/fuzz/fuzz_npy.cpp — libFuzzer target for the .npy reader.
// Any byte string must either load or throw ctx::Error; a file that loads must survive a round
// trip through npy_header with identical dtype, shape and bytes.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "train/io/npy.h"

static void fail(const char* what) {
  std::fprintf(stderr, "fuzz_npy: round trip failed: %s\n", what);
  std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ctx::Tensor t;
  try {
    t = ctx::load_npy_bytes(data, size, "fuzz.npy");
  } catch (const ctx::Error&) {
    return 0;
  }
  try {
    std::string bytes = ctx::npy_header(t);
    bytes.append((const char*)t.raw(), t.nbytes());
    ctx::Tensor u = ctx::load_npy_bytes((const uint8_t*)bytes.data(), bytes.size(), "roundtrip");
    if (u.dtype() != t.dtype() || u.shape() != t.shape()) fail("dtype/shape");
    if (std::memcmp(u.raw(), t.raw(), t.nbytes()) != 0) fail("bytes");
  } catch (const ctx::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("re-reading our own output threw");
  }
  return 0;
}
