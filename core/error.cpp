// core/error.cpp — quoted_str (core/error.h).
#include "core/error.h"

namespace ctx {

std::string quoted_str(const std::string& s, size_t max_len) {
  static const char* hex = "0123456789abcdef";
  std::string out = "'";
  size_t n = 0;
  for (unsigned char c : s) {
    if (n++ == max_len) {
      out += "...";
      break;
    }
    if (c == '\\' || c == '\'') {
      out += '\\';
      out += (char)c;
    } else if (c >= 0x20 && c < 0x7f) {
      out += (char)c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  out += "'";
  return out;
}

}  // namespace ctx
