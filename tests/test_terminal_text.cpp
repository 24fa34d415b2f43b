// tests/test_terminal_text.cpp — generated text on its way to a terminal (train/cli/terminal_text.h,
// `ctxlab sample`): C0 controls other than newline and tab, DEL and the C1 controls (UTF-8 0xC2
// 0x80..0x9F) shown as \xNN, whichever token boundaries split them; other bytes, UTF-8 text
// included, unchanged; raw mode (a pipe, a file, --raw) byte for byte. The CLI side, under a
// pseudo-terminal: reliability_escapes (tests/python/reliability_checks.py).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/cli/terminal_text.h"

namespace {
using ctx::TerminalText;

std::string through(bool escape, const std::vector<std::string>& pieces) {
  TerminalText t(escape);
  std::string out;
  for (const std::string& p : pieces) out += t.feed(p);
  return out + t.finish();
}

TEST(TerminalText, ControlsShownAsHexLayoutAndTextKept) {
  EXPECT_EQ(through(true, {"a\x1b[31mred\x07", "\n\tb"}), "a\\x1b[31mred\\x07\n\tb");
  EXPECT_EQ(through(true, {std::string("\r\x7f\0z", 4)}), "\\x0d\\x7f\\x00z");
  EXPECT_EQ(through(true, {"caf\xc3\xa9 \xe2\x80\x94 \xc2\xa0"}), "caf\xc3\xa9 \xe2\x80\x94 \xc2\xa0")
      << "UTF-8 text, U+00A0 (0xC2 0xA0) included, is not a control";
  EXPECT_EQ(through(true, {"x\xc2\x9by"}), "x\\xc2\\x9by") << "CSI as a C1 control";
}

TEST(TerminalText, AC1PairSplitBetweenTokensIsStillEscaped) {
  TerminalText t(true);
  EXPECT_EQ(t.feed("ab\xc2"), "ab") << "the first half is held back";
  EXPECT_EQ(t.feed("\x9b" "31m"), "\\xc2\\x9b31m");
  EXPECT_EQ(t.feed("\xc2"), "");
  EXPECT_EQ(t.feed("\xa9!"), "\xc2\xa9!") << "not a control: written as it was";
  EXPECT_EQ(t.feed("end\xc2"), "end");
  EXPECT_EQ(t.finish(), "\xc2") << "a last lone byte is written at the end";
  EXPECT_EQ(t.finish(), "");
}

TEST(TerminalText, RawModeIsByteForByte) {
  const std::string all = [] {
    std::string s;
    for (int c = 0; c < 256; ++c) s += (char)c;
    return s;
  }();
  EXPECT_EQ(through(false, {all.substr(0, 100), all.substr(100, 94), all.substr(194)}), all);
  const std::string esc = through(true, {all});
  for (const unsigned char c : esc) EXPECT_FALSE((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) << (int)c;
}

}  // namespace
