// core/precision.h — the autocast setting: in what precision float32 GEMMs take their inputs.
// One process-wide value, set by the CLI (--precision, --tf32: train/cli/cli_common.cpp) or by a
// PrecisionScope, read by the backends' gemm / linear (core/cpu/gemm_onednn.cpp,
// core/cuda/gemm.cu). Semantics as torch.autocast(dtype=torch.bfloat16) for the ops it covers:
//   fp32  every GEMM exact fp32 (the default; bitwise what ctxlab computed before this setting)
//   bf16  f32 GEMMs (linear layers forward and backward, every matmul autograd issues) round A
//         and B to bf16 (round to nearest even, NaN kept: bf16_round in core/bf16.h) and
//         accumulate in fp32 into an fp32 C. Everything else stays fp32: master weights,
//         gradients, optimizer state, norms, softmax, the loss, every reduction, and the fused
//         attention's products (opt-in bf16 on the CPU: CTXLAB_BF16_ATTENTION=1,
//         core/cpu/flash_attention.h; measured to cost validation loss, docs/performance.md).
// tf32 (CUDA only; independent of the precision, moot under bf16): fp32 GEMMs may round their
// inputs to TF32 on tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32), as torch's allow_tf32.
// f64 GEMMs are never affected (gradcheck stays exact).
#pragma once
#include <string>

#include "core/dtype.h"

namespace ctx {

enum class Precision { FP32, BF16 };
const char* precision_name(Precision p);              // "fp32" | "bf16"
Precision precision_from_string(const std::string& s);  // throws one line naming the valid values

Precision gemm_precision();
void set_gemm_precision(Precision p);
bool gemm_allow_tf32();
void set_gemm_allow_tf32(bool on);

// True when this CPU has AVX512_BF16 (VDPBF16PS / VCVTNE2PS2BF16): bf16 GEMMs pay on it. False
// under CTXLAB_NO_AVX512_BF16=1 (the fallbacks tested on a CPU that has it; docs/settings.md).
bool cpu_has_avx512_bf16();

// What a user asked for (--precision, --tf32) on `dev`, applied: sets the process-wide values
// and returns the one line to print when the request cannot be honoured as asked ("" when it
// can): bf16 on a CPU without AVX512_BF16 runs fp32 (oneDNN would emulate bf16, slower than
// fp32); --tf32 on the CPU has no effect (no TF32 there).
std::string apply_precision_request(Precision p, bool tf32, Device dev);

// Sets the precision (and tf32) for its lifetime; restores the previous values after.
class PrecisionScope {
 public:
  explicit PrecisionScope(Precision p, bool tf32 = false);
  ~PrecisionScope();
  PrecisionScope(const PrecisionScope&) = delete;
  PrecisionScope& operator=(const PrecisionScope&) = delete;

 private:
  Precision saved_;
  bool saved_tf32_;
};

}  // namespace ctx
