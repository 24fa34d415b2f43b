// train/tokenizer.h — the default byte-level tokenizer (MODEL_SPEC §1): vocab 256, token id =
// byte value, lossless for any byte string (UTF-8 or not).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ctx {

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  int64_t vocab_size() const { return kVocabSize; }
  std::vector<int32_t> encode(const std::string& text) const;
  // Every id must be in [0, 256); otherwise a ctx::Error names the position and the id.
  std::string decode(const std::vector<int32_t>& ids) const;
  std::string decode(const int32_t* ids, size_t n) const;
};

// Free-function forms of the same.
std::vector<int32_t> encode_bytes(const std::string& text);
std::string decode_bytes(const std::vector<int32_t>& ids);

// Reads a text file and encodes it (errors name the file: missing, a directory, unreadable).
std::vector<int32_t> load_text_tokens(const std::string& path);

}  // namespace ctx
