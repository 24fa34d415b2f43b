// core/cuda/gemm.cu — Backend::gemm through cuBLAS: the one place where row-major callers meet the
// column-major library. Row-major C[M, N] = op(A) op(B) is, read column-major, C^T[N, M] =
// op(B)^T op(A)^T: cuBLAS gets m = N, n = M, k = K, B's memory as its first operand and A's as
// its second, with the transposes passed through (a row-major [r, c] matrix is a column-major
// [c, r] one with ld = c). Strided batches map one to one (stride 0 broadcasts). beta = 0 does
// not read C (cuBLAS semantics; the reference zeroes C first). Math is exact fp32 / fp64 by
// default: the handle's math mode is CUBLAS_DEFAULT_MATH (no TF32).
// The speed modes of core/precision.h (fp32 GEMMs only; f64 is always exact) go through
// cuBLASLt instead, with the same column-major translation:
//   bf16  A and B rounded to bf16 by f32_to_bf16_kernel (__float2bfloat16_rn: nearest even, the
//         rounding core/bf16.h is tested equal to) into device buffers that grow to the largest
//         size seen (a warm step allocates nothing), then CUDA_R_16BF A/B, fp32 C/D,
//         CUBLAS_COMPUTE_32F (fp32 accumulation on the tensor cores);
//   tf32  fp32 A/B/C/D with CUBLAS_COMPUTE_32F_FAST_TF32.
// A warm step makes no cuBLASLt descriptor and asks no heuristic: each distinct call shape (sizes,
// strides, transposes, mode, epilogue, beta == 0, the operands' alignments) gets its matmul
// descriptor, three layouts and the heuristic's algorithm once, kept for the process
// (gemm_lt_stats counts what is made). gemm_bias_epilogue adds a bias vector in the GEMM's
// epilogue (CUBLASLT_EPILOGUE_BIAS, fp32 bias, beta = 0): the linear layer's y = x w^T + b in one
// pass over y (the exact fp32 path copies b into y and runs the GEMM with beta = 1).
#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <map>
#include <mutex>
#include <type_traits>

#include "core/cuda/check.h"
#include "core/cuda/cuda_runtime.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"
#include "core/precision.h"

namespace ctx::cuda {

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(unknown)";
  }
}

namespace {

cublasHandle_t handle() {
  static cublasHandle_t h = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    CTX_CUBLAS_CHECK(cublasCreate(&h));
    CTX_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));  // exact fp32: no TF32
    CTX_CUBLAS_CHECK(cublasSetStream(h, stream()));
  });
  return h;
}

// C is (batch) matrices of mn elements, stride_c apart: C = beta C (K == 0: nothing to multiply)
template <class T>
__global__ void scale_batched_kernel(T* C, int64_t batch, int64_t stride_c, int64_t mn, T beta) {
  CTX_GRID_STRIDE(e, batch * mn) {
    T* c = C + (e / mn) * stride_c + e % mn;
    *c = beta == T(0) ? T(0) : beta * *c;
  }
}

cublasStatus_t gemm_sb(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha,
                       const float* A, int lda, long long sa, const float* B, int ldb, long long sb, double beta,
                       float* C, int ldc, long long sc, int batch) {
  const float a = (float)alpha, b = (float)beta;
  return cublasSgemmStridedBatched(handle(), ta, tb, m, n, k, &a, A, lda, sa, B, ldb, sb, &b, C, ldc, sc, batch);
}
cublasStatus_t gemm_sb(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, double alpha,
                       const double* A, int lda, long long sa, const double* B, int ldb, long long sb, double beta,
                       double* C, int ldc, long long sc, int batch) {
  return cublasDgemmStridedBatched(handle(), ta, tb, m, n, k, &alpha, A, lda, sa, B, ldb, sb, &beta, C, ldc, sc,
                                   batch);
}

// ---- the speed modes through cuBLASLt ----

cublasLtHandle_t lt_handle() {
  static cublasLtHandle_t h = nullptr;
  static std::once_flag once;
  std::call_once(once, [] { CTX_CUBLAS_CHECK(cublasLtCreate(&h)); });
  return h;
}

