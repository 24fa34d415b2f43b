// core/precision.cpp — the process-wide GEMM precision (core/precision.h).
#include "core/precision.h"

#include <atomic>

#include "core/error.h"
#include "core/settings.h"

namespace ctx {

namespace {
std::atomic<int> g_precision{(int)Precision::FP32};
std::atomic<bool> g_tf32{false};
}  // namespace

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "fp32"; }

Precision precision_from_string(const std::string& s) {
  if (s == "fp32") return Precision::FP32;
  if (s == "bf16") return Precision::BF16;
  throw Error(str("--precision must be fp32 or bf16, got ", quoted_str(s)));
}

Precision gemm_precision() { return (Precision)g_precision.load(std::memory_order_relaxed); }
void set_gemm_precision(Precision p) { g_precision.store((int)p); }
bool gemm_allow_tf32() { return g_tf32.load(std::memory_order_relaxed); }
void set_gemm_allow_tf32(bool on) { g_tf32.store(on); }

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = __builtin_cpu_supports("avx512bf16") && !setting_flag("CTXLAB_NO_AVX512_BF16", false);
  return has;
#else
  return false;
#endif
}

std::string apply_precision_request(Precision p, bool tf32, Device dev) {
  std::string note;
  if (dev == Device::CPU && p == Precision::BF16 && !cpu_has_avx512_bf16()) {
    note = "--precision bf16: this CPU has no avx512_bf16; running fp32 instead";
    p = Precision::FP32;
  }
  if (dev == Device::CPU && tf32) {
    note += std::string(note.empty() ? "" : "; ") + "--tf32: no effect on the CPU (TF32 is a CUDA tensor-core mode)";
    tf32 = false;
  }
  set_gemm_precision(p);
  set_gemm_allow_tf32(tf32);
  return note;
}

PrecisionScope::PrecisionScope(Precision p, bool tf32) : saved_(gemm_precision()), saved_tf32_(gemm_allow_tf32()) {
  set_gemm_precision(p);
  set_gemm_allow_tf32(tf32);
}
PrecisionScope::~PrecisionScope() {
  set_gemm_precision(saved_);
  set_gemm_allow_tf32(saved_tf32_);
}

}  // namespace ctx
