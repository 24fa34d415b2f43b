// train/cli/terminal_text.cpp — control characters of generated text escaped for a terminal
// (train/cli/terminal_text.h).
#include "train/cli/terminal_text.h"

#include <unistd.h>

#include "train/io/fileio.h"  // escape_control

namespace ctx {

std::string TerminalText::feed(const std::string& piece) {
  if (!escape_) return piece;
  std::string text = held_ + piece;
  held_.clear();
  if (!text.empty() && (unsigned char)text.back() == 0xc2) {  // perhaps the first half of a C1 control
    held_ = text.substr(text.size() - 1);
    text.pop_back();
  }
  return escape_control(text, /*keep_layout=*/true);
}

std::string TerminalText::finish() {
  std::string rest = escape_ ? escape_control(held_, true) : held_;
  held_.clear();
  return rest;
}

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

}  // namespace ctx
