// core/cpu/gemm_reference.cpp — the reference GEMM: plain loops, f32 and f64.
// Ground truth for the fast paths (tests/test_gemm.cpp). Accumulates in double for f64 and in
// float for f32 (in the i-k-j order that vectorises), parallel over batch x rows.
#include <cstdint>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"

namespace ctx::cpu {

template <class T>
void gemm_reference(const GemmDesc& g, const T* A, const T* B, T* C) {
  const int64_t M = g.M, N = g.N, K = g.K;
  const T alpha = (T)g.alpha, beta = (T)g.beta;
  // the work: scalar multiply-adds
  CTX_OMP_IF(parallel_pays(g.batch * M * N * K), "omp parallel for collapse(2) schedule(static)",
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t i = 0; i < M; ++i) {
      const T* a = A + b * g.stride_a;
      const T* bm = B + b * g.stride_b;
      T* c = C + b * g.stride_c + i * N;
      // a(i,k): trans_a ? A[k*M + i] : A[i*K + k];  b(k,j): trans_b ? B[j*K + k] : B[k*N + j]
      if (beta == T(0)) {
        for (int64_t j = 0; j < N; ++j) c[j] = T(0);
      } else if (beta != T(1)) {
        for (int64_t j = 0; j < N; ++j) c[j] *= beta;
      }
      if (!g.trans_b) {
        for (int64_t k = 0; k < K; ++k) {
          T aik = alpha * (g.trans_a ? a[k * M + i] : a[i * K + k]);
          const T* brow = bm + k * N;
          for (int64_t j = 0; j < N; ++j) c[j] += aik * brow[j];
        }
      } else {
        for (int64_t j = 0; j < N; ++j) {
          const T* bcol = bm + j * K;
          T s = 0;
          for (int64_t k = 0; k < K; ++k) s += (g.trans_a ? a[k * M + i] : a[i * K + k]) * bcol[k];
          c[j] += alpha * s;
        }
      }
    }
  });
}

template void gemm_reference<float>(const GemmDesc&, const float*, const float*, float*);
template void gemm_reference<double>(const GemmDesc&, const double*, const double*, double*);

}  // namespace ctx::cpu
