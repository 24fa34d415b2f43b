// train/io/kill_point.cpp — the kill -9 test hook (see kill_point.h).
#include "train/io/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "core/settings.h"

namespace ctx {

namespace {

struct Armed {
  std::string name;  // empty: no kill point set
  int64_t n = 0;
};

// CTXLAB_TEST_KILL_AT=NAME@N, read once; a malformed value is an error naming the variable.
const Armed& armed() {
  static const Armed a = [] {
    Armed r;
    const char* v = setting_env("CTXLAB_TEST_KILL_AT");
    if (!v) return r;
    const std::string s = v;
    const size_t at = s.rfind('@');
    char* end = nullptr;
    const long long n = at == std::string::npos ? 0 : std::strtoll(s.c_str() + at + 1, &end, 10);
    CTX_CHECK(at != std::string::npos && at > 0 && end && *end == '\0' && n >= 1, "CTXLAB_TEST_KILL_AT=", s,
              ": expected NAME@N, N >= 1 (docs/settings.md)");
    r.name = s.substr(0, at);
    r.n = n;
    return r;
  }();
  return a;
}

std::atomic<int64_t> g_hits{0};

}  // namespace

void kill_point(const std::string& name) {
  const Armed& a = armed();
  if (a.name.empty() || name != a.name) return;
  if (g_hits.fetch_add(1) + 1 == a.n) ::kill(::getpid(), SIGKILL);
}

}  // namespace ctx
