// core/cpu/linear.cpp — the Linear forward on the CPU (Backend::linear, core/cpu/fused.h):
// y [R, N] = x [R, K] w^T + b as one GEMM with the bias inside it: oneDNN's bias argument when
// oneDNN runs this shape (f32), else y pre-filled with the broadcast bias and the GEMM run with
// beta = 1 (f64, or another GEMM implementation chosen). bf16 GEMM inputs (core/precision.h)
// take oneDNN's bias path with the weight's kept bf16 copy (core/cpu/bf16_convert.h), and x's
// copy kept too (bf16_copy_whole), which the backward's dw = dy^T x reads again; under
// deterministic_algorithms() they take the prefilled path like fp32. Up to 8 rows (a decode step:
// batch 1, or a few samples together) take the GEMV kernels (core/cpu/gemv.h), fp32 or bf16,
// unless the user chose a GEMM implementation.
#include "core/cpu/fused.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/gemm.h"
#include "core/cpu/gemv.h"
#include "core/determinism.h"
#include "core/precision.h"

namespace ctx {
Backend& cpu_backend_instance();  // core/cpu/cpu_backend.cpp
}

namespace ctx::cpu {

void linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  // the arguments are checked (checks::linear, core/backend_checks.h)
  const int64_t N = w.size(0), K = w.size(1);
  const int64_t R = K ? x.numel() / K : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
  GemmDesc g;
  g.trans_b = true;
  g.M = R;
  g.N = N;
  g.K = K;
  const bool bf16 = x.dtype() == DType::F32 && gemm_precision() == Precision::BF16;
  // bf16: the weight converted once until it is written (bf16_copy), not once per call
  const uint16_t* w16 = bf16 && R > 0 && N > 0 && K > 0 ? bf16_copy(w) : nullptr;
  if (R >= 1 && R <= kGemvMaxRows && x.dtype() == DType::F32 && N > 0 && K > 0 && !gemm_impl_chosen()) {
    // a decode step's row(s): W streamed once for all of them
    if (bf16 ? gemv_bf16(w16, x.data<float>(), b.data<float>(), y.data<float>(), N, K, R)
             : gemv_f32(w.data<float>(), x.data<float>(), b.data<float>(), y.data<float>(), N, K, R))
      return;
  }
  // bf16 takes oneDNN's bias path, except under deterministic_algorithms(), where its GEMMs run in
  // OpenBLAS's shape-fixed blocks (gemm_onednn.cpp) and the bias is prefilled as below
  const bool onednn_bias = bf16 ? !(deterministic_algorithms() && openblas_available())
                                : current_gemm_impl(g) == GemmImpl::OneDNN;
  if (x.dtype() == DType::F32 && R > 0 && N > 0 && onednn_bias) {
    const uint16_t* x16 = bf16 && K > 0 ? bf16_copy_whole(x) : nullptr;
    gemm_onednn_bias(g, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(), bf16, x16, w16);
    return;
  }
  // y = broadcast(b), then y += x w^T
  Backend& be = cpu_backend_instance();
  Strided s, d;
  s.strides = {0, 1};
  d.strides = {N, 1};
  be.copy_strided(b, s, y, d, {R, N}, false);
  g.beta = 1.f;
  be.gemm(g, x, w, y);
}

}  // namespace ctx::cpu
