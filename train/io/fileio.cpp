// train/io/fileio.cpp — atomic writes, whole-file reads and message quoting (see fileio.h).
#include "train/io/fileio.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "train/io/kill_point.h"

namespace ctx {

static std::string errno_text(int err) { return std::strerror(err); }

static std::string dir_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void write_file_atomic(const std::string& path, const std::vector<ByteSpan>& parts,
                       const std::string& what) {
  CTX_CHECK(!path.empty(), what, ": empty output path");
  const std::string tmp = path + ".tmp";
  auto fail = [&](const std::string& step, int err, std::FILE* f) {
    if (f) std::fclose(f);
    std::remove(tmp.c_str());
    throw Error(str(what, " ", path, ": cannot write: ", step, " ", tmp, " failed: ",
                    errno_text(err)));
  };
  // "wb" truncates a stale tmp file left by a writer that was killed half-way.
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) {
    int err = errno;
    throw Error(str(what, " ", path, ": cannot write: open ", tmp, " failed: ", errno_text(err)));
  }
  // Half of the bytes, flushed, then the kill -9 test hook (train/io/kill_point.h), then the rest.
  size_t total = 0, done = 0;
  for (const ByteSpan& p : parts) total += p.size;
  const size_t half = total / 2;
  auto put = [&](const char* data, size_t n) {
    if (n > 0 && std::fwrite(data, 1, n, f) != n) fail("write to", errno, f);
  };
  for (const ByteSpan& p : parts) {
    const char* data = static_cast<const char*>(p.data);
    if (done <= half && half < done + p.size) {  // the part holding the middle byte
      put(data, half - done);
      if (std::fflush(f) != 0) fail("flush of", errno, f);
      kill_point("write:" + path.substr(path.find_last_of('/') + 1));
      put(data + (half - done), p.size - (half - done));
    } else {
      put(data, p.size);
    }
    done += p.size;
  }
  if (std::fflush(f) != 0) fail("flush of", errno, f);
  if (::fsync(fileno(f)) != 0) fail("fsync of", errno, f);
  if (std::fclose(f) != 0) fail("close of", errno, nullptr);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail("rename over the target of", errno, nullptr);
  // Make the rename itself durable. Some filesystems refuse fsync on directories (EINVAL);
  // the data is already safe then, so only a failure to open the directory is ignored too.
  int dfd = ::open(dir_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (::fsync(dfd) != 0 && errno != EINVAL && errno != EROFS) {
      int err = errno;
      ::close(dfd);
      throw Error(str(what, " ", path, ": fsync of directory ", dir_of(path),
                      " failed: ", errno_text(err)));
    }
    ::close(dfd);
  }
}

std::string read_file(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    int err = errno;
    throw Error(str(what, " ", path, ": cannot open: ", errno_text(err)));
  }
  CTX_CHECK(S_ISREG(st.st_mode), what, " ", path, ": not a regular file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    int err = errno;
    throw Error(str(what, " ", path, ": cannot open: ", errno_text(err)));
  }
  std::string out;
  char buf[1 << 16];
  for (;;) {
    size_t n = std::fread(buf, 1, sizeof buf, f);
    out.append(buf, n);
    if (n < sizeof buf) break;
  }
  bool bad = std::ferror(f) != 0;
  int err = errno;
  std::fclose(f);
  CTX_CHECK(!bad, what, " ", path, ": read error: ", errno_text(err));
  return out;
}

std::string escape_control(const std::string& s, bool keep_layout) {
  std::string out;
  out.reserve(s.size());
  auto hex = [&](unsigned char c) {
    char b[8];
    std::snprintf(b, sizeof b, "\\x%02x", c);
    out += b;
  };
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = (unsigned char)s[i];
    if ((c < 0x20 && !(keep_layout && (c == '\n' || c == '\t'))) || c == 0x7f) {
      hex(c);
    } else if (c == 0xc2 && i + 1 < s.size() && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9f) {
      hex(c);
      hex((unsigned char)s[++i]);
    } else {
      out += (char)c;
    }
  }
  return out;
}

std::string json_error_text(const std::exception& e) {
  std::string m = e.what();
  if (!m.empty() && m[0] == '[') {
    size_t close = m.find("] ");
    if (close != std::string::npos) m = m.substr(close + 2);
  }
  // nlohmann escapes control characters in "last read: ...", but be safe: keep it one line.
  for (char& c : m)
    if (c == '\n' || c == '\r') c = ' ';
  if (m.size() > 300) m = m.substr(0, 300) + "...";
  return m;
}

}  // namespace ctx

namespace ctx {
namespace {

// SAX handler for check_json_strict. Returning false stops the parse; `error` says why.
struct StrictJsonSax {
  using json = nlohmann::json;
  std::vector<std::set<std::string>> keys;  // keys seen, one set per open object
  std::vector<std::string>* top_level_keys = nullptr;
  int depth = 0;
  std::string error;

  bool value() { return true; }
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(json::number_integer_t) { return true; }
  bool number_unsigned(json::number_unsigned_t) { return true; }
  bool number_float(json::number_float_t, const json::string_t&) { return true; }
  bool string(json::string_t&) { return true; }
  bool binary(json::binary_t&) { return true; }
  bool open() {
    if (++depth <= kMaxJsonDepth) return true;
    error = str("JSON nested deeper than ", kMaxJsonDepth, " levels");
    return false;
  }
  bool start_object(std::size_t) {
    keys.emplace_back();
    return open();
  }
  bool key(json::string_t& k) {
    if (depth == 1 && top_level_keys) top_level_keys->push_back(k);
    if (keys.back().insert(k).second) return true;
    error = str("duplicate key ", quoted_str(k),
                depth == 1 ? " at the top level" : " in a nested object", " (each key may appear once)");
    return false;
  }
  bool end_object() {
    keys.pop_back();
    --depth;
    return true;
  }
  bool start_array(std::size_t) { return open(); }
  bool end_array() {
    --depth;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
    error = "JSON parse error: " + json_error_text(e);
    return false;
  }
};

}  // namespace

void check_json_strict(const char* begin, const char* end, const std::string& where,
                       std::vector<std::string>* top_level_keys) {
  StrictJsonSax sax;
  sax.top_level_keys = top_level_keys;
  if (top_level_keys) top_level_keys->clear();
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(begin, end, &sax, nlohmann::json::input_format_t::json,
                                   /*strict=*/true, /*ignore_comments=*/false);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str(where, ": JSON parse error: ", json_error_text(e)));
  }
  if (!ok) throw Error(str(where, ": ", sax.error.empty() ? "JSON parse error" : sax.error));
}

}  // namespace ctx
