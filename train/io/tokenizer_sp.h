// train/io/tokenizer_sp.h — SentencePiece tokenizers (Debian's libsentencepiece; the library Llama
// and T5 use): training a BPE or unigram model on a text file, and the Tokenizer over a model.
// Models trained here are lossless for any UTF-8 text: identity normalisation, no dummy prefix,
// whitespace kept, byte fallback for characters outside the vocabulary, newline as its own piece,
// no BOS/EOS (<unk> = id 0 exists but never appears). docs/training.md.
#pragma once
#include <memory>
#include <string>

#include "train/io/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ctx {

class SentencePieceTokenizer : public Tokenizer {
 public:
  // `model`: a serialized SentencePiece ModelProto; `source` names it in errors.
  SentencePieceTokenizer(const std::string& model, const std::string& source);
  ~SentencePieceTokenizer() override;
  std::string type() const override { return "sentencepiece"; }
  int64_t vocab_size() const override { return vocab_; }
  std::vector<int32_t> encode(const std::string& text) const override;
  using Tokenizer::decode;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::string token_text(int32_t id) const override;
  std::string model_bytes() const override { return model_; }
  std::string describe() const override;

 private:
  std::string model_, source_;
  int64_t vocab_ = 0;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::vector<std::string> text_;  // token_text per id
};

struct SentencePieceTrainOptions {
  std::string data;          // --data: text / JSONL files or directories (train/io/data_files.h)
  std::string field = "text";  // the text field of JSONL files
  int64_t vocab = 4000;      // vocabulary size, including the 256 byte-fallback pieces and <unk>
  std::string type = "bpe";  // bpe | unigram
  int64_t max_lines = 0;     // sample at most this many lines (0 = all)
};
// Trains a model and returns it serialized. Errors are one line naming the file or the option
// (a missing or empty file, a vocabulary too large or too small for the data, a bad type).
std::string train_sentencepiece(const SentencePieceTrainOptions& opt);

}  // namespace ctx
