// train/io/fileio.h — small file helpers shared by the readers and writers in train/ (safetensors,
// npy, config, tokenizer): whole-file reads with clear errors, atomic writes (write <path>.tmp,
// fsync, rename over <path>, fsync the directory), strict JSON parsing (duplicate keys are an
// error), overflow-checked size arithmetic and quoting of untrusted strings for error messages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace ctx {

// One piece of a file being written.
struct ByteSpan {
  const void* data;
  size_t size;
};

// Writes the concatenation of `parts` to `path` atomically: the bytes go to `<path>.tmp`
// (a stale one left by a killed writer is overwritten), which is flushed, fsync'ed and renamed
// over `path`; then the directory is fsync'ed. On any failure the tmp file is removed, `path` is
// untouched, and a ctx::Error naming `what` (e.g. "safetensors") and the path is thrown.
void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& parts,
                       const std::string& what);

// Reads a whole regular file. Errors (missing, a directory, unreadable) name `what` and `path`.
std::string read_file(const std::string& path, const std::string& what);

// quoted_str (quoting untrusted strings for messages) is in core/error.h.

// `s` with its control characters written as \xNN (C0, DEL, and the C1 range U+0080..U+009F as
// UTF-8): text echoed from a file or an option can then never move the cursor, recolour or retitle
// a terminal, or split a one-line message. Every other byte passes unchanged. `keep_layout`: newlines
// and tabs pass too (text shown as text: train/cli/terminal_text.h).
std::string escape_control(const std::string& s, bool keep_layout = false);

// `s` cut to `max_len` characters (with "..."), for shapes and values echoed in messages.
inline std::string brief(const std::string& s, size_t max_len = 100) {
  return s.size() <= max_len ? s : s.substr(0, max_len) + "...";
}

// a * b and a + b for sizes; false on overflow.
inline bool mul_ok(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool add_ok(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}

constexpr int kMaxJsonDepth = 64;

// Checks JSON text in one SAX pass (no DOM): syntax, no duplicate key in any object (nlohmann
// would silently keep the last), nesting at most kMaxJsonDepth (copying, dumping and comparing
// nlohmann values recurse). When `top_level_keys` is given it receives the keys of the top-level
// object in file order. Throws one-line ctx::Error "<where>: JSON parse error at line L, column
// C: ..." / "<where>: duplicate key 'k' ..." / "<where>: JSON nested deeper than 64 levels".
void check_json_strict(const char* begin, const char* end, const std::string& where,
                       std::vector<std::string>* top_level_keys = nullptr);

// check_json_strict, then parse into J (nlohmann::json or nlohmann::ordered_json).
template <class J>
J parse_json_strict(const char* begin, const char* end, const std::string& where,
                    std::vector<std::string>* top_level_keys = nullptr);

// The parser's message without nlohmann's "[json.exception.parse_error.101] " prefix.
std::string json_error_text(const std::exception& e);

// ---- template definition ----
template <class J>
J parse_json_strict(const char* begin, const char* end, const std::string& where,
                    std::vector<std::string>* top_level_keys) {
  check_json_strict(begin, end, where, top_level_keys);
  try {
    return J::parse(begin, end);
  } catch (const nlohmann::json::exception& e) {  // not expected after the check
    throw Error(str(where, ": JSON parse error: ", json_error_text(e)));
  }
}

}  // namespace ctx
