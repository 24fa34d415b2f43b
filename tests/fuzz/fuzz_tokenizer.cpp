// tests/fuzz/fuzz_tokenizer.cpp — libFuzzer target for the tokenizer readers: a SentencePiece model
// file (`--tokenizer FILE`: load_tokenizer_file; BPE and unigram models, trained by `ctxlab
// tokenizer train`) and a checkpoint's tokenizer record (`__metadata__.tokenizer` JSON +
// `tokenizer_model` base64: tokenizer_from_metadata). The first byte picks the reader (even: the
// model file; odd: the metadata, the rest split at the first NUL into the two values). Any byte
// string must load or throw ctx::Error; a tokenizer that loads must encode and decode text, give
// every id's text, and refuse an id out of range with ctx::Error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>

#include "core/error.h"
#include "train/io/tokenizer.h"
#include "train/io/tokenizer_sp.h"

namespace {

void fail(const char* what) {
  std::fprintf(stderr, "fuzz_tokenizer: %s\n", what);
  std::abort();
}

std::shared_ptr<const ctx::Tokenizer> read(const uint8_t* data, size_t size) {
  const std::string rest((const char*)data + 1, size - 1);
  if ((data[0] & 1) == 0) return std::make_shared<ctx::SentencePieceTokenizer>(rest, "fuzz.model");
  const size_t nul = rest.find('\0');
  std::map<std::string, std::string> meta{{"tokenizer", rest.substr(0, nul)}};
  if (nul != std::string::npos) meta["tokenizer_model"] = rest.substr(nul + 1);
  return ctx::tokenizer_from_metadata(meta, "fuzz.safetensors");
}

// What a loaded tokenizer is used for: encoding a corpus, decoding samples, streaming token text.
void exercise(const ctx::Tokenizer& tok) {
  const int64_t V = tok.vocab_size();
  if (V <= 0) fail("a tokenizer with no vocabulary loaded");
  const std::vector<int32_t> ids = tok.encode("It is a truth universally acknowledged, \xc3\xa9t\xc3\xa9\n\t<unk> 12");
  for (int32_t id : ids)
    if (id < 0 || id >= V) fail("encode gave an id out of range");
  (void)tok.decode(ids);
  for (int64_t i = 0; i < V && i < 2048; ++i) (void)tok.token_text((int32_t)i);
  const int32_t bad[2] = {0, (int32_t)V};
  try {
    (void)tok.decode(bad, 2);
    fail("decode accepted an id out of range");
  } catch (const ctx::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::shared_ptr<const ctx::Tokenizer> tok;
  try {
    tok = read(data, size);
  } catch (const ctx::Error&) {
    return 0;  // refused with a message: the expected outcome for most inputs
  }
  if (!tok) return 0;  // a record without "tokenizer": bytes (nothing was read)
  try {
    exercise(*tok);
  } catch (const ctx::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fail("a tokenizer that loaded threw while used");
  }
  return 0;
}
