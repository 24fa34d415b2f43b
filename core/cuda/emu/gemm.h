// core/cuda/emu/gemm.h — the GEMM behind the cuBLAS/cuBLASLt stand-in: one column-major batch
// entry, C = alpha op(A) op(B) + beta C with accumulation in T over k in ascending order (a fixed
// order: bitwise reproducible), beta = 0 never reading C, alpha = 0 or k = 0 never reading A/B,
// optional TF32 rounding of the inputs. Plus the argument checks cuBLAS documents.
#pragma once
#include <cstddef>
#include <string>

#include "core/cuda/emu/cublas_emu.h"
#include "core/cuda/emu/emu_counters.h"
#include "core/cuda/emu/emu_internal.h"

namespace cuemu::detail {

template <class T>
struct GemmCall {
  bool transa = false, transb = false;
  int m = 0, n = 0, k = 0;
  T alpha = 1, beta = 0;
  const T* A = nullptr;
  long long lda = 0;
  const T* B = nullptr;
  long long ldb = 0;
  const T* C = nullptr;  // input C (read only when beta != 0)
  long long ldc = 0;
  T* D = nullptr;        // output (may equal C)
  long long ldd = 0;
  bool tf32 = false;     // round A and B to TF32 (10-bit mantissa) before multiplying
};

// Runs one batch entry. Arguments must have been validated.
template <class T>
void gemm_one(const GemmCall<T>& g);

// Stored extent of a column-major rows x cols matrix with leading dimension ld, in elements.
inline size_t matrix_extent(long long rows, long long cols, long long ld) {
  return (rows == 0 || cols == 0) ? 0 : (size_t)((cols - 1) * ld + rows);
}

// cuBLAS's checks: op codes, sizes >= 0, lda >= max(1, rows of stored A) etc.
// Returns CUBLAS_STATUS_SUCCESS or the status, with *why filled.
cublasStatus_t check_gemm_shape(int transa, int transb, long long m, long long n, long long k, long long lda,
                                long long ldb, long long ldc, std::string* why);

// True when [p, p + elems * elem_bytes) lies in one device allocation; else fills *why.
bool check_device_operand(const char* fn, const char* name, const void* p, size_t elems, size_t elem_bytes,
                          std::string* why);

// Records a rejected BLAS call (message retrievable through cuemu::last_fault, printed to stderr).
cublasStatus_t blas_fail(cublasStatus_t status, const std::string& message);

// The counters' record of one GEMM call (emu_counters.h; nothing when they are off): 2 m n k x
// batch FLOPs on the peak of `math` (the tensor type, or fp32 SIMT when simt), the operand extents
// read and written (elements x bytes; a GEMM reads each operand once from DRAM at best).
struct GemmRecord {
  const char* fn;
  long long m, n, k;
  int batch;
  bool simt;
  MmaType math;
  uint64_t read_bytes, written_bytes;
};
void record_gemm(const GemmRecord& r);

// A cuBLAS / cuBLASLt call on `stream`. run(compute) checks the call's device operands and, when
// compute, performs it; it holds copies of everything else (alpha and beta read at call time,
// descriptors by value). When nothing captures: run(true). Else the operands are checked now (a
// failure invalidates the stream's capture, as a kernel's bad pointer does) and the call is recorded
// when `stream` captures (its node runs it, checks again, when the graph runs), refused (the legacy
// stream while a blocking stream captures, or an invalidated capture: CUBLAS_STATUS_EXECUTION_FAILED)
// or run now.
template <class F>
cublasStatus_t run_or_capture(cudaStream_t stream, const char* fn, const F& run) {
  if (!capture_active()) return run(true);
  const cublasStatus_t st = run(false);
  if (st != CUBLAS_STATUS_SUCCESS) {
    capture_invalidate(stream, std::string(fn) + ": an operand failed its check (" + cuemu::last_fault() + ")");
    return st;
  }
  GraphWork node = [run](cudaStream_t) {
    if (run(true) == CUBLAS_STATUS_SUCCESS) return cudaSuccess;
    return sticky_error() != cudaSuccess ? sticky_error() : cudaErrorLaunchFailure;
  };
  cudaError_t ret;
  if (capture_takes(stream, fn, std::move(node), &ret))
    return ret == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
  return run(true);
}

float round_tf32(float x);
bool tf32_override_off();  // NVIDIA_TF32_OVERRIDE=0

}  // namespace cuemu::detail
