// train/io/jsonl.h — JSON Lines corpora (one JSON object per line, the text of one document in a
// string field, "text" by default: the layout of most Hugging Face dataset dumps).
#pragma once
#include <string>

namespace ctx {

// The documents of the JSONL bytes [begin, end) joined into one text, each followed by '\n'.
// Blank lines are skipped; a trailing '\r' (CRLF files) is ignored. Errors name `path` and the
// 1-based line number: not valid JSON, not an object, no `field`, `field` not a string.
std::string jsonl_text(const char* begin, const char* end, const std::string& field, const std::string& path);

}  // namespace ctx
