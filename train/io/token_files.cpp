// train/io/token_files.cpp — nanoGPT / llm.c token files: header checks and the read-only mapping
// (see token_files.h).
#include "train/io/token_files.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace ctx {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "token files are little-endian and read in place: a big-endian host would need a byte swap");

namespace {

int32_t le_i32(const unsigned char* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// A read-only mapping of a whole file, unmapped when the last stream using it goes.
struct Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

}  // namespace

TokenFileLayout token_file_layout(const unsigned char* bytes, size_t size, const std::string& path,
                                  bool detect_header) {
  TokenFileLayout l;
  const int32_t first = detect_header && size >= 4 ? le_i32(bytes) : 0;
  // a damaged llm.c shard: the size fits its header's count, but the magic is wrong
  const bool llmc_sized = detect_header && size >= (size_t)kLlmcHeaderBytes &&
                          le_i32(bytes + 8) > 0 &&
                          (int64_t)size == kLlmcHeaderBytes + 2 * (int64_t)le_i32(bytes + 8);
  if (first == kLlmcMagic) {
    l.format = "llm.c";
    CTX_CHECK(size >= (size_t)kLlmcHeaderBytes, path, ": llm.c token file: truncated header: ", size,
              " bytes, expected a header of 256 int32 (", kLlmcHeaderBytes, " bytes)");
    const int32_t version = le_i32(bytes + 4), count = le_i32(bytes + 8);
    CTX_CHECK(version == 1, path, ": llm.c token file: header[1] (version) is ", version,
              ", expected 1 (uint16 tokens; version 2, uint32 tokens, is not supported)");
    CTX_CHECK(count >= 0, path, ": llm.c token file: header[2] (token count) is ", count, ", expected >= 0");
    const int64_t want = kLlmcHeaderBytes + 2 * (int64_t)count;
    CTX_CHECK((int64_t)size == want, path, ": llm.c token file: header[2] (token count) is ", count,
              ", which needs ", want, " bytes (1024-byte header + 2 per token), but the file has ", size,
              (int64_t)size < want ? " (truncated?)" : " (trailing bytes?)");
    l.offset = kLlmcHeaderBytes;
    l.count = count;
  } else {
    CTX_CHECK(!llmc_sized, path, ": header[0] (magic) is ", first, ", expected ", kLlmcMagic,
              " for an llm.c token file (its size matches header[2] = ", le_i32(bytes + 8),
              " tokens after a 1024-byte header; a nanoGPT file that happens to match can be renamed to .u16)");
    l.format = "nanogpt";
    CTX_CHECK(size % 2 == 0, path, ": nanoGPT token file: ", size,
              " bytes is an odd byte count, expected uint16 tokens (2 bytes each)");
    l.offset = 0;
    l.count = (int64_t)size / 2;
  }
  CTX_CHECK(l.count > 0, path, ": ", l.format, " token file holds no tokens");
  return l;
}

TokenStream map_token_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    throw Error(str(path, ": cannot open token file: ", std::strerror(err)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(str(path, ": token file is not a regular file"));
  }
  auto m = std::make_shared<Mapping>();
  m->size = (size_t)st.st_size;
  if (m->size > 0) {
    void* a = ::mmap(nullptr, m->size, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    if (a == MAP_FAILED) {
      ::close(fd);
      throw Error(str(path, ": cannot memory-map token file: ", std::strerror(err)));
    }
    m->addr = a;
  }
  ::close(fd);  // the mapping stays valid
  const auto* bytes = static_cast<const unsigned char*>(m->addr);
  const bool u16 = path.size() >= 4 && path.compare(path.size() - 4, 4, ".u16") == 0;
  const TokenFileLayout l = token_file_layout(bytes, m->size, path, !u16);
  const auto* tokens = reinterpret_cast<const uint16_t*>(bytes + l.offset);
  return TokenStream::mapped(m, tokens, l.count, path, l.offset);
}

}  // namespace ctx
