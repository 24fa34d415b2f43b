// train/io/tokenizer.h — text <-> token ids. One interface, two implementations: the default byte
// tokenizer (MODEL_SPEC §1: vocab 256, id = byte value, lossless for any byte string) and a
// SentencePiece model (BPE or unigram, train/io/tokenizer_sp.h). A checkpoint records its tokenizer
// in __metadata__ (tokenizer_metadata / tokenizer_from_metadata below; docs/training.md).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ctx {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string type() const = 0;  // "bytes" | "sentencepiece"
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<int32_t> encode(const std::string& text) const = 0;
  // Every id must be in [0, vocab_size); otherwise a ctx::Error names the position and the id.
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
  std::string decode(const std::vector<int32_t>& ids) const { return decode(ids.data(), ids.size()); }
  // The bytes one token stands for in decoded text (streaming output; bits per byte). For the
  // byte tokenizer and for models made by `ctxlab tokenizer train`, concatenating token_text over
  // encode(x) gives x back exactly.
  virtual std::string token_text(int32_t id) const = 0;
  // The serialized model ("" for bytes) and a short description for logs.
  virtual std::string model_bytes() const { return ""; }
  virtual std::string describe() const = 0;
  // FNV-1a 64 of type + model bytes, hex: two tokenizers are the same iff their fingerprints are.
  std::string fingerprint() const;
};

class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  std::string type() const override { return "bytes"; }
  int64_t vocab_size() const override { return kVocabSize; }
  std::vector<int32_t> encode(const std::string& text) const override;
  using Tokenizer::decode;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::string token_text(int32_t id) const override;
  std::string describe() const override { return "bytes (vocab 256)"; }
};

// The vocabulary of pre-tokenized data (--vocab N without --tokenizer: token files made by a
// tokenizer ctxlab does not have): ids 0..N-1 that stand for no known text. encode refuses text;
// every token's text is empty, so bits per byte is undefined (reported as 0) for such runs.
class IdTokenizer : public Tokenizer {
 public:
  explicit IdTokenizer(int64_t vocab);
  std::string type() const override { return "ids"; }
  int64_t vocab_size() const override { return vocab_; }
  std::vector<int32_t> encode(const std::string& text) const override;
  using Tokenizer::decode;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::string token_text(int32_t) const override { return ""; }
  std::string describe() const override;

 private:
  int64_t vocab_;
};

// Free-function forms of the byte tokenizer.
std::vector<int32_t> encode_bytes(const std::string& text);
std::string decode_bytes(const std::vector<int32_t>& ids);

// Reads a text file and encodes it with `tok` (nullptr: bytes). Errors name the file: missing,
// a directory, unreadable.
std::vector<int32_t> load_text_tokens(const std::string& path, const Tokenizer* tok = nullptr);

// The shared byte tokenizer (the default everywhere a tokenizer is optional).
std::shared_ptr<const Tokenizer> byte_tokenizer();

// Loads a tokenizer model file (a SentencePiece .model). Errors name the file.
std::shared_ptr<const Tokenizer> load_tokenizer_file(const std::string& path);

// Checkpoint metadata (all values strings, safetensors __metadata__):
//   "tokenizer":       JSON {"type": "bytes"|"sentencepiece"|"ids", "vocab_size": N, "fingerprint": hex}
//   "tokenizer_model": the SentencePiece ModelProto, base64 (absent for bytes)
std::map<std::string, std::string> tokenizer_metadata(const Tokenizer& tok);
// The tokenizer recorded in `meta`; nullptr when the file records none (checkpoints written
// before tokenizers were recorded, `ctxlab init`: their text is bytes). Errors name `source`.
std::shared_ptr<const Tokenizer> tokenizer_from_metadata(const std::map<std::string, std::string>& meta,
                                                         const std::string& source);

}  // namespace ctx
