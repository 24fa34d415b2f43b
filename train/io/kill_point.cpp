// train/io/kill_point.cpp — the kill -9 / SIGSTOP test hook (see kill_point.h).
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
  int sig = SIGKILL;  // SIGSTOP with the ":STOP" suffix
};

// CTXLAB_TEST_KILL_AT=NAME@N[:STOP], read once; a malformed value is an error naming the variable.
const Armed& armed() {
  static const Armed a = [] {
    Armed r;
    const char* v = setting_env("CTXLAB_TEST_KILL_AT");
    if (!v) return r;
    std::string s = v;
    const std::string stop = ":STOP";
    if (s.size() > stop.size() && s.compare(s.size() - stop.size(), stop.size(), stop) == 0) {
      r.sig = SIGSTOP;
      s.resize(s.size() - stop.size());
    }
    const size_t at = s.rfind('@');
    char* end = nullptr;
    const long long n = at == std::string::npos ? 0 : std::strtoll(s.c_str() + at + 1, &end, 10);
    CTX_CHECK(at != std::string::npos && at > 0 && end && *end == '\0' && n >= 1, "CTXLAB_TEST_KILL_AT=", s,
              ": expected NAME@N or NAME@N:STOP, N >= 1 (docs/settings.md)");
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
  if (g_hits.fetch_add(1) + 1 == a.n) ::kill(::getpid(), a.sig);
}

}  // namespace ctx
