// core/cpu/gemm_select.cpp — which CPU GEMM implementation Backend::gemm uses: by name, from
// CTXLAB_GEMM or set_gemm_impl, else the measured per-shape default (docs/threading.md); and the
// checks and K == 0 case every implementation shares.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>

#include "core/cpu/gemm.h"
#include "core/determinism.h"
#include "core/error.h"
#include "core/settings.h"

namespace ctx::cpu {

namespace {
constexpr GemmImpl kAll[] = {GemmImpl::Reference, GemmImpl::OneDNN, GemmImpl::OpenBLAS};
constexpr int kNotSet = -1;
std::atomic<int> g_override{kNotSet};  // set_gemm_impl

// CTXLAB_GEMM, read once; kNotSet when unset.
int env_choice() {
  static const int c = [] {
    const char* e = setting_env("CTXLAB_GEMM");
    if (!e) return kNotSet;
    try {
      return (int)gemm_impl_from_string(e);
    } catch (const Error& err) {
      throw Error(str("CTXLAB_GEMM: ", err.what()));
    }
  }();
  return c;
}

// The built-in choice, measured with bench/gemm on the model's shapes (docs/threading.md):
// oneDNN's matmul wins or ties everywhere (by 35-50% on the per-head attention GEMMs) except on
// the weight gradients dY^T X (A transposed, K = the 2048 rows of a batch): there oneDNN 2.6's
// AVX2 kernels reach half of OpenBLAS's speed. With AVX-512 oneDNN runs other (brgemm) kernels,
// so the exception is limited to CPUs without it.
// M = 1 (each GEMM of a batch-1 decode step, docs/sampling.md): the call is one GEMV that
// streams the weights once; oneDNN's per-call overhead dominates it (sample on `small`, 1 thread:
// 150 tokens/s with oneDNN against 228 with CTXLAB_GEMM=openblas), so OpenBLAS's sgemv runs it.
constexpr int64_t kLongK = 1024;
bool openblas_is_faster(const GemmDesc& g) {
  static const bool avx2_only = !__builtin_cpu_supports("avx512f");
  if (g.M == 1 && g.K > 1) return openblas_available();
  return avx2_only && g.trans_a && !g.trans_b && g.K >= kLongK && openblas_available();
}
}  // namespace

const char* gemm_impl_name(GemmImpl g) {
  switch (g) {
    case GemmImpl::Reference: return "reference";
    case GemmImpl::OneDNN: return "onednn";
    case GemmImpl::OpenBLAS: return "openblas";
  }
  return "?";
}

GemmImpl gemm_impl_from_string(const std::string& s) {
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return (char)std::tolower(c); });
  std::string valid;
  for (GemmImpl g : kAll) {
    if (lower == gemm_impl_name(g)) return g;
    valid += str(valid.empty() ? "" : ", ", gemm_impl_name(g));
  }
  throw Error(str("unknown GEMM implementation '", s, "' (valid: ", valid, ")"));
}

GemmImpl default_gemm_impl() {
  const int e = env_choice();
  return e == kNotSet ? GemmImpl::OneDNN : (GemmImpl)e;
}

void set_gemm_impl(GemmImpl g) { g_override.store((int)g); }
void reset_gemm_impl() { g_override.store(kNotSet); }

GemmImpl current_gemm_impl() {
  const int o = g_override.load();
  return o == kNotSet ? default_gemm_impl() : (GemmImpl)o;
}

bool gemm_impl_chosen() { return g_override.load() != kNotSet || env_choice() != kNotSet; }

GemmImpl current_gemm_impl(const GemmDesc& g) {
  const int o = g_override.load();
  if (o != kNotSet) return (GemmImpl)o;
  const int e = env_choice();
  if (e != kNotSet) return (GemmImpl)e;
  // deterministic_algorithms(): OpenBLAS, whose blocks then follow the shape alone (the same bits
  // for any thread count, gemm_openblas.cpp); oneDNN's matmul changes its bits between 1 and 3
  // threads at the model's shapes (tests/test_gemm.cpp GemmThreading.BitsDoNotDependOnTheThreadCount).
  if (deterministic_algorithms() && openblas_available()) return GemmImpl::OpenBLAS;
  return openblas_is_faster(g) ? GemmImpl::OpenBLAS : GemmImpl::OneDNN;
}

bool gemm_prologue(const char* op, const GemmDesc& g, float* C) {
  CTX_CHECK(g.M >= 0 && g.N >= 0 && g.K >= 0 && g.batch >= 0, op, ": negative size M=", g.M,
            " N=", g.N, " K=", g.K, " batch=", g.batch);
  CTX_CHECK(g.batch <= 1 || g.stride_c != 0, op, ": stride_c 0 with batch ", g.batch,
            " would write every item to the same C");
  if (g.M == 0 || g.N == 0 || g.batch == 0) return false;
  if (g.K > 0) return true;
  for (int64_t b = 0; b < g.batch; ++b) {  // C = beta * C + alpha * (empty sum)
    float* c = C + b * g.stride_c;
    for (int64_t i = 0; i < g.M * g.N; ++i) c[i] = g.beta == 0.f ? 0.f : g.beta * c[i];
  }
  return false;
}

}  // namespace ctx::cpu
