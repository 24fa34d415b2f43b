// train/io/tokenizer.cpp — the byte tokenizer, tokenizer files and checkpoint metadata (see
// tokenizer.h; SentencePiece in tokenizer_sp.cpp).
#include "train/io/tokenizer.h"

#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/io/base64.h"
#include "train/io/fileio.h"
#include "train/io/tokenizer_sp.h"

namespace ctx {

std::string Tokenizer::fingerprint() const {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  auto mix = [&](const std::string& s) {
    for (unsigned char c : s) {
      h ^= c;
      h *= 1099511628211ULL;
    }
  };
  mix(type());
  mix(std::string(1, '\0'));
  mix(model_bytes());
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

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

std::string ByteTokenizer::token_text(int32_t id) const { return decode(&id, 1); }

IdTokenizer::IdTokenizer(int64_t vocab) : vocab_(vocab) {
  CTX_CHECK(vocab >= 1 && vocab <= (int64_t{1} << 24), "--vocab must be an integer in [1, 16777216], got ", vocab);
}

std::vector<int32_t> IdTokenizer::encode(const std::string&) const {
  throw Error(str("tokenizer: ", describe(), " has no text encoding (the data is pre-tokenized); text needs the "
                  "tokenizer that made the token files: --tokenizer MODEL"));
}

std::string IdTokenizer::decode(const int32_t* ids, size_t n) const {
  for (size_t i = 0; i < n; ++i)
    CTX_CHECK(ids[i] >= 0 && ids[i] < vocab_, "tokenizer: decode: token id ", ids[i], " at position ", i,
              " is outside the vocabulary [0, ", vocab_, ")");
  return "";
}

std::string IdTokenizer::describe() const { return str("ids (vocab ", vocab_, ", pre-tokenized data, no text)"); }

std::vector<int32_t> encode_bytes(const std::string& text) { return ByteTokenizer().encode(text); }
std::string decode_bytes(const std::vector<int32_t>& ids) { return ByteTokenizer().decode(ids); }

std::vector<int32_t> load_text_tokens(const std::string& path, const Tokenizer* tok) {
  const std::string text = read_file(path, "text corpus");
  return tok ? tok->encode(text) : ByteTokenizer().encode(text);
}

std::shared_ptr<const Tokenizer> byte_tokenizer() {
  static const std::shared_ptr<const Tokenizer> t = std::make_shared<ByteTokenizer>();
  return t;
}

std::shared_ptr<const Tokenizer> load_tokenizer_file(const std::string& path) {
  return std::make_shared<SentencePieceTokenizer>(read_file(path, "tokenizer model"), path);
}

std::map<std::string, std::string> tokenizer_metadata(const Tokenizer& tok) {
  std::map<std::string, std::string> m;
  m["tokenizer"] = nlohmann::json{{"type", tok.type()}, {"vocab_size", tok.vocab_size()},
                                  {"fingerprint", tok.fingerprint()}}
                       .dump();
  if (!tok.model_bytes().empty()) m["tokenizer_model"] = base64_encode(tok.model_bytes());
  return m;
}

std::shared_ptr<const Tokenizer> tokenizer_from_metadata(const std::map<std::string, std::string>& meta,
                                                         const std::string& source) {
  auto it = meta.find("tokenizer");
  if (it == meta.end()) return nullptr;
  const std::string where = source + " (__metadata__.tokenizer)";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(it->second);
  } catch (const std::exception& e) {
    throw Error(str(where, ": not valid JSON: ", e.what()));
  }
  CTX_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), where,
            ": expected {\"type\": \"bytes\"|\"sentencepiece\", ...}, got ", it->second);
  const std::string type = j["type"];
  std::shared_ptr<const Tokenizer> tok;
  if (type == "bytes") {
    tok = byte_tokenizer();
  } else if (type == "ids") {
    CTX_CHECK(j.contains("vocab_size") && j["vocab_size"].is_number_integer(), where,
              ": an \"ids\" tokenizer needs an integer vocab_size, got ", it->second);
    tok = std::make_shared<IdTokenizer>(j["vocab_size"].get<int64_t>());
  } else {
    CTX_CHECK(type == "sentencepiece", where, ": type is ", quoted_str(type),
              ", expected \"bytes\", \"sentencepiece\" or \"ids\"");
    auto m = meta.find("tokenizer_model");
    CTX_CHECK(m != meta.end(), source, ": __metadata__.tokenizer_model missing (a sentencepiece tokenizer "
              "needs its model, base64)");
    tok = std::make_shared<SentencePieceTokenizer>(
        base64_decode(m->second, source + " (__metadata__.tokenizer_model)"), source);
  }
  if (j.contains("fingerprint"))
    CTX_CHECK(j["fingerprint"] == tok->fingerprint(), where, ": fingerprint ", j["fingerprint"].dump(),
              " does not match the recorded model (", tok->fingerprint(), "); the file is damaged");
  if (j.contains("vocab_size"))
    CTX_CHECK(j["vocab_size"] == tok->vocab_size(), where, ": vocab_size ", j["vocab_size"].dump(),
              " does not match the recorded model's ", tok->vocab_size());
  return tok;
}

}  // namespace ctx
