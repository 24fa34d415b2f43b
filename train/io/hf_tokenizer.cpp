// train/io/hf_tokenizer.cpp — tokenizer files of a Hugging Face checkpoint directory (see hf_tokenizer.h).
#include "train/io/hf_tokenizer.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "train/io/fileio.h"

namespace ctx {
namespace {

using json = nlohmann::json;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes
// for U+0100.. in byte order. Returns the UTF-8 of byte b's character.
std::string byte_char(int b) {
  const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int cp = b;
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x)
      if (!((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF))) ++n;
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += (char)cp;
  } else {  // cp < 0x800 here
    s += (char)(0xC0 | (cp >> 6));
    s += (char)(0x80 | (cp & 0x3F));
  }
  return s;
}

const json kByteLevel = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                         {"use_regex", false}};

void write_json(const std::string& path, const json& j) {
  const std::string text = j.dump(2) + "\n";
  write_file_atomic(path, {{text.data(), text.size()}}, "Hugging Face tokenizer file");
}

}  // namespace

std::string byte_tokenizer_json() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  json j = {{"version", "1.0"},
            {"truncation", nullptr},
            {"padding", nullptr},
            {"added_tokens", json::array()},
            {"normalizer", nullptr},
            {"pre_tokenizer", kByteLevel},
            {"post_processor", nullptr},
            {"decoder", kByteLevel},
            {"model",
             {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
              {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
              {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
              {"vocab", vocab}, {"merges", json::array()}}}};
  return j.dump(2) + "\n";
}

void write_hf_tokenizer(const Tokenizer& tok, int64_t context, const std::string& dir) {
  json cfg = {{"model_max_length", context}, {"clean_up_tokenization_spaces", false}};
  if (tok.type() == "bytes") {
    const std::string text = byte_tokenizer_json();
    write_file_atomic(dir + "/tokenizer.json", {{text.data(), text.size()}}, "Hugging Face tokenizer file");
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast";
  } else {
    CTX_CHECK(tok.type() == "sentencepiece", "export: tokenizer type '", tok.type(),
              "' has no Hugging Face form (expected bytes or sentencepiece)");
    const std::string model = tok.model_bytes();
    write_file_atomic(dir + "/tokenizer.model", {{model.data(), model.size()}}, "Hugging Face tokenizer file");
    // ctxlab's SentencePiece models add no BOS/EOS and no dummy prefix: the slow LlamaTokenizer in
    // legacy mode passes text straight to SentencePiece.
    cfg["tokenizer_class"] = "LlamaTokenizer";
    cfg["add_bos_token"] = false;
    cfg["add_eos_token"] = false;
    cfg["legacy"] = true;
    cfg["add_prefix_space"] = false;
    cfg["bos_token"] = nullptr;
    cfg["eos_token"] = nullptr;
    cfg["unk_token"] = "<unk>";
  }
  write_json(dir + "/tokenizer_config.json", cfg);
}

std::shared_ptr<const Tokenizer> read_hf_tokenizer(const std::string& dir, std::string* note) {
  namespace fs = std::filesystem;
  auto say = [&](const std::string& s) {
    if (note) *note = s;
  };
  if (fs::exists(dir + "/tokenizer.model")) return load_tokenizer_file(dir + "/tokenizer.model");
  const std::string tj = dir + "/tokenizer.json";
  if (!fs::exists(tj)) {
    say(str(dir, ": no tokenizer.json or tokenizer.model; the checkpoint records no tokenizer (text reads "
            "as bytes: right only for a 256-token byte model)"));
    return nullptr;
  }
  json j = json::parse(read_file(tj, "Hugging Face tokenizer"), nullptr, /*allow_exceptions=*/false);
  if (!j.is_discarded() && j == json::parse(byte_tokenizer_json())) return byte_tokenizer();
  say(str(tj, " is not ctxlab's byte tokenizer and ctxlab has no tokenizer for it (only bytes and "
          "SentencePiece); the checkpoint records none: train on token files made with that tokenizer"));
  return nullptr;
}

}  // namespace ctx
