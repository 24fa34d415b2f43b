// core/cuda/gemm.cu — Backend::gemm through cuBLAS: the one place where row-major callers meet the
// column-major library. Row-major C[M, N] = op(A) op(B) is, read column-major, C^T[N, M] =
// op(B)^T op(A)^T: cuBLAS gets m = N, n = M, k = K, B's memory as its first operand and A's as
// its second, with the transposes passed through (a row-major [r, c] matrix is a column-major
// [c, r] one with ld = c). Strided batches map one to one (stride 0 broadcasts). beta = 0 does
// not read C (cuBLAS semantics; the reference zeroes C first). Math is exact fp32 / fp64: the
// handle's math mode is CUBLAS_DEFAULT_MATH (no TF32).
#include <climits>
#include <cstdint>
#include <mutex>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

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

cublasStatus_t gemm_sb(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       const float* A, int lda, long long sa, const float* B, int ldb, long long sb, float beta,
                       float* C, int ldc, long long sc, int batch) {
  return cublasSgemmStridedBatched(handle(), ta, tb, m, n, k, &alpha, A, lda, sa, B, ldb, sb, &beta, C, ldc, sc,
                                   batch);
}
cublasStatus_t gemm_sb(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                       const double* A, int lda, long long sa, const double* B, int ldb, long long sb, float beta,
                       double* C, int ldc, long long sc, int batch) {
  const double a = alpha, b = beta;
  return cublasDgemmStridedBatched(handle(), ta, tb, m, n, k, &a, A, lda, sa, B, ldb, sb, &b, C, ldc, sc, batch);
}

}  // namespace

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