// y[i] = bf16(x[i]), round to nearest even (cuda_bf16.h). Elements [head, head + 4 nq) go four
// at a time, one float4 load and one 8-byte store (the host checked that x + head is 16-byte and
// y + head 8-byte aligned); the head (< 4 elements) and the tail (< 4) one by one. Same rounding
// either way (__float2bfloat16_rn on each element).
__global__ void f32_to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n, int64_t head, int64_t nq) {
  const float4* xq = reinterpret_cast<const float4*>(x + head);
  uint2* yq = reinterpret_cast<uint2*>(y + head);
  CTX_GRID_STRIDE(q, nq) {
    const float4 v = xq[q];
    const unsigned b0 = __bfloat16_as_ushort(__float2bfloat16_rn(v.x)), b1 = __bfloat16_as_ushort(__float2bfloat16_rn(v.y));
    const unsigned b2 = __bfloat16_as_ushort(__float2bfloat16_rn(v.z)), b3 = __bfloat16_as_ushort(__float2bfloat16_rn(v.w));
    yq[q] = make_uint2(b0 | b1 << 16, b2 | b3 << 16);  // little endian: element 0 in the low half
  }
  const int64_t body_end = head + 4 * nq;
  CTX_GRID_STRIDE(e, head + (n - body_end)) {
    const int64_t i = e < head ? e : body_end + (e - head);
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

void launch_f32_to_bf16(const float* x, __nv_bfloat16* y, int64_t n) {
  // head: elements before x is 16-byte aligned (x is a float*: 4-byte aligned)
  int64_t head = (int64_t)(((16 - (reinterpret_cast<uintptr_t>(x) & 15)) & 15) / 4);
  head = std::min(head, n);
  const bool vec = (reinterpret_cast<uintptr_t>(y + head) & 7) == 0;
  const int64_t nq = vec ? (n - head) / 4 : 0;
  if (!vec) head = n;  // y cannot be stored 8 bytes at a time in step with x: all scalar
  CTX_LAUNCH(f32_to_bf16_kernel, grid_for(std::max<int64_t>(nq, n - 4 * nq)), kThreads, 0, stream(), x, y, n, head, nq);
  CTX_CUDA_LAUNCH_CHECK("f32_to_bf16_kernel");
}

// A device buffer that only grows (freed at exit by the driver).
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
  void* get(size_t need) {
    if (need > bytes) {
      if (p) CTX_CUDA_CHECK(cudaFree(p));
      CTX_CUDA_CHECK(cudaMalloc(&p, need));
      bytes = need;
    }
    return p;
  }
};
std::mutex g_lt_mu;  // the scratch buffers, the plan cache and the counters are shared by the callers of gemm_lt
Scratch g_scratch_a, g_scratch_b, g_workspace;
constexpr size_t kLtWorkspace = size_t(32) << 20;  // cuBLASLt's split-K / stream-K workspace
GemmLtStats g_lt_stats;

const __nv_bfloat16* to_bf16(Scratch& s, const float* x, int64_t n) {
  auto* y = static_cast<__nv_bfloat16*>(s.get((size_t)n * sizeof(__nv_bfloat16)));
  launch_f32_to_bf16(x, y, n);
  return y;
}

// The alignment of p in bytes, capped at 256 (cuBLASLt's default assumption for A, B, C, D).
uint32_t alignment(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 1;
  while (al < 256 && (a & al) == 0) al *= 2;
  return al;
}

// One call shape's cuBLASLt state, made once (descriptor, layouts, the heuristic's algorithm) and
// kept for the process (never destroyed: the cache outlives every caller).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t l[3] = {nullptr, nullptr, nullptr};  // first operand, second, C = D
  cublasLtMatmulAlgo_t algo;
  bool ok = false;  // the heuristic had an algorithm (the GELU epilogues may have none: the caller composes)
};
// What a plan depends on: shapes, strides, transposes, mode, epilogue, beta == 0 (the heuristic
// may pick another kernel when C is not read) and the alignments of the four pointers (the
// preference tells the heuristic; an algorithm chosen for 256-byte aligned operands may not run
// on less aligned ones).
using LtKey = std::array<int64_t, 14>;
std::map<LtKey, LtPlan>& plans() {
  static auto* m = new std::map<LtKey, LtPlan>();  // never destroyed, like the plans
  return *m;
}

