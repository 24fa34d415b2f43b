// core/cpu/threading.cpp — the one thread policy of the CPU backend (see docs/threading.md).
// Thread count: CTXLAB_THREADS, else OMP_NUM_THREADS, else the cores in our affinity mask.
// OpenMP (our kernels) and oneDNN (built on the same libgomp) share one pool; OpenBLAS runs
// single-threaded inside our own OpenMP partition (core/cpu/gemm_openblas.cpp).
#include "core/threads.h"

#include <sched.h>  // sched_getaffinity, CPU_COUNT

#include <atomic>
#include <cstdlib>  // getenv, strtol
#include <mutex>

#include <omp.h>

#include "core/error.h"
#include "core/settings.h"

namespace ctx {

namespace {

// A positive integer from the environment variable `name`, or 0 when it is unset or empty.
int env_threads(const char* name, const char* s) {
  if (!s || !*s) return 0;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  // OMP_NUM_THREADS may be a list ("4,2"): its first entry is the outer level's count.
  CTX_CHECK(end != s && (*end == '\0' || *end == ',') && v > 0 && v <= 4096, "threading: ", name,
            "='", s, "' is not a positive thread count");
  return (int)v;
}

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return omp_get_num_procs();
}

std::atomic<int> g_threads{0};  // 0 until init_threading has run
std::atomic<bool> g_user_threads{false};
std::once_flag g_init_once;

}  // namespace

bool threads_chosen_by_user() {
  init_threading();
  return g_user_threads;
}

void init_threading() {
  std::call_once(g_init_once, [] {
    int n = env_threads("CTXLAB_THREADS", setting_env("CTXLAB_THREADS"));
    if (n == 0) n = env_threads("OMP_NUM_THREADS", std::getenv("OMP_NUM_THREADS"));  // OpenMP's own
    g_user_threads = n > 0;
    if (n == 0) n = cores_available();
    g_threads = n;
    omp_set_num_threads(n);
  });
}

int num_threads() {
  init_threading();
  return g_threads;
}

void set_num_threads(int n) {
  CTX_CHECK(n > 0, "set_num_threads: thread count must be positive, got ", n);
  init_threading();
  g_threads = n;
  omp_set_num_threads(n);  // oneDNN (OpenMP runtime) reads omp_get_max_threads() per primitive
}

}  // namespace ctx
