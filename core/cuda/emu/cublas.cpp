// core/cuda/emu/cublas.cpp — the cuBLAS v2 stand-in: handles, math/pointer modes, and the GEMM
// entry points (S/D gemm, strided batched, GemmEx variants) on top of gemm_one (gemm.h).
#include <mutex>
#include <set>
#include <string>

#include "core/cuda/emu/cublas_emu.h"
#include "core/cuda/emu/emu_internal.h"
#include "core/cuda/emu/gemm.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
  cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
};

using namespace cuemu::detail;

namespace {
std::mutex g_mu;
std::set<cublasContext*> g_handles;

bool live(cublasHandle_t h) {
  std::lock_guard<std::mutex> lk(g_mu);
  return h && g_handles.count(h);
}

// One cuBLAS GEMM call after its argument checks, everything copied (alpha and beta as values).
template <class T>
struct GemmJob {
  const char* fn;
  GemmCall<T> g;  // A, B, C, D set per batch entry
  const T *A, *B;
  T* C;
  long long sA, sB, sC;
  int batch;
  bool reads_ab;
  size_t ext_a, ext_b, ext_c;
  GemmRecord rec;
};

// Checks every batch entry's operands; with compute, multiplies and files the counters' record.
template <class T>
cublasStatus_t run_gemm(const GemmJob<T>& j, bool compute) {
  GemmCall<T> g = j.g;
  std::string why;
  for (int b = 0; b < j.batch; ++b) {
    g.A = j.A + b * j.sA;
    g.B = j.B + b * j.sB;
    g.D = j.C + b * j.sC;
    g.C = g.D;
    if ((j.reads_ab && (!check_device_operand(j.fn, "A", g.A, j.ext_a, sizeof(T), &why) ||
                        !check_device_operand(j.fn, "B", g.B, j.ext_b, sizeof(T), &why))) ||
        !check_device_operand(j.fn, "C", g.D, j.ext_c, sizeof(T), &why))
      return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED,
                       why + (j.batch > 1 ? " (batch entry " + std::to_string(b) + ")" : std::string()));
    if (compute) gemm_one(g);
  }
  if (compute) record_gemm(j.rec);
  return CUBLAS_STATUS_SUCCESS;
}

// Every GEMM entry point ends here: batchCount column-major products with element strides.
template <class T>
cublasStatus_t gemm_batched(const char* fn, cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb,
                            int m, int n, int k, const T* alpha, const T* A, int lda, long long sA, const T* B,
                            int ldb, long long sB, const T* beta, T* C, int ldc, long long sC, int batch,
                            bool fast_tf32, bool pedantic) {
  if (!live(h)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, std::string(fn) + ": handle not created by cublasCreate");
  std::string why;
  cublasStatus_t st = check_gemm_shape(transa, transb, m, n, k, lda, ldb, ldc, &why);
  if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(st, std::string(fn) + ": " + why);
  if (batch < 0) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, std::string(fn) + ": batchCount < 0");
  if (!alpha || !beta) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, std::string(fn) + ": null alpha or beta");
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  if (sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  GemmJob<T> j;
  j.fn = fn;
  GemmCall<T>& g = j.g;
  g.transa = transa != CUBLAS_OP_N;
  g.transb = transb != CUBLAS_OP_N;
  g.m = m;
  g.n = n;
  g.k = k;
  g.alpha = *alpha;  // host pointer mode: read at call time (a captured call keeps this value)
  g.beta = *beta;
  g.lda = lda;
  g.ldb = ldb;
  g.ldc = ldc;
  g.ldd = ldc;
  g.tf32 = std::is_same<T, float>::value && !pedantic && !tf32_override_off() &&
           (fast_tf32 || h->math == CUBLAS_TF32_TENSOR_OP_MATH);
  j.A = A;
  j.B = B;
  j.C = C;
  j.sA = sA;
  j.sB = sB;
  j.sC = sC;
  j.batch = batch;
  j.reads_ab = g.alpha != T(0) && k > 0;
  j.ext_a = matrix_extent(g.transa ? k : m, g.transa ? m : k, lda);
  j.ext_b = matrix_extent(g.transb ? n : k, g.transb ? k : n, ldb);
  j.ext_c = matrix_extent(m, n, ldc);
  const bool f64 = std::is_same<T, double>::value;
  const uint64_t in = (j.reads_ab ? (j.ext_a + j.ext_b) : 0) + (g.beta != T(0) ? j.ext_c : 0);
  j.rec = {fn, m, n, k, batch, !f64 && !g.tf32, f64 ? cuemu::MmaType::F64 : cuemu::MmaType::TF32,
           in * sizeof(T) * (uint64_t)batch, j.ext_c * sizeof(T) * (uint64_t)batch};
  return run_or_capture(h->stream, fn, [j](bool compute) { return run_gemm(j, compute); });
}

