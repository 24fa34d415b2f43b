// core/cpu/gemm.h — CPU GEMM implementations behind Backend::gemm, selectable at run time.
//   reference : plain loops, f32 and f64 (the ground truth of the tests)
//   onednn    : oneDNN matmul primitive, cached per shape (f32)
//   openblas  : cblas_sgemm (f32), OpenBLAS loaded with a deliberate core type (see docs)
// CTXLAB_GEMM=onednn|openblas|reference picks one for every GEMM. Default: chosen per shape
// from measurements (docs/threading.md, bench/gemm): oneDNN, except the weight-gradient shape
// (A transposed, long K) on CPUs without AVX-512, where OpenBLAS is 2x faster; and M = 1 (the
// GEMVs of a batch-1 decode step), where OpenBLAS's sgemv avoids oneDNN's per-call cost.
#pragma once
#include <cstdint>
#include <string>

#include "core/backend.h"

namespace ctx::cpu {

enum class GemmImpl { Reference, OneDNN, OpenBLAS };
const char* gemm_impl_name(GemmImpl g);
GemmImpl gemm_impl_from_string(const std::string& s);  // throws on unknown names
GemmImpl default_gemm_impl();  // from CTXLAB_GEMM or the built-in choice
void set_gemm_impl(GemmImpl g);  // override (tests, benchmarks)
void reset_gemm_impl();          // back to CTXLAB_GEMM or the built-in choice
GemmImpl current_gemm_impl();
// The implementation for this GEMM: the one chosen (CTXLAB_GEMM or set_gemm_impl) if any, else
// the built-in per-shape choice. Backend::gemm should dispatch on this one.
GemmImpl current_gemm_impl(const GemmDesc& g);

// All implementations: row-major, g.batch items with element strides g.stride_{a,b,c}.
template <class T>
void gemm_reference(const GemmDesc& g, const T* A, const T* B, T* C);
void gemm_onednn(const GemmDesc& g, const float* A, const float* B, float* C);
// bf16 inputs (core/precision.h): A and B rounded to bf16 (core/bf16.h) and multiplied by
// oneDNN's bf16 kernels (AVX512_BF16 / AMX) with fp32 accumulation into the f32 C. A16 / B16,
// when not null, are A / B already rounded (a kept bf16_copy, core/cpu/bf16_convert.h).
void gemm_onednn_bf16(const GemmDesc& g, const float* A, const float* B, float* C,
                      const uint16_t* A16 = nullptr, const uint16_t* B16 = nullptr);
void gemm_openblas(const GemmDesc& g, const float* A, const float* B, float* C);
// C = op(A) op(B) + bias (bias [N] added to every row, inside the matmul primitive): the Linear
// forward. g.batch must be 1 and g.beta 0. bf16: inputs as gemm_onednn_bf16 (A16, B16 rounded).
void gemm_onednn_bias(const GemmDesc& g, const float* A, const float* B, const float* bias,
                      float* C, bool bf16 = false, const uint16_t* A16 = nullptr,
                      const uint16_t* B16 = nullptr);
// True when the GEMM implementation was chosen by the user (CTXLAB_GEMM or set_gemm_impl), not
// by the built-in per-shape rule: the Linear then takes no kernel of its own (cpu::gemv).
bool gemm_impl_chosen();
// Shared by the implementations: checks g's sizes (throws naming `op`); returns false when
// there is nothing to multiply (empty C; or K == 0, after setting C = beta * C).
bool gemm_prologue(const char* op, const GemmDesc& g, float* C);

bool openblas_available();  // false if libopenblas could not be loaded (openblas_config says why)

// oneDNN matmul primitives created so far (one per shape, transposes, strides, alpha, beta, input
// type and thread count; a shape seen before never creates another).
size_t onednn_gemm_cache_size();
// True when oneDNN has a bf16 matmul on this CPU (native VDPBF16PS / AMX, or its AVX-512
// emulation); false without AVX-512, where the bf16 GEMMs widen their bf16 operands back to fp32
// and run the fp32 primitive (the same arithmetic: gemm_onednn.cpp). Probed once.
bool onednn_bf16_matmul_available();

// The bf16 peak of `ctxlab bench --precision bf16` where oneDNN runs bf16 matmuls on AMX tiles:
// the best GFLOP/s of `repeats` oneDNN bf16 [n, n] x [n, n] matmuls (f32 dst) on inputs already
// in bf16 (the conversion is not timed), on omp_get_max_threads() threads.
double onednn_bf16_matmul_gflops(int64_t n, int repeats);
bool onednn_has_amx();  // oneDNN's effective ISA includes AMX (its bf16 matmuls use the tiles)

// How OpenBLAS was loaded: library, core type asked for (and why) and detected, threads.
// Loads it on first call; says why when it could not be loaded.
std::string openblas_config();

// The raw OpenBLAS entry points as loaded (for benchmarks and tests; null when unavailable).
// The enums of cblas.h are passed as ints: CblasRowMajor 101, CblasNoTrans 111, CblasTrans 112.
struct OpenBlasApi {
  void (*sgemm)(int order, int trans_a, int trans_b, int M, int N, int K, float alpha,
                const float* A, int lda, const float* B, int ldb, float beta, float* C,
                int ldc) = nullptr;
  // cblas_sgemv: the M = 1 rows of a decode step (null if the library lacks it: sgemm then).
  void (*sgemv)(int order, int trans, int M, int N, float alpha, const float* A, int lda,
                const float* x, int incx, float beta, float* y, int incy) = nullptr;
  void (*set_num_threads)(int) = nullptr;
  int (*get_num_threads)() = nullptr;
  char* (*get_corename)() = nullptr;
};
const OpenBlasApi& openblas_api();
// When something other than ctxlab already brought OpenBLAS into the process, load our view of
// it now (which pins it to one thread), so that its pool never runs beside ours. Called once by
// the CPU backend as it starts; ctxlab's own GEMMs load it lazily through openblas_api().
void pin_openblas_if_loaded();

}  // namespace ctx::cpu
