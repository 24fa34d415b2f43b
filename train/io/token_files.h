// train/io/token_files.h — pre-tokenized corpora: the two `.bin` layouts researchers already have.
//   nanoGPT: the file is the tokens, uint16 little-endian, nothing else (its prepare.py's
//            train.bin / val.bin).
//   llm.c:   a header of 256 little-endian int32 (1024 bytes): [0] magic 20240520, [1] version
//            (1 = uint16 tokens), [2] the token count; then that many uint16 tokens (dev/data's
//            fineweb / tinyshakespeare shards).
// A file whose first int32 is the magic is read as llm.c; any other as nanoGPT, except one that
// looks like a damaged llm.c shard (its size is 1024 + 2 x header[2]): a wrong magic is an error
// then, not 512 garbage tokens. A `.u16` file is always read as nanoGPT (raw uint16, no header
// detection). Files are memory-mapped read-only; the tokens are never copied.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "train/io/token_stream.h"

namespace ctx {

constexpr int32_t kLlmcMagic = 20240520;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

struct TokenFileLayout {
  std::string format;     // "nanogpt" | "llm.c"
  int64_t offset = 0;     // byte offset of the first token
  int64_t count = 0;      // uint16 tokens
};

// The layout of a token file from its bytes (`size` of them; only the header is read). Errors name
// `path`, the field and the expected value: truncated llm.c header, bad magic, version other than
// 1, header count disagreeing with the file size, an odd byte count, no tokens at all.
// `detect_header` false: raw uint16 whatever the first bytes (`.u16` files).
TokenFileLayout token_file_layout(const unsigned char* bytes, size_t size, const std::string& path,
                                  bool detect_header = true);

// `path` mapped read-only as a stream of its tokens (held by the mapping, not copied).
TokenStream map_token_file(const std::string& path);

}  // namespace ctx