// GemmEx: the (type, compute type) pairs the emulator implements.
cublasStatus_t gemm_ex(const char* fn, cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m,
                       int n, int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda, long long sA,
                       const void* B, cudaDataType_t Btype, int ldb, long long sB, const void* beta, void* C,
                       cudaDataType_t Ctype, int ldc, long long sC, int batch, cublasComputeType_t ct) {
  if (Atype == CUDA_R_32F && Btype == CUDA_R_32F && Ctype == CUDA_R_32F &&
      (ct == CUBLAS_COMPUTE_32F || ct == CUBLAS_COMPUTE_32F_PEDANTIC || ct == CUBLAS_COMPUTE_32F_FAST_TF32))
    return gemm_batched<float>(fn, h, transa, transb, m, n, k, static_cast<const float*>(alpha),
                               static_cast<const float*>(A), lda, sA, static_cast<const float*>(B), ldb, sB,
                               static_cast<const float*>(beta), static_cast<float*>(C), ldc, sC, batch,
                               ct == CUBLAS_COMPUTE_32F_FAST_TF32, ct == CUBLAS_COMPUTE_32F_PEDANTIC);
  if (Atype == CUDA_R_64F && Btype == CUDA_R_64F && Ctype == CUDA_R_64F &&
      (ct == CUBLAS_COMPUTE_64F || ct == CUBLAS_COMPUTE_64F_PEDANTIC))
    return gemm_batched<double>(fn, h, transa, transb, m, n, k, static_cast<const double*>(alpha),
                                static_cast<const double*>(A), lda, sA, static_cast<const double*>(B), ldb, sB,
                                static_cast<const double*>(beta), static_cast<double*>(C), ldc, sC, batch, false,
                                true);
  return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED,
                   std::string(fn) + ": data types (" + std::to_string(Atype) + ", " + std::to_string(Btype) + ", " +
                       std::to_string(Ctype) + ") with compute type " + std::to_string(ct) +
                       " are not emulated (supported: CUDA_R_32F with CUBLAS_COMPUTE_32F[_PEDANTIC|_FAST_TF32], "
                       "CUDA_R_64F with CUBLAS_COMPUTE_64F[_PEDANTIC])");
}
}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  if (!handle) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: null handle pointer");
  *handle = new cublasContext();
  std::lock_guard<std::mutex> lk(g_mu);
  g_handles.insert(*handle);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!g_handles.erase(handle))
      return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: not a live handle");
  }
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: not a live handle");
  if (!valid_stream(stream)) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetStream: unknown stream");
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t* stream) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetStream: not a live handle");
  if (!stream) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetStream: null stream pointer");
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode: not a live handle");
  const int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
  if (base < 0 || base > 3) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode: unknown math mode");
  handle->math = (cublasMath_t)base;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetMathMode: not a live handle");
  if (!mode) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetMathMode: null mode pointer");
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetPointerMode: not a live handle");
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE)
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetPointerMode: unknown pointer mode");
  handle->pointer_mode = mode;  // alpha/beta are readable either way in the emulator
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetPointerMode(cublasHandle_t handle, cublasPointerMode_t* mode) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetPointerMode: not a live handle");
  if (!mode) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetPointerMode: null mode pointer");
  *mode = handle->pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void*, size_t) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetWorkspace: not a live handle");
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t s) {
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
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "licensing error";
  }
  return "unknown error";
}

cublasStatus_t cublasSgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const float* alpha, const float* A, int lda, const float* B, int ldb, const float* beta,
                           float* C, int ldc) {
  return gemm_batched<float>("cublasSgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                             false, false);
}
cublasStatus_t cublasDgemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           const double* alpha, const double* A, int lda, const double* B, int ldb,
                           const double* beta, double* C, int ldc) {
  return gemm_batched<double>("cublasDgemm", h, ta, tb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1,
                              false, true);
}
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float* alpha, const float* A, int lda, long long sA,
                                         const float* B, int ldb, long long sB, const float* beta, float* C, int ldc,
                                         long long sC, int batch) {
  return gemm_batched<float>("cublasSgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta, C,
                             ldc, sC, batch, false, false);
}
cublasStatus_t cublasDgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const double* alpha, const double* A, int lda, long long sA,
                                         const double* B, int ldb, long long sB, const double* beta, double* C,
                                         int ldc, long long sC, int batch) {
  return gemm_batched<double>("cublasDgemmStridedBatched", h, ta, tb, m, n, k, alpha, A, lda, sA, B, ldb, sB, beta,
                              C, ldc, sC, batch, false, true);
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void* alpha, const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t ct, cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmEx", h, ta, tb, m, n, k, alpha, A, Atype, lda, 0, B, Btype, ldb, 0, beta, C, Ctype, ldc,
                 0, 1, ct);
}
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda,
                                          long long sA, const void* B, cudaDataType_t Btype, int ldb, long long sB,
                                          const void* beta, void* C, cudaDataType_t Ctype, int ldc, long long sC,
                                          int batch, cublasComputeType_t ct, cublasGemmAlgo_t) {
  return gemm_ex("cublasGemmStridedBatchedEx", h, ta, tb, m, n, k, alpha, A, Atype, lda, sA, B, Btype, ldb, sB, beta,
                 C, Ctype, ldc, sC, batch, ct);
}
