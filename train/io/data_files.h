// train/io/data_files.h — what a --data value names, read one way for every verb (train, finetune,
// eval, tokenizer train). The value is a comma-separated list (the option may also be repeated; the
// CLI joins the values with commas); each entry is a file or a directory, which stands for its
// regular files with a data extension (below), in byte order of their names, not recursing and
// skipping hidden files. Each file is read by its extension:
//   .bin, .u16  pre-tokenized (train/io/token_files.h: nanoGPT uint16 or llm.c), memory-mapped
//   .jsonl      one JSON object per line, the text in `field` (train/io/jsonl.h)
//   other       UTF-8 / byte text, as it is
// A directory contributes files ending .txt, .md, .jsonl, .bin or .u16 (others are skipped).
// The sources follow one another in list order: text as if concatenated, tokens end to end.
#pragma once
#include <string>
#include <vector>

#include "train/io/token_stream.h"
#include "train/io/tokenizer.h"

namespace ctx {

struct DataSource {
  enum Kind { kText, kJsonl, kTokens };
  std::string path;
  Kind kind = kText;
};

// The files of `list`, in order. Errors name `option` (e.g. "--data"): an empty entry, a missing
// path, a directory without data files (naming the extensions).
std::vector<DataSource> data_sources(const std::string& list, const std::string& option);
bool has_token_files(const std::vector<DataSource>& sources);

// The text of a text or JSONL source (`field`: the JSONL text field).
std::string source_text(const DataSource& s, const std::string& field);

// All of `sources` as tokens: text and JSONL encoded with `tok` (the texts concatenated, then
// encoded at once), token files mapped. Every id of a token file must be below tok.vocab_size():
// otherwise an error names the file, the id's index and byte offset and the vocabulary size, and
// says that the tokenizer that made the file must be given (--vocab N or --tokenizer).
TokenStream load_tokens(const std::vector<DataSource>& sources, const Tokenizer& tok, const std::string& field);

// All of `sources` as text (training a tokenizer): token files are refused, naming `option`.
std::string load_text(const std::vector<DataSource>& sources, const std::string& field, const std::string& option);

}  // namespace ctx
