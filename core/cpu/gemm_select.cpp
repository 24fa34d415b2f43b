// core/cpu/gemm_select.cpp — which CPU GEMM implementation Backend::gemm uses, by name, from
// CTXLAB_GEMM or the measured default (onednn: see docs/threading.md), and the checks and
// K == 0 case every implementation shares.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>

#include "core/cpu/gemm.h"
#include "core/error.h"

namespace ctx::cpu {

namespace {
constexpr GemmImpl kAll[] = {GemmImpl::Reference, GemmImpl::OneDNN, GemmImpl::OpenBLAS};
// Measured on the model's shapes (bench/gemm, docs/threading.md): oneDNN matmul is faster.
constexpr GemmImpl kBuiltInDefault = GemmImpl::OneDNN;
std::atomic<int> g_override{-1};  // -1: no set_gemm_impl yet
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
  static const GemmImpl d = [] {
    const char* e = std::getenv("CTXLAB_GEMM");
    if (!e || !*e) return kBuiltInDefault;
    try {
      return gemm_impl_from_string(e);
    } catch (const Error& err) {
      throw Error(str("CTXLAB_GEMM: ", err.what()));
    }
  }();
  return d;
}

void set_gemm_impl(GemmImpl g) { g_override.store((int)g); }

GemmImpl current_gemm_impl() {
  const int o = g_override.load();
  return o < 0 ? default_gemm_impl() : (GemmImpl)o;
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