void layout(cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
            int64_t stride) {
  CTX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
  ++g_lt_stats.descriptors;
  const int32_t b = (int32_t)batch;
  const int64_t st = stride;
  CTX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
  CTX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
}

// The epilogues gemm_lt runs (the bias and the aux matrix are column-major [N, M]'s: our [N] per
// column of the row-major C, and an [M, N] row-major matrix like C):
//   Bias         C = op(A) op(B) + bias
//   GeluAuxBias  aux = op(A) op(B) + bias, C = gelu_tanh(aux)
//   Dgelu        C = op(A) op(B) * gelu_tanh'(aux)
// (Not DGELU_BGRAD, the bias gradient in the epilogue: on an H200 the MLP's backward with it was no
// faster than the composition (docs/results/gpu.md, 2026-11-27 second session); llm.c also sums
// the bias gradient with a kernel of its own.)
enum class Epi : int { None, Bias, GeluAuxBias, Dgelu };
struct EpiArgs {
  Epi kind = Epi::None;
  const float* bias = nullptr;  // Bias, GeluAuxBias: read
  float* aux = nullptr;         // GeluAuxBias: written; Dgelu: read
};
cublasLtEpilogue_t lt_epilogue(Epi e) {
  switch (e) {
    case Epi::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case Epi::GeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epi::Dgelu: return CUBLASLT_EPILOGUE_DGELU;
    default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}
bool has_bias(Epi e) { return e == Epi::Bias || e == Epi::GeluAuxBias; }
bool has_aux(Epi e) { return e == Epi::GeluAuxBias || e == Epi::Dgelu; }

// Makes the plan of `key` (g, bf16, epi: as gemm_lt's; al_first / al_second / al_c: the alignments
// of the operands it passes, in bytes).
LtPlan make_plan(const GemmDesc& g, bool bf16, Epi epi, uint32_t al_first, uint32_t al_second, uint32_t al_c) {
  LtPlan p;
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  CTX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
  ++g_lt_stats.descriptors;
  const int32_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
  CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
  if (epi != Epi::None) {  // bias[i] of row i of the column-major D^T [N, M]: our bias[N] over the row-major rows
    const uint32_t ep = lt_epilogue(epi);
    CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep));
  }
  if (has_bias(epi)) {
    const int32_t bias_type = CUDA_R_32F;  // fp32, as D (the compute type 32F's bias type)
    CTX_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type));
  }
  if (has_aux(epi)) {  // aux: fp32 (D's type), laid out as D: column-major [N, M], ld N
    const int64_t ld = g.N;
    CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
  }
  // stored (column-major) shapes: B is [N, K] (ld K) when trans_b, else [K, N] read as N x K (ld N)
  layout(&p.l[0], in, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.batch, g.stride_b);
  layout(&p.l[1], in, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.batch, g.stride_a);
  layout(&p.l[2], CUDA_R_32F, g.N, g.M, g.N, g.batch, g.stride_c);
  cublasLtMatmulPreference_t pref = nullptr;
  CTX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  ++g_lt_stats.descriptors;
  const uint64_t ws_bytes = kLtWorkspace;
  CTX_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
  const uint32_t al[4] = {al_first, al_second, al_c, al_c};
  const cublasLtMatmulPreferenceAttributes_t al_attr[4] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 4; ++i)
    CTX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, al_attr[i], &al[i], sizeof al[i]));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  ++g_lt_stats.heuristics;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_handle(), p.desc, p.l[0], p.l[1], p.l[2], p.l[2], pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  // no algorithm (CUBLAS_STATUS_NOT_SUPPORTED, or none found): an epilogue the library does not
  // have for these types and shapes; the plain GEMM must always have one
  const bool none = st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && found == 0);
  if (none && epi != Epi::None) return p;  // ok = false: the caller composes
  CTX_CUBLAS_CHECK(st);
  CTX_CHECK(found > 0, "gemm (", bf16 ? "bf16" : "tf32", "): cuBLASLt has no algorithm for M=", g.M, " N=", g.N,
            " K=", g.K, " batch=", g.batch);
  p.algo = res.algo;
  p.ok = true;
  return p;
}

