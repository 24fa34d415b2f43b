// core/error.h — the one exception type of ctxlab and the CTX_CHECK macro.
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

}  // namespace ctx

// CTX_CHECK(cond, "op: message parts", ...) throws ctx::Error when cond is false.
#define CTX_CHECK(cond, ...)                                 \
  do {                                                       \
    if (!(cond)) throw ::ctx::Error(::ctx::str(__VA_ARGS__)); \
  } while (0)
