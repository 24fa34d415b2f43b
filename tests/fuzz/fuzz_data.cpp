// tests/fuzz/fuzz_data.cpp — libFuzzer target for the corpus readers of --data
// (train/io/token_files.h, train/io/jsonl.h). Any byte string must either parse or throw ctx::Error:
// as a token file, a layout that parses must lie inside the input (offset + 2 * count == size);
// as JSONL, the text must hold one '\n' per document (each document ends with one).
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"
#include "train/io/jsonl.h"
#include "train/io/token_files.h"

static void fail(const char* what) {
  std::fprintf(stderr, "fuzz_data: %s\n", what);
  std::abort();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ctx::TokenFileLayout l = ctx::token_file_layout(data, size, "fuzz.bin");
    if (l.count <= 0 || l.offset < 0 || (uint64_t)l.offset + 2 * (uint64_t)l.count != size)
      fail("token file layout outside the file");
  } catch (const ctx::Error&) {
  }
  try {
    const char* b = reinterpret_cast<const char*>(data);
    const std::string text = ctx::jsonl_text(b, b + size, "text", "fuzz.jsonl");
    if (!text.empty() && text.back() != '\n') fail("a JSONL document not followed by its newline");
  } catch (const ctx::Error&) {
  }
  return 0;
}
