// train/io/hf_tokenizer.h — the tokenizer files of a Hugging Face checkpoint directory
// (docs/huggingface.md). Bytes: tokenizer.json for `tokenizers` (a byte-level BPE with the 256
// byte tokens, id = byte value, and no merges) + tokenizer_config.json (PreTrainedTokenizerFast).
// SentencePiece: the model as tokenizer.model + tokenizer_config.json (LlamaTokenizer, no BOS/EOS,
// legacy mode, no added prefix space). Reading recognises exactly these two; anything else is
// reported, not guessed at.
#pragma once
#include <memory>
#include <string>

#include "train/io/tokenizer.h"

namespace ctx {

// Writes the files of `tok` into the existing directory `dir`; `context` becomes model_max_length.
void write_hf_tokenizer(const Tokenizer& tok, int64_t context, const std::string& dir);

// The tokenizer of `dir`: a SentencePiece tokenizer.model, or the byte tokenizer when tokenizer.json
// is exactly the byte-level one write_hf_tokenizer writes. nullptr when there are no tokenizer
// files, or files ctxlab has no tokenizer for (then `note`, when not null, says which and why).
std::shared_ptr<const Tokenizer> read_hf_tokenizer(const std::string& dir, std::string* note);

// The tokenizer.json text of the byte tokenizer (GPT-2's byte -> unicode table, no merges).
std::string byte_tokenizer_json();

}  // namespace ctx