// Row-major C = alpha op(A) op(B) + beta C in bf16 (inputs) or tf32 (compute) mode, through the
// epilogue e (beta must be 0 with one). False, having run nothing, where cuBLASLt has no algorithm
// for the epilogue (never for Epi::None).
bool gemm_lt(const GemmDesc& g, const float* A, const float* B, float* C, bool bf16, const EpiArgs& e = {},
             Bf16Operands kept = {}) {
  std::lock_guard<std::mutex> lock(g_lt_mu);
  // column-major: D^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M]: first operand B, second A. The
  // plan is looked up before any conversion (whose scratch buffers are cudaMalloc's, 256-byte
  // aligned) so that an epilogue without an algorithm costs nothing.
  const uint32_t al_a = kept.a ? alignment(kept.a) : bf16 ? 256 : alignment(A);
  const uint32_t al_b = kept.b ? alignment(kept.b) : bf16 ? 256 : alignment(B);
  const uint32_t al_c = std::min(alignment(C), e.aux ? alignment(e.aux) : 256u);
  const LtKey key = {g.M, g.N, g.K, g.batch, g.stride_a, g.stride_b, g.stride_c,
                     (int64_t)g.trans_a << 1 | (int64_t)g.trans_b, (int64_t)bf16, (int64_t)e.kind, g.beta == 0.0,
                     al_b, al_a, al_c};
  auto it = plans().find(key);
  if (it == plans().end()) it = plans().emplace(key, make_plan(g, bf16, e.kind, al_b, al_a, al_c)).first;
  const LtPlan& p = it->second;
  if (!p.ok) return ++g_lt_stats.epilogue_fallbacks, false;
  const void* a = A;
  const void* b = B;
  if (bf16) {  // the elements the batch reads, in place (same layout and strides), or the kept copies
    if (kept.a) a = kept.a, ++g_lt_stats.kept_operands;
    else a = to_bf16(g_scratch_a, A, (g.batch - 1) * g.stride_a + g.M * g.K), ++g_lt_stats.conversions;
    if (kept.b) b = kept.b, ++g_lt_stats.kept_operands;
    else b = to_bf16(g_scratch_b, B, (g.batch - 1) * g.stride_b + g.K * g.N), ++g_lt_stats.conversions;
  }
  if (has_bias(e.kind))
    CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias));
  if (has_aux(e.kind))
    CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux,
                                                    sizeof e.aux));
  if (e.kind == Epi::Bias) ++g_lt_stats.bias_epilogues;
  if (e.kind == Epi::GeluAuxBias || e.kind == Epi::Dgelu) ++g_lt_stats.gelu_epilogues;
  void* ws = g_workspace.get(kLtWorkspace);
  const float alpha = (float)g.alpha, beta = (float)g.beta;  // CUBLAS_COMPUTE_32F: fp32 scales
  ++g_lt_stats.matmuls;
  CTX_CUBLAS_CHECK(cublasLtMatmul(lt_handle(), p.desc, &alpha, b, p.l[0], a, p.l[1], &beta, C, p.l[2], C, p.l[2],
                                  &p.algo, ws, kLtWorkspace, stream()));
  return true;
}

bool lt_mode(bool* bf16) {
  *bf16 = gemm_precision() == Precision::BF16;
  return *bf16 || gemm_allow_tf32();
}

}  // namespace

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (n <= 0) return;
  launch_f32_to_bf16(src, reinterpret_cast<__nv_bfloat16*>(dst), n);
}

GemmLtStats gemm_lt_stats() {
  std::lock_guard<std::mutex> lock(g_lt_mu);
  GemmLtStats s = g_lt_stats;
  s.plans = plans().size();
  return s;
}

