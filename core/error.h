// core/error.h — the one exception type of ctxlab, the CTX_CHECK macro and quoting of untrusted
// strings for messages.
// Library code never aborts on bad input: it throws ctx::Error with a message that names
// the op (or file / field) and the offending values.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ctx {

struct Error : std::runtime_error {
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void concat_into(std::ostringstream&) {}
template <class T, class... R>
void concat_into(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  concat_into(os, rest...);
}
}  // namespace detail

// str("a", 1, "b") -> "a1b"
template <class... A>
std::string str(const A&... a) {
  std::ostringstream os;
  detail::concat_into(os, a...);
  return os.str();
}

// `s` quoted for an error message: printable ASCII kept, everything else escaped (\n, \xNN), and
// cut after `max_len` characters, so that a malicious name cannot break the one-line message.
std::string quoted_str(const std::string& s, size_t max_len = 120);

}  // namespace ctx

// CTX_CHECK(cond, "op: message parts", ...) throws ctx::Error when cond is false.
#define CTX_CHECK(cond, ...)                                 \
  do {                                                       \
    if (!(cond)) throw ::ctx::Error(::ctx::str(__VA_ARGS__)); \
  } while (0)
