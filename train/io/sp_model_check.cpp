// train/io/sp_model_check.cpp — checks a serialized SentencePiece ModelProto before libsentencepiece
// reads it (see the header for why). Two parts: a protobuf wire-format walker (varints and
// length-delimited fields; nothing else of protobuf is needed), and a bounds check of the
// charsmap's darts-clone double array that follows every path the library's commonPrefixSearch
// can take (darts.h: unit = uint32; label = u & (1<<31 | 0xFF), has_leaf = bit 8,
// offset = (u >> 10) << ((u & 1<<9) >> 6), value = u & 0x7FFFFFFF).
#include "train/io/sp_model_check.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace ctx {
namespace {

// One field of a message: its number and, for length-delimited fields, its bytes.
struct Field {
  uint64_t number = 0;
  int wire = 0;
  std::string_view bytes;  // wire type 2 only
};

bool read_varint(std::string_view& in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const uint8_t b = (uint8_t)in.front();
    in.remove_prefix(1);
    *v |= (uint64_t)(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Calls `fn` for each field of the message `msg`; `what` names the message in errors.
void for_each_field(std::string_view msg, const std::string& where, const std::function<void(const Field&)>& fn) {
  while (!msg.empty()) {
    uint64_t tag = 0, len = 0;
    CTX_CHECK(read_varint(msg, &tag), where, ": a field tag runs past the end");
    Field f;
    f.number = tag >> 3;
    f.wire = (int)(tag & 7);
    switch (f.wire) {
      case 0:  // varint
        CTX_CHECK(read_varint(msg, &len), where, ": field ", f.number, ": a varint runs past the end");
        break;
      case 1:  // fixed64
      case 5:  // fixed32
        len = f.wire == 1 ? 8 : 4;
        CTX_CHECK(msg.size() >= len, where, ": field ", f.number, " runs past the end");
        msg.remove_prefix(len);
        break;
      case 2:  // length-delimited
        CTX_CHECK(read_varint(msg, &len) && len <= msg.size(), where, ": field ", f.number,
                  ": its length runs past the end");
        f.bytes = msg.substr(0, len);
        msg.remove_prefix(len);
        break;
      default:
        throw Error(str(where, ": field ", f.number, " has wire type ", f.wire,
                        " (SentencePiece models use 0, 1, 2 and 5)"));
    }
    fn(f);
  }
}

uint32_t unit_at(std::string_view trie, uint64_t i) {
  uint32_t u;
  std::memcpy(&u, trie.data() + 4 * i, 4);  // little-endian, as the library reads it on x86
  return u;
}
uint32_t label_of(uint32_t u) { return u & ((1U << 31) | 0xFFU); }
bool has_leaf(uint32_t u) { return ((u >> 8) & 1) == 1; }
uint64_t offset_of(uint32_t u) { return (uint64_t)(u >> 10) << ((u & (1U << 9)) >> 6); }
uint32_t value_of(uint32_t u) { return u & ((1U << 31) - 1); }

// The bytes of NormalizerSpec.precompiled_charsmap (`field` names it in the reason): every search
// path of the double array stays inside it and every rule inside the replacement strings.
void check_charsmap(const std::string& blob, const std::string& field) {
  if (blob.empty()) return;  // no normalisation rules
  const std::string& where = field;
  CTX_CHECK(blob.size() > 4, where, ": ", blob.size(), " bytes, too short for a charsmap (4-byte trie size + trie + strings)");
  uint32_t trie_bytes;
  std::memcpy(&trie_bytes, blob.data(), 4);
  CTX_CHECK(trie_bytes >= 4 && trie_bytes < blob.size() - 4, where, ": the trie size ", trie_bytes,
            " does not fit the ", blob.size(), "-byte charsmap");
  const std::string_view trie(blob.data() + 4, trie_bytes);
  const uint64_t n = trie_bytes / 4;  // units, as the library counts them
  const uint64_t strings = blob.size() - 4 - trie_bytes;
  // Every state a search can reach is a "base" b: the search reads unit b ^ c for its next byte c
  // (any of 256), follows it when that unit's label is c, and reads a leaf's value at the next base.
  std::vector<uint8_t> seen(n, 0);
  std::vector<uint64_t> todo{offset_of(unit_at(trie, 0))};
  while (!todo.empty()) {
    const uint64_t b = todo.back();
    todo.pop_back();
    CTX_CHECK((b | 0xFF) < n, where, ": the double array reaches unit ", (b | 0xFF), " of ", n, " (damaged trie)");
    if (seen[b]) continue;
    seen[b] = 1;
    for (uint32_t c = 0; c < 256; ++c) {
      const uint64_t p = b ^ c;
      const uint32_t u = unit_at(trie, p);
      if (label_of(u) != c) continue;
      const uint64_t next = p ^ offset_of(u);
      if (has_leaf(u)) {
        CTX_CHECK(next < n, where, ": a leaf of unit ", p, " points at unit ", next, " of ", n, " (damaged trie)");
        CTX_CHECK(value_of(unit_at(trie, next)) < strings, where, ": a rule points at byte ", value_of(unit_at(trie, next)),
                  " of its ", strings, "-byte replacement strings (damaged charsmap)");
      }
      todo.push_back(next);
    }
  }
}

// Throws ctx::Error with the reason alone (check_sentencepiece_model adds the source).
void check_model(const std::string& model) {
  int64_t piece_index = 0;
  for_each_field(model, "the bytes do not parse as a SentencePiece ModelProto", [&](const Field& f) {
    if (f.wire != 2) return;
    if (f.number == 1) {  // pieces: SentencePiece { piece = 1; score = 2; type = 3 }
      const std::string where = str("piece ", piece_index);
      for_each_field(f.bytes, where, [&](const Field& g) {
        if (g.number == 1 && g.wire == 2)
          CTX_CHECK(g.bytes.find('\0') == std::string_view::npos, where, " holds a NUL byte (pieces are text)");
      });
      ++piece_index;
    } else if (f.number == 3 || f.number == 5) {  // normalizer_spec, denormalizer_spec
      const std::string spec = f.number == 3 ? "normalizer_spec" : "denormalizer_spec";
      for_each_field(f.bytes, spec, [&](const Field& g) {
        if (g.number == 2 && g.wire == 2) check_charsmap(std::string(g.bytes), spec + ".precompiled_charsmap");
      });
    }
  });
}

}  // namespace

void check_sentencepiece_model(const std::string& model, const std::string& source) {
  try {
    check_model(model);
  } catch (const Error& e) {
    throw Error(str(source, ": not a SentencePiece model (", e.what(), ")"));
  }
}

}  // namespace ctx
