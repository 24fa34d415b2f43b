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
#include <climits>
#include <cstdint>
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

// y[i] = bf16(x[i]), round to nearest even (cuda_bf16.h)
__global__ void f32_to_bf16_kernel(const float* x, __nv_bfloat16* y, int64_t n) {
  CTX_GRID_STRIDE(i, n) { y[i] = __float2bfloat16_rn(x[i]); }
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
std::mutex g_lt_mu;  // the scratch buffers are shared by the callers of gemm_lt
Scratch g_scratch_a, g_scratch_b, g_workspace;
constexpr size_t kLtWorkspace = size_t(32) << 20;  // cuBLASLt's split-K / stream-K workspace

const __nv_bfloat16* to_bf16(Scratch& s, const float* x, int64_t n) {
  auto* y = static_cast<__nv_bfloat16*>(s.get((size_t)n * sizeof(__nv_bfloat16)));
  CTX_LAUNCH(f32_to_bf16_kernel, grid_for(n), kThreads, 0, 0, x, y, n);
  CTX_CUDA_LAUNCH_CHECK("f32_to_bf16_kernel");
  return y;
}

// Owns the cuBLASLt descriptors of one call.
struct LtCall {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t l[3] = {nullptr, nullptr, nullptr};  // first operand, second, C = D
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    for (auto* x : l)
      if (x) cublasLtMatrixLayoutDestroy(x);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

void layout(cublasLtMatrixLayout_t* l, cudaDataType_t t, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
            int64_t stride) {
  CTX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld));
  const int32_t b = (int32_t)batch;
  const int64_t st = stride;
  CTX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b));
  CTX_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof st));
}

// Row-major C = alpha op(A) op(B) + beta C in bf16 (inputs) or tf32 (compute) mode.
void gemm_lt(const GemmDesc& g, const float* A, const float* B, float* C, bool bf16) {
  std::lock_guard<std::mutex> lock(g_lt_mu);
  const void* a = A;
  const void* b = B;
  const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  if (bf16) {  // the elements the batch reads, in place (same layout and strides)
    a = to_bf16(g_scratch_a, A, (g.batch - 1) * g.stride_a + g.M * g.K);
    b = to_bf16(g_scratch_b, B, (g.batch - 1) * g.stride_b + g.K * g.N);
  }
  // column-major: D^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M]: first operand B, second A
  LtCall c;
  const cublasComputeType_t compute = bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  CTX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&c.desc, compute, CUDA_R_32F));
  const int32_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof op_b));
  CTX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof op_a));
  // stored (column-major) shapes: B is [N, K] (ld K) when trans_b, else [K, N] read as N x K (ld N)
  layout(&c.l[0], in, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.batch, g.stride_b);
  layout(&c.l[1], in, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.batch, g.stride_a);
  layout(&c.l[2], CUDA_R_32F, g.N, g.M, g.N, g.batch, g.stride_c);
  void* ws = g_workspace.get(kLtWorkspace);
  CTX_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&c.pref));
  const uint64_t ws_bytes = kLtWorkspace;
  CTX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(c.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                        sizeof ws_bytes));
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  CTX_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt_handle(), c.desc, c.l[0], c.l[1], c.l[2], c.l[2], c.pref, 1, &res,
                                                  &found));
  CTX_CHECK(found > 0, "gemm (", bf16 ? "bf16" : "tf32", "): cuBLASLt has no algorithm for M=", g.M, " N=", g.N,
            " K=", g.K, " batch=", g.batch);
  const float alpha = (float)g.alpha, beta = (float)g.beta;  // CUBLAS_COMPUTE_32F: fp32 scales
  CTX_CUBLAS_CHECK(cublasLtMatmul(lt_handle(), c.desc, &alpha, b, c.l[0], a, c.l[1], &beta, C, c.l[2], C, c.l[2],
                                  &res.algo, ws, kLtWorkspace, 0));
}

}  // namespace

void f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  if (n <= 0) return;
  CTX_LAUNCH(f32_to_bf16_kernel, grid_for(n), kThreads, 0, 0, src, reinterpret_cast<__nv_bfloat16*>(dst), n);
  CTX_CUDA_LAUNCH_CHECK("f32_to_bf16_kernel");
}

template <class T>
void gemm(const GemmDesc& g, const T* A, const T* B, T* C) {
  if (g.M == 0 || g.N == 0) return;
  CTX_CHECK(g.M <= INT_MAX && g.N <= INT_MAX && g.K <= INT_MAX && g.batch <= INT_MAX,
            "gemm: sizes M=", g.M, " N=", g.N, " K=", g.K, " batch=", g.batch, " exceed cuBLAS's int range");
  if (g.K == 0) {
    const int64_t total = g.batch * g.M * g.N;
    CTX_LAUNCH(scale_batched_kernel<T>, grid_for(total), kThreads, 0, 0, C, g.batch, g.stride_c, g.M * g.N,
               (T)g.beta);
    CTX_CUDA_LAUNCH_CHECK("scale_batched_kernel");
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    const bool bf16 = gemm_precision() == Precision::BF16;
    if (bf16 || gemm_allow_tf32()) return gemm_lt(g, A, B, C, bf16);
  }
  // column-major: C^T [N, M] = op(B)^T [N, K] * op(A)^T [K, M]
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int ldb = (int)(g.trans_b ? g.K : g.N);  // B row-major [N, K] or [K, N]
  const int lda = (int)(g.trans_a ? g.M : g.K);  // A row-major [K, M] or [M, K]
  CTX_CUBLAS_CHECK(gemm_sb(op_b, op_a, (int)g.N, (int)g.M, (int)g.K, g.alpha, B, ldb, g.stride_b, A, lda,
                           g.stride_a, g.beta, C, (int)g.N, g.stride_c, (int)g.batch));
}

template void gemm<float>(const GemmDesc&, const float*, const float*, float*);
template void gemm<double>(const GemmDesc&, const double*, const double*, double*);

}  // namespace ctx::cuda
