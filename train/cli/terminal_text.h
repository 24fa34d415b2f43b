// train/cli/terminal_text.h — generated text on its way to a terminal (`ctxlab sample`): a model's
// bytes can be any bytes (a byte-level model early in training, or a hostile checkpoint), and ESC,
// BEL or a C1 control written raw would move the cursor, recolour or retitle the user's terminal.
// On a terminal they are shown as \xNN (newlines and tabs kept); into a pipe or a file the text is
// the model's, byte for byte. Pieces arrive one token at a time, so a C1 control's UTF-8 pair
// (0xC2 0x80..0x9F) may be split between two: its first byte is held until the next piece.
#pragma once
#include <string>

namespace ctx {

class TerminalText {
 public:
  explicit TerminalText(bool escape) : escape_(escape) {}
  // what may be written now of everything fed so far
  std::string feed(const std::string& piece);
  // the end of the text: a byte still held back
  std::string finish();

 private:
  bool escape_;
  std::string held_;  // a trailing 0xC2, waiting for the byte after it
};

// whether stdout is a terminal (isatty)
bool stdout_is_terminal();

}  // namespace ctx
