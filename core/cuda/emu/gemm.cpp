// core/cuda/emu/gemm.cpp — the reference GEMM of the cuBLAS stand-in and its argument checks
// and its counter records (see gemm.h).
#include "core/cuda/emu/gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/cuda/emu/emu_internal.h"

namespace cuemu::detail {

float round_tf32(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0x7f800000u) return x;  // inf / NaN unchanged
  u = (u + 0x1000u) & 0xffffe000u;                 // nearest, ties away from zero (cvt.rna.tf32)
  std::memcpy(&x, &u, 4);
  return x;
}

bool tf32_override_off() {
  static const bool off = [] {
    const char* e = std::getenv("NVIDIA_TF32_OVERRIDE");
    return e && std::strcmp(e, "0") == 0;
  }();
  return off;
}

template <class T>
void gemm_one(const GemmCall<T>& g) {
  const int m = g.m, n = g.n, k = g.k;
  if (m == 0 || n == 0) return;
  const bool no_product = (g.alpha == T(0) || k == 0);
  // op(A) materialised column-major m x k (contiguous columns: the inner loop vectorises).
  std::vector<T> a;
  if (!no_product) {
    a.resize((size_t)m * k);
    for (int p = 0; p < k; ++p)
      for (int i = 0; i < m; ++i) {
        T v = g.transa ? g.A[p + (size_t)i * g.lda] : g.A[i + (size_t)p * g.lda];
        if constexpr (std::is_same<T, float>::value)
          if (g.tf32) v = round_tf32(v);
        a[i + (size_t)p * m] = v;
      }
  }
  std::vector<T> acc(m);
  for (int j = 0; j < n; ++j) {
    std::fill(acc.begin(), acc.end(), T(0));
    if (!no_product) {
      for (int p = 0; p < k; ++p) {
        T b = g.transb ? g.B[j + (size_t)p * g.ldb] : g.B[p + (size_t)j * g.ldb];
        if constexpr (std::is_same<T, float>::value)
          if (g.tf32) b = round_tf32(b);
        const T* col = &a[(size_t)p * m];
        for (int i = 0; i < m; ++i) acc[i] += col[i] * b;
      }
    }
    T* d = g.D + (size_t)j * g.ldd;
    if (g.beta == T(0)) {
      for (int i = 0; i < m; ++i) d[i] = g.alpha * acc[i];
    } else {
      const T* c = g.C + (size_t)j * g.ldc;
      for (int i = 0; i < m; ++i) d[i] = g.alpha * acc[i] + g.beta * c[i];
    }
  }
}
template void gemm_one<float>(const GemmCall<float>&);
template void gemm_one<double>(const GemmCall<double>&);

cublasStatus_t check_gemm_shape(int transa, int transb, long long m, long long n, long long k, long long lda,
                                long long ldb, long long ldc, std::string* why) {
  auto op_ok = [](int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; };
  if (!op_ok(transa) || !op_ok(transb)) {
    *why = "transa/transb must be CUBLAS_OP_N, CUBLAS_OP_T or CUBLAS_OP_C";
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (m < 0 || n < 0 || k < 0) {
    *why = "m, n, k must be >= 0 (got " + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k) + ")";
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const long long rows_a = transa == CUBLAS_OP_N ? m : k;
  const long long rows_b = transb == CUBLAS_OP_N ? k : n;
  auto need = [](long long rows) { return rows > 1 ? rows : 1; };
  if (lda < need(rows_a)) {
    *why = "lda = " + std::to_string(lda) + " < max(1, " + std::to_string(rows_a) + "), the rows of the stored A (" +
           (transa == CUBLAS_OP_N ? "m" : "k") + ")";
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (ldb < need(rows_b)) {
    *why = "ldb = " + std::to_string(ldb) + " < max(1, " + std::to_string(rows_b) + "), the rows of the stored B (" +
           (transb == CUBLAS_OP_N ? "k" : "n") + ")";
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (ldc < need(m)) {
    *why = "ldc = " + std::to_string(ldc) + " < max(1, m = " + std::to_string(m) + ")";
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

bool check_device_operand(const char* fn, const char* name, const void* p, size_t elems, size_t elem_bytes,
                          std::string* why) {
  if (elems == 0) return true;
  if (p == nullptr) {
    *why = std::string(fn) + ": " + name + " is null";
    return false;
  }
  if (cuemu::is_device_range(p, elems * elem_bytes)) return true;
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  *why = std::string(fn) + ": " + name + " = " + b + " spans " + std::to_string(elems) + " elements (" +
         std::to_string(elems * elem_bytes) + " bytes), which " +
         (cuemu::is_device_pointer(p) ? "overrun its device allocation" : "is not device memory (not from cudaMalloc)");
  return false;
}

cublasStatus_t blas_fail(cublasStatus_t status, const std::string& message) {
  if (status == CUBLAS_STATUS_EXECUTION_FAILED) {
    raise_fault(cudaErrorIllegalAddress, message);  // an out-of-bounds access on hardware
  } else {
    report(message);  // a rejected call: no CUDA error; the message is kept and printed
  }
  return status;
}

void record_gemm(const GemmRecord& r) {
  if (!cuemu::counters()) return;
  LaunchCounters rec;
  rec.kernel = r.fn;
  const double flops = 2.0 * (double)r.m * (double)r.n * (double)r.k * r.batch;
  if (r.simt)
    rec.fp32_flops = flops;
  else
    rec.tensor_flops[(int)r.math] = flops;
  rec.dram_read_bytes = rec.bytes_read = r.read_bytes;
  rec.dram_write_bytes = rec.bytes_written = r.written_bytes;
  counters_library_call(rec);
}

}  // namespace cuemu::detail