namespace {
// Whether an epilogue call can go to cuBLASLt: a speed mode, sizes in its int range, beta 0, the
// bias and aux 16-byte aligned (cuBLASLt documents no alignment for the bias; its epilogues are
// reported to need 16 bytes: marian-nmt's gpu/prod.cpp, 8 failed on an A100) and the aux's ld (N)
// a multiple of 8 (the GELU epilogues' documented requirement). Tensors start 256-byte aligned:
// only an offset view takes the composed path.
bool epilogue_ok(const GemmDesc& g, bool* bf16, const void* bias, const void* aux) {
  if (!lt_mode(bf16) || g.M <= 0 || g.N <= 0 || g.K <= 0 || g.beta != 0.0) return false;
  if (g.M > INT_MAX || g.N > INT_MAX || g.K > INT_MAX || g.batch > INT_MAX) return false;
  const auto al16 = [](const void* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  return al16(bias) && al16(aux) && (aux == nullptr || (g.batch == 1 && g.N % 8 == 0));
}
}  // namespace

bool gemm_bias_epilogue(const GemmDesc& g, const float* A, const float* B, const float* bias, float* C,
                        Bf16Operands kept) {
  bool bf16 = false;
  if (!epilogue_ok(g, &bf16, bias, nullptr)) return false;
  return gemm_lt(g, A, B, C, bf16, EpiArgs{Epi::Bias, bias, nullptr}, kept);
}

bool gemm_gelu_aux_bias(const GemmDesc& g, const float* A, const float* B, const float* bias, float* aux, float* C,
                        Bf16Operands kept) {
  bool bf16 = false;
  if (!epilogue_ok(g, &bf16, bias, aux)) return false;
  return gemm_lt(g, A, B, C, bf16, EpiArgs{Epi::GeluAuxBias, bias, aux}, kept);
}

bool gemm_dgelu(const GemmDesc& g, const float* A, const float* B, const float* aux, float* C, Bf16Operands kept) {
  bool bf16 = false;
  if (!epilogue_ok(g, &bf16, nullptr, aux)) return false;
  return gemm_lt(g, A, B, C, bf16, EpiArgs{Epi::Dgelu, nullptr, const_cast<float*>(aux)}, kept);
}

template <class T>
void gemm(const GemmDesc& g, const T* A, const T* B, T* C, Bf16Operands kept) {
  if (g.M == 0 || g.N == 0) return;
  CTX_CHECK(g.M <= INT_MAX && g.N <= INT_MAX && g.K <= INT_MAX && g.batch <= INT_MAX,
            "gemm: sizes M=", g.M, " N=", g.N, " K=", g.K, " batch=", g.batch, " exceed cuBLAS's int range");
  if (g.K == 0) {
    const int64_t total = g.batch * g.M * g.N;
    CTX_LAUNCH(scale_batched_kernel<T>, grid_for(total), kThreads, 0, stream(), C, g.batch, g.stride_c, g.M * g.N,
               (T)g.beta);
    CTX_CUDA_LAUNCH_CHECK("scale_batched_kernel");
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    bool bf16 = false;
    if (lt_mode(&bf16)) {
      gemm_lt(g, A, B, C, bf16, EpiArgs{}, kept);  // Epi::None: always runs
      return;
    }
  }
  // column-major: C^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M]
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = (int)(g.trans_b ? g.K : g.N);  // B row-major [N, K] or [K, N]
  const int lda = (int)(g.trans_a ? g.M : g.K);  // A row-major [K, M] or [M, K]
  CTX_CUBLAS_CHECK(gemm_sb(op_b, op_a, (int)g.N, (int)g.M, (int)g.K, g.alpha, B, ldb, g.stride_b, A, lda,
                           g.stride_a, g.beta, C, (int)g.N, g.stride_c, (int)g.batch));
}

template void gemm<float>(const GemmDesc&, const float*, const float*, float*, Bf16Operands);
template void gemm<double>(const GemmDesc&, const double*, const double*, double*, Bf16Operands);

}  // namespace ctx::cuda
