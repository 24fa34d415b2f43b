// core/cpu/gemm_openblas.cpp — GEMM through OpenBLAS cblas_sgemm, loaded with dlopen on first
// use so that its core type is chosen deliberately before it initialises (docs/threading.md):
//   CTXLAB_OPENBLAS_CORETYPE set      -> OPENBLAS_CORETYPE = that value while loading
//   else, CPU has AVX-512F            -> OPENBLAS_CORETYPE unset while loading (autodetect:
//                                        SkylakeX/Cooperlake kernels; these machines export
//                                        OPENBLAS_CORETYPE=Haswell, AVX2 at half speed)
//   else                              -> the environment as it is
// OpenBLAS runs on one thread; we split a GEMM over our own OpenMP threads (batch items, else
// rows of C, else columns), so only one thread pool is ever busy.
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <optional>

#include <omp.h>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/determinism.h"
#include "core/error.h"
#include "core/settings.h"

namespace ctx::cpu {

namespace {

constexpr const char* kLibrary = "libopenblas.so.0";
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;  // CBLAS_ORDER / CBLAS_TRANSPOSE

struct Loaded {
  OpenBlasApi api;
  std::string config;  // what was chosen, or why loading failed
};

// Sets (or unsets, value == nullopt) an environment variable until the scope ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) saved_ = old;
    if (value) setenv(name, value->c_str(), 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (saved_) setenv(name_, saved_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

template <class F>
void resolve(void* handle, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(handle, name));
}

Loaded load() {
  Loaded L;
  std::string core_choice;
  void* handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (handle) {
    core_choice = "none (already loaded by the process: its core type was fixed then)";
  } else {
    const char* want = setting_env("CTXLAB_OPENBLAS_CORETYPE");
    const char* env = std::getenv("OPENBLAS_CORETYPE");
    std::optional<std::string> coretype;
    if (want && *want) {
      // OpenBLAS accepts any name it knows; AVX-512 kernels on a CPU without it would crash.
      const std::string w = want;
      const bool needs_avx512 = w == "SkylakeX" || w == "Cooperlake" || w == "SapphireRapids";
      if (needs_avx512 && !__builtin_cpu_supports("avx512f")) {
        L.config = str("OpenBLAS unavailable: CTXLAB_OPENBLAS_CORETYPE=", w,
                       " needs AVX-512, which this CPU lacks");
        return L;
      }
      coretype = w;
      core_choice = str(w, " (from CTXLAB_OPENBLAS_CORETYPE)");
    } else if (__builtin_cpu_supports("avx512f")) {
      core_choice = env ? str("autodetect (CPU has AVX-512F: ignored OPENBLAS_CORETYPE=", env, ")")
                        : std::string("autodetect (CPU has AVX-512F)");
    } else if (env) {
      coretype = env;
      core_choice = str(env, " (from OPENBLAS_CORETYPE)");
    } else {
      core_choice = "autodetect";
    }
    // Only while the library initialises: the caller's environment is restored afterwards.
    // (setenv is not thread-safe: the first OpenBLAS GEMM must not overlap other threads'
    // getenv calls, which ctxlab only makes at start-up.)
    ScopedEnv core("OPENBLAS_CORETYPE", coretype);
    ScopedEnv threads("OPENBLAS_NUM_THREADS", std::string("1"));  // no pthread pool to start
    handle = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  }
  if (!handle) {
    const char* err = dlerror();
    L.config = str("OpenBLAS unavailable: dlopen(\"", kLibrary, "\") failed: ",
                   err ? err : "unknown error", " (install libopenblas0-pthread)");
    return L;
  }
  resolve(handle, "cblas_sgemm", L.api.sgemm);
  resolve(handle, "cblas_sgemv", L.api.sgemv);
  resolve(handle, "openblas_set_num_threads", L.api.set_num_threads);
  resolve(handle, "openblas_get_num_threads", L.api.get_num_threads);
  resolve(handle, "openblas_get_corename", L.api.get_corename);
  if (!L.api.sgemm || !L.api.set_num_threads) {
    L.config = str("OpenBLAS unavailable: ", kLibrary, " lacks cblas_sgemm or ",
                   "openblas_set_num_threads");
    L.api = OpenBlasApi{};
    return L;
  }
  L.api.set_num_threads(1);
  L.config = str(kLibrary, ": core type asked: ", core_choice, "; core in use: ",
                 L.api.get_corename ? L.api.get_corename() : "?",
                 "; threads: 1 (GEMMs split over ctxlab's OpenMP threads)");
  return L;
}

const Loaded& loaded() {
  static const Loaded L = load();
  return L;
}

// One cblas call on rows [i0, i1) x columns [j0, j1) of C for one batch item.
void sgemm_block(const OpenBlasApi& api, const GemmDesc& g, const float* A, const float* B,
                 float* C, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  // op(A) row i starts at A + i (stored [K, M]) or A + i*K; op(B) column j at B + j*K or B + j.
  const float* a = A + (g.trans_a ? i0 : i0 * g.K);
  const float* b = B + (g.trans_b ? j0 * g.K : j0);
  if (g.M == 1 && i1 - i0 == 1 && api.sgemv) {
    // one row of C: a GEMV over columns [j0, j1). op(A) is a K-vector either way (stored [K, 1]
    // or [1, K], contiguous). op(B)^T columns j0..j1: B stored [N, K] (trans_b) -> no-trans
    // sgemv of its rows j0..j1; stored [K, N] -> trans sgemv of its columns j0..j1.
    if (g.trans_b) api.sgemv(kRowMajor, kNoTrans, (int)(j1 - j0), (int)g.K, (float)g.alpha, b, (int)g.K, A, 1, (float)g.beta, C + j0, 1);
    else api.sgemv(kRowMajor, kTrans, (int)g.K, (int)(j1 - j0), (float)g.alpha, b, (int)g.N, A, 1, (float)g.beta, C + j0, 1);
    return;
  }
  api.sgemm(kRowMajor, g.trans_a ? kTrans : kNoTrans, g.trans_b ? kTrans : kNoTrans,
            (int)(i1 - i0), (int)(j1 - j0), (int)g.K, (float)g.alpha, a, (int)(g.trans_a ? g.M : g.K), b,
            (int)(g.trans_b ? g.K : g.N), (float)g.beta, C + i0 * g.N + j0, (int)g.N);
}

// batch M N K below this (< ~10 us) is one call: the one fork threshold (core/cpu/parallel.h) at
// 1/16 unit per multiply-add (16 f32 lanes per FMA); the deterministic split uses it too
constexpr int64_t kOneThreadWork = kParallelMinWork * 16;

// The deterministic split of one batch item: a power of two (even work for 1, 2 or 4 threads)
// with blocks of at least kMinBlock rows (or columns), at most kMaxSplits: a function of the shape
// only. Each block repacks the other operand, so the split stays coarse.
int64_t shape_splits(const GemmDesc& g, int64_t align) {
  constexpr int64_t kMinBlock = 128, kMaxSplits = 4;
  if (g.batch * g.M * g.N * g.K < kOneThreadWork) return 1;
  const int64_t dim = std::max(g.M, g.N);
  int64_t s = 1;
  while (s < kMaxSplits && dim / (2 * s) >= std::max(kMinBlock, align)) s *= 2;
  return s;
}

}  // namespace

bool openblas_available() { return loaded().api.sgemm != nullptr; }
std::string openblas_config() { return loaded().config; }
const OpenBlasApi& openblas_api() { return loaded().api; }

void pin_openblas_if_loaded() {
  if (void* h = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_NOLOAD)) {
    openblas_api();
    dlclose(h);
  }
}

void gemm_openblas(const GemmDesc& g, const float* A, const float* B, float* C) {
  const Loaded& L = loaded();
  CTX_CHECK(L.api.sgemm, "gemm_openblas: ", L.config, "; use CTXLAB_GEMM=onednn");
  if (!gemm_prologue("gemm_openblas", g, C)) return;
  constexpr int64_t kMaxInt = 2147483647;
  CTX_CHECK(g.M * g.K <= kMaxInt && g.K * g.N <= kMaxInt && g.M * g.N <= kMaxInt,
            "gemm_openblas: M=", g.M, " N=", g.N, " K=", g.K, " exceeds OpenBLAS's 32-bit sizes");

  // Work split: `splits` blocks per batch item, each one single-threaded cblas call. An OpenBLAS
  // call's bits depend on its block's extent (measured on Haswell kernels), so the split that
  // follows the thread count changes the bits with it; under deterministic_algorithms() the split
  // follows the shape alone (core/determinism.h): 1 thread runs the same blocks one after another.
  const int64_t threads = threads_for(g.batch * g.M * g.N * g.K / 16);
  constexpr int64_t kAlign = 16;  // block edges on whole micro-kernel tiles
  const int64_t splits = deterministic_algorithms() ? shape_splits(g, kAlign)
                         : g.batch >= threads       ? 1
                                                    : (threads + g.batch - 1) / g.batch;
  auto block = [&](int64_t n) {
    const int64_t per = (n + splits - 1) / splits;
    return (per + kAlign - 1) / kAlign * kAlign;
  };
  const bool by_rows = g.M >= splits * kAlign || g.M >= g.N;
  const int64_t step = splits == 1 ? (by_rows ? g.M : g.N) : block(by_rows ? g.M : g.N);
  const int64_t tasks = g.batch * splits;

  const int nt = (int)std::min(threads, tasks);
  CTX_OMP_IF(threads > 1 && tasks > 1, "omp parallel for schedule(static) num_threads(nt)",
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t b = t / splits, s = t % splits;
    const float* a = A + b * g.stride_a;
    const float* bm = B + b * g.stride_b;
    float* c = C + b * g.stride_c;
    const int64_t lo = s * step, hi = std::min(lo + step, by_rows ? g.M : g.N);
    if (lo >= hi) continue;
    if (by_rows) sgemm_block(L.api, g, a, bm, c, lo, hi, 0, g.N);
    else sgemm_block(L.api, g, a, bm, c, 0, g.M, lo, hi);
  });
}

}  // namespace ctx::cpu
