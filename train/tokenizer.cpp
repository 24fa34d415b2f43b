// train/tokenizer.cpp — byte-level tokenizer (see tokenizer.h).
#include "train/tokenizer.h"

#include "core/error.h"
#include "train/fileio.h"

namespace ctx {

std::vector<int32_t> ByteTokenizer::encode(const std::string& text) const {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = (int32_t)(unsigned char)text[i];
  return ids;
}

std::string ByteTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    CTX_CHECK(ids[i] >= 0 && ids[i] < kVocabSize, "tokenizer: decode: token id ", ids[i],
              " at position ", i, " is outside the byte vocabulary [0, ", kVocabSize, ")");
    out[i] = (char)(unsigned char)ids[i];
  }
  return out;
}

std::string ByteTokenizer::decode(const std::vector<int32_t>& ids) const {
  return decode(ids.data(), ids.size());
}

std::vector<int32_t> encode_bytes(const std::string& text) { return ByteTokenizer().encode(text); }
std::string decode_bytes(const std::vector<int32_t>& ids) { return ByteTokenizer().decode(ids); }

std::vector<int32_t> load_text_tokens(const std::string& path) {
  return ByteTokenizer().encode(read_file(path, "text corpus"));
}

}  // namespace ctx
