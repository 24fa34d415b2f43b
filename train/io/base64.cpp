// train/io/base64.cpp — RFC 4648 base64 (see base64.h).
#include "train/io/base64.h"

#include "core/error.h"

namespace ctx {

static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const uint32_t v = (uint32_t)(unsigned char)in[i] << 16 | (uint32_t)(unsigned char)in[i + 1] << 8 |
                       (uint32_t)(unsigned char)in[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  const size_t rest = in.size() - i;
  if (rest > 0) {
    uint32_t v = (uint32_t)(unsigned char)in[i] << 16;
    if (rest == 2) v |= (uint32_t)(unsigned char)in[i + 1] << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& text, const std::string& what) {
  CTX_CHECK(text.size() % 4 == 0, what, ": base64 length ", text.size(), " is not a multiple of 4");
  auto value = [&](char c, size_t pos) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return (uint32_t)(c - 'A');
    if (c >= 'a' && c <= 'z') return (uint32_t)(c - 'a' + 26);
    if (c >= '0' && c <= '9') return (uint32_t)(c - '0' + 52);
    if (c == '+') return 62;
    if (c == '/') return 63;
    throw Error(str(what, ": invalid base64 character (code ", (int)(unsigned char)c, ") at offset ", pos));
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    const bool last = i + 4 == text.size();
    const int pad = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
    CTX_CHECK(!(pad == 1 && text[i + 2] == '='), what, ": misplaced base64 padding at offset ", i + 2);
    uint32_t v = value(text[i], i) << 18 | value(text[i + 1], i + 1) << 12;
    if (pad < 2) v |= value(text[i + 2], i + 2) << 6;
    if (pad < 1) v |= value(text[i + 3], i + 3);
    out += (char)(v >> 16);
    if (pad < 2) out += (char)((v >> 8) & 255);
    if (pad < 1) out += (char)(v & 255);
  }
  return out;
}

}  // namespace ctx
