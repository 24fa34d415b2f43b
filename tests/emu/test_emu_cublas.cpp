// tests/emu/test_emu_cublas.cpp — the cuBLAS / cuBLASLt stand-in against references written from
// cuBLAS's documented semantics: column-major op(A) op(B) for every transpose pair and padded
// leading dimensions, the row-major "out = in W^T" call (and a planted wrong leading dimension
// that only a row-major reference catches), ld validation, beta = 0 with NaN in C, alpha = 0,
// strided batches, double precision, TF32 only when asked, bad operands, cuBLASLt epilogues.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "tests/emu/emu_test_util.h"

namespace {

std::vector<float> random_vec(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// C(i,j) = alpha sum_p op(A)(i,p) op(B)(p,j) + beta C(i,j), column-major, in double.
std::vector<float> ref_gemm(bool ta, bool tb, int m, int n, int k, float alpha, const std::vector<float>& A, int lda,
                            const std::vector<float>& B, int ldb, float beta, std::vector<float> C, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0.0;
      for (int p = 0; p < k; ++p) s += (double)(ta ? A[p + i * lda] : A[i + p * lda]) * (tb ? B[j + p * ldb] : B[p + j * ldb]);
      C[i + j * ldc] = (float)(alpha * s + (beta == 0.0f ? 0.0 : beta * (double)C[i + j * ldc]));
    }
  return C;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, float tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << what << " at " << i;
}

bool close(const std::vector<float>& a, const std::vector<float>& b, float tol) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!(std::fabs(a[i] - b[i]) <= tol * (1.0f + std::fabs(b[i])))) return false;
  return true;
}

class Cublas : public Emu {
 protected:
  void SetUp() override {
    Emu::SetUp();
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cublasDestroy(h), CUBLAS_STATUS_SUCCESS);
    Emu::TearDown();
  }
  cublasHandle_t h = nullptr;
};

}  // namespace

TEST_F(Cublas, SgemmMatchesTheColumnMajorDefinitionForEveryTransposePair) {
  const int m = 5, n = 7, k = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const int lda = (ta ? k : m) + 2, ldb = (tb ? n : k) + 1, ldc = m + 3;
      const auto A = random_vec((size_t)lda * (ta ? m : k), 1), B = random_vec((size_t)ldb * (tb ? k : n), 2);
      const auto C = random_vec((size_t)ldc * n, 3);
      DeviceBuffer<float> dA(A), dB(B), dC(C);
      const float alpha = 1.5f, beta = -0.5f;
      ASSERT_EQ(cublasSgemm(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, dA.ptr,
                            lda, dB.ptr, ldb, &beta, dC.ptr, ldc),
                CUBLAS_STATUS_SUCCESS);
      expect_close(dC.download(), ref_gemm(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc), 1e-5f,
                   "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
}

TEST_F(Cublas, RowMajorLinearLayerAndAPlantedWrongLeadingDimension) {
  // out (BT x OC) = in (BT x C) W^T with W (OC x C), all row-major: column-major m = OC, n = BT, k = C.
  const int BT = 6, C = 4, OC = 5;
  const auto in = random_vec((size_t)BT * C, 4), W = random_vec((size_t)OC * C, 5);
  std::vector<float> ref((size_t)BT * OC);
  for (int r = 0; r < BT; ++r)
    for (int o = 0; o < OC; ++o) {
      double s = 0.0;
      for (int c = 0; c < C; ++c) s += (double)in[r * C + c] * W[o * C + c];
      ref[r * OC + o] = (float)s;
    }
  DeviceBuffer<float> din(in), dW(W), dout((size_t)BT * OC);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &one, dW.ptr, C, din.ptr, C, &zero, dout.ptr, OC),
            CUBLAS_STATUS_SUCCESS);
  expect_close(dout.download(), ref, 1e-5f, "out = in W^T");
  // The planted bug: W read as a column-major OC x C matrix (no transpose, lda = OC): in bounds and
  // accepted by cuBLAS, wrong numbers, which only the row-major reference shows.
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, OC, BT, C, &one, dW.ptr, OC, din.ptr, C, &zero, dout.ptr, OC),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_FALSE(close(dout.download(), ref, 1e-3f)) << "a wrong leading dimension must not match the reference";
  // A leading dimension too large for W's allocation is an out-of-bounds read: reported.
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, OC, BT, C, &one, dW.ptr, C + 1, din.ptr, C, &zero, dout.ptr, OC),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_NE(cuemu::last_fault().find("overrun its device allocation"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
}

TEST_F(Cublas, LeadingDimensionsAreValidatedAsCublasDoes) {
  DeviceBuffer<float> a(64), b(64), c(64);
  const float one = 1.0f, zero = 0.0f;
  // A stored m x k untransposed: lda >= m.
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 3, &one, a.ptr, 3, b.ptr, 3, &zero, c.ptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_NE(cuemu::last_fault().find("lda = 3"), std::string::npos) << cuemu::last_fault();
  // Transposed: stored k x m, lda >= k.
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 4, 2, 3, &one, a.ptr, 3, b.ptr, 3, &zero, c.ptr, 4),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, 4, 2, 3, &one, a.ptr, 4, b.ptr, 1, &zero, c.ptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);  // stored B is n x k: ldb >= n = 2
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 3, &one, a.ptr, 4, b.ptr, 3, &zero, c.ptr, 3),
            CUBLAS_STATUS_INVALID_VALUE);  // ldc >= m
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 3, &one, a.ptr, 4, b.ptr, 3, &zero, c.ptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(h, (cublasOperation_t)7, CUBLAS_OP_N, 4, 2, 3, &one, a.ptr, 4, b.ptr, 3, &zero, c.ptr, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 2, 3, &one, a.ptr, 4, b.ptr, 3, &zero, c.ptr, 4),
            CUBLAS_STATUS_NOT_INITIALIZED);
  // Zero-size sizes need only ld >= 1.
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 2, 3, &one, a.ptr, 1, b.ptr, 3, &zero, c.ptr, 1),
            CUBLAS_STATUS_SUCCESS);
}

TEST_F(Cublas, BetaZeroNeverReadsCAndAlphaZeroNeverReadsAB) {
  const int m = 3, n = 4, k = 5;
  const auto A = random_vec(m * k, 6), B = random_vec(k * n, 7);
  DeviceBuffer<float> dA(A), dB(B), dC((size_t)m * n);  // dC: fresh, NaN-filled
  const float one = 1.0f, zero = 0.0f, two = 2.0f;
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, m, dB.ptr, k, &zero, dC.ptr, m),
            CUBLAS_STATUS_SUCCESS);
  const auto C0 = dC.download();
  for (float v : C0) EXPECT_TRUE(std::isfinite(v));
  expect_close(C0, ref_gemm(false, false, m, n, k, 1.0f, A, m, B, k, 0.0f, std::vector<float>(m * n), m), 1e-5f, "beta 0");
  // beta != 0 does read C: NaN in C propagates.
  DeviceBuffer<float> dNan((size_t)m * n);
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, m, dB.ptr, k, &one, dNan.ptr, m),
            CUBLAS_STATUS_SUCCESS);
  for (float v : dNan.download()) EXPECT_TRUE(std::isnan(v));
  // alpha = 0: C = beta C without touching A and B (NaN-filled here).
  DeviceBuffer<float> nanA((size_t)m * k), nanB((size_t)k * n);
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &zero, nanA.ptr, m, nanB.ptr, k, &two, dC.ptr, m),
            CUBLAS_STATUS_SUCCESS);
  const auto C2 = dC.download();
  for (size_t i = 0; i < C2.size(); ++i) EXPECT_EQ(C2[i], 2.0f * C0[i]);
}

TEST_F(Cublas, StridedBatchesEqualSeparateCallsAndAreDeterministic) {
  const int m = 4, n = 3, k = 5, batch = 3;
  const long long sA = m * k + 2, sB = k * n, sC = m * n + 1;
  const auto A = random_vec(sA * batch, 8), B = random_vec(sB * batch, 9);
  DeviceBuffer<float> dA(A), dB(B), dC(std::vector<float>(sC * batch, 0.0f)), dC1(std::vector<float>(sC * batch, 0.0f));
  const float alpha = 0.5f, beta = 0.0f;
  ASSERT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA.ptr, m, sA, dB.ptr, n, sB, &beta,
                                      dC.ptr, m, sC, batch),
            CUBLAS_STATUS_SUCCESS);
  for (int b = 0; b < batch; ++b)
    ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA.ptr + b * sA, m, dB.ptr + b * sB, n, &beta,
                          dC1.ptr + b * sC, m),
              CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(bitwise_equal(dC.download(), dC1.download()));
  const auto first = dC.download();
  ASSERT_EQ(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, &alpha, dA.ptr, m, sA, dB.ptr, n, sB, &beta,
                                      dC.ptr, m, sC, batch),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(bitwise_equal(dC.download(), first)) << "fixed accumulation order";
}

TEST_F(Cublas, DgemmAndDgemmStridedBatched) {
  const int m = 3, n = 2, k = 4;
  std::vector<double> A(m * k), B(k * n);
  for (int i = 0; i < m * k; ++i) A[i] = 0.25 * i - 1.0;
  for (int i = 0; i < k * n; ++i) B[i] = 1.0 / (i + 1);
  DeviceBuffer<double> dA(A), dB(B), dC((size_t)m * n), dC2((size_t)m * n);
  const double one = 1.0, zero = 0.0;
  ASSERT_EQ(cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, m, dB.ptr, k, &zero, dC.ptr, m),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasDgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, m, 0, dB.ptr, k, 0, &zero,
                                      dC2.ptr, m, 0, 1),
            CUBLAS_STATUS_SUCCESS);
  const auto C = dC.download();
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0.0;
      for (int p = 0; p < k; ++p) s += A[i + p * m] * B[p + j * k];
      EXPECT_NEAR(C[i + j * m], s, 1e-14);
    }
  EXPECT_EQ(dC2.download(), C);
}

TEST_F(Cublas, Tf32OnlyWhenAsked) {
  // Inputs with low mantissa bits set: TF32 rounding changes the product.
  const int m = 2, n = 2, k = 2;
  const std::vector<float> A = {1.0f + 1e-6f, 1.0f + 3e-6f, 1.0f + 5e-6f, 1.0f + 7e-6f};
  const std::vector<float> B = {1.0f + 2e-6f, 1.0f + 4e-6f, 1.0f + 6e-6f, 1.0f + 8e-6f};
  DeviceBuffer<float> dA(A), dB(B), c32((size_t)m * n), ctf((size_t)m * n), cmode((size_t)m * n), cped((size_t)m * n);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, CUDA_R_32F, m, dB.ptr, CUDA_R_32F, k,
                         &zero, c32.ptr, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, CUDA_R_32F, m, dB.ptr, CUDA_R_32F, k,
                         &zero, ctf.ptr, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  for (float v : ctf.download()) EXPECT_EQ(v, 2.0f) << "TF32 rounds 1 + 1e-6 to 1";
  for (float v : c32.download()) EXPECT_GT(v, 2.0f) << "fp32 keeps the low bits";
  cublasMath_t mode;
  ASSERT_EQ(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasGetMathMode(h, &mode), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mode, CUBLAS_TF32_TENSOR_OP_MATH);
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, m, dB.ptr, k, &zero, cmode.ptr, m),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cmode.download(), ctf.download()) << "the TF32 math mode applies to Sgemm";
  ASSERT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, CUDA_R_32F, m, dB.ptr, CUDA_R_32F, k,
                         &zero, cped.ptr, CUDA_R_32F, m, CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cped.download(), c32.download()) << "pedantic ignores the math mode";
  EXPECT_EQ(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, CUDA_R_16F, m, dB.ptr, CUDA_R_16F, k,
                         &zero, cped.ptr, CUDA_R_16F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(Cublas, HostOrOverrunOperandsFailAndSayWhy) {
  DeviceBuffer<float> a(6), c(6);
  std::vector<float> host(6, 1.0f);
  const float one = 1.0f, zero = 0.0f;
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 3, &one, a.ptr, 2, host.data(), 3, &zero, c.ptr, 2),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_NE(cuemu::last_fault().find("B = "), std::string::npos) << cuemu::last_fault();
  EXPECT_NE(cuemu::last_fault().find("not device memory"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
  // A is 2 x 3 (6 floats) but a 2 x 4 extent is described.
  DeviceBuffer<float> b(12), c2(8);
  EXPECT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 4, &one, a.ptr, 2, b.ptr, 4, &zero, c2.ptr, 2),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_NE(cuemu::last_fault().find("overrun"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
}

// ---- cuBLASLt ----
namespace {
float gelu_ref(float x) { return 0.5f * x * (1.0f + std::tanh(0.7978845608f * (x + 0.044715f * x * x * x))); }
float gelu_grad_ref(float x) {
  const double e = 1e-3;
  return (float)((gelu_ref((float)(x + e)) - gelu_ref((float)(x - e))) / (2 * e));
}

struct LtCase {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  LtCase(int m, int n, int k, bool ta) {
    EXPECT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    const int32_t t = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ta ? k : m, ta ? m : k, ta ? k : m), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m), CUBLAS_STATUS_SUCCESS);
  }
  ~LtCase() {
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(lt);
  }
  void epilogue(cublasLtEpilogue_t e) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e), CUBLAS_STATUS_SUCCESS);
  }
  void bias(const float* p) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p, sizeof p), CUBLAS_STATUS_SUCCESS);
  }
  void aux(float* p, int64_t ld) {
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &p, sizeof p),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld),
              CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t run(const float* A, const float* B, float* D) {
    const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(lt, desc, &one, A, la, B, lb, &zero, D, lc, D, lc, nullptr, nullptr, 0, 0);
  }
};
}  // namespace

TEST_F(Cublas, LtHeuristicAnswersOnceAndRejectsUnsupportedTypes) {
  LtCase c(4, 3, 2, false);
  cublasLtMatmulPreference_t pref;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint64_t ws = 1 << 20;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulHeuristicResult_t res[4];
  int got = -1;
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt, c.desc, c.la, c.lb, c.lc, c.lc, pref, 4, res, &got),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, 1);
  EXPECT_EQ(res[0].state, CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t half;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&half, CUDA_R_16F, 4, 3, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt, c.desc, c.la, c.lb, c.lc, half, pref, 4, res, &got),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(got, 0);
  cublasLtMatrixLayoutDestroy(half);
  cublasLtMatmulPreferenceDestroy(pref);
}

// The heuristic's algorithm runs only on operands as aligned as the preference promised
// (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256): a caller that caches algorithms must
// key them by alignment. A pointer 4 bytes into an allocation is refused with the default
// preference, accepted with 4-byte minimums; the preference refuses a non-power of two.
TEST_F(Cublas, LtAlgorithmRunsOnlyOnOperandsAsAlignedAsItsPreference) {
  const int m = 4, n = 3, k = 2;
  const auto A = random_vec(m * k + 1, 20), B = random_vec(k * n, 21);
  DeviceBuffer<float> dA(A), dB(B), dD((size_t)m * n + 1);
  LtCase c(m, n, k, false);
  auto algo_for = [&](uint32_t align) {
    cublasLtMatmulPreference_t pref;
    EXPECT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    for (int a = CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES; align && a <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES; ++a)
      EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, (cublasLtMatmulPreferenceAttributes_t)a, &align, sizeof align),
                CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulHeuristicResult_t res;
    int got = 0;
    EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(c.lt, c.desc, c.la, c.lb, c.lc, c.lc, pref, 1, &res, &got),
              CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreferenceDestroy(pref);
    return res.algo;
  };
  const float one = 1.0f, zero = 0.0f;
  auto run = [&](const cublasLtMatmulAlgo_t& algo, const float* a, float* d) {
    return cublasLtMatmul(c.lt, c.desc, &one, a, c.la, dB.ptr, c.lb, &zero, d, c.lc, d, c.lc, &algo, nullptr, 0, 0);
  };
  const cublasLtMatmulAlgo_t dflt = algo_for(0), four = algo_for(4);
  EXPECT_EQ(run(dflt, dA.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);  // cudaMalloc: 256-byte aligned
  EXPECT_EQ(run(dflt, dA.ptr + 1, dD.ptr), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_NE(cuemu::last_fault().find("operand A is not 256-byte aligned"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(run(dflt, dA.ptr, dD.ptr + 1), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(run(four, dA.ptr + 1, dD.ptr + 1), CUBLAS_STATUS_SUCCESS);
  const auto D = dD.download();
  const std::vector<float> A1(A.begin() + 1, A.end());
  expect_close(std::vector<float>(D.begin() + 1, D.end()),
               ref_gemm(false, false, m, n, k, 1.0f, A1, m, B, k, 0.0f, std::vector<float>(m * n), m), 1e-6f,
               "offset operands");
  cublasLtMatmulPreference_t pref;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint32_t three = 3;
  EXPECT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &three, sizeof three),
            CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatmulPreferenceDestroy(pref);
}

// bf16 A and B (CUDA_R_16BF) with fp32 C/D and CUBLAS_COMPUTE_32F: D is the fp32 product of the
// widened inputs (a bf16 x bf16 product is exact in fp32; only the fp32 sum rounds); bf16 inputs
// with FAST_TF32, or a bf16 D, are refused as cuBLASLt does. The rounding of __float2bfloat16_rn
// (ties to even, canonical NaN, denormals rounded, overflow to inf) is checked on its own bits.
TEST_F(Cublas, LtBf16InputsAccumulateInFp32) {
  const uint32_t in[] = {0x3f808000, 0x3f818000, 0x3f808001, 0x7f7fffff, 0x7fc00000, 0xffc00001, 0x00018000, 0x807fffff};
  const uint16_t want[] = {0x3f80, 0x3f82, 0x3f81, 0x7f80, 0x7fff, 0x7fff, 0x0002, 0x8080};
  for (int i = 0; i < 8; ++i) {
    float f;
    std::memcpy(&f, &in[i], 4);
    EXPECT_EQ(__float2bfloat16_rn(f).x, want[i]) << std::hex << in[i];
  }
  const int m = 6, n = 5, k = 37;
  for (bool ta : {false, true}) {
    const auto W = random_vec(k * m, 20), X = random_vec(k * n, 21);
    std::vector<__nv_bfloat16> hW(W.size()), hX(X.size());
    std::vector<float> wW(W.size()), wX(X.size());  // the widened bf16 values
    for (size_t i = 0; i < W.size(); ++i) wW[i] = __bfloat162float(hW[i] = __float2bfloat16_rn(W[i]));
    for (size_t i = 0; i < X.size(); ++i) wX[i] = __bfloat162float(hX[i] = __float2bfloat16_rn(X[i]));
    DeviceBuffer<__nv_bfloat16> dW(hW), dX(hX);
    DeviceBuffer<float> dD((size_t)m * n);
    LtCase c(m, n, k, ta);
    cublasLtMatrixLayout_t la16, lb16;
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&la16, CUDA_R_16BF, ta ? k : m, ta ? m : k, ta ? k : m), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb16, CUDA_R_16BF, k, n, k), CUBLAS_STATUS_SUCCESS);
    const float one = 1.0f, zero = 0.0f;
    ASSERT_EQ(cublasLtMatmul(c.lt, c.desc, &one, dW.ptr, la16, dX.ptr, lb16, &zero, dD.ptr, c.lc, dD.ptr, c.lc, nullptr,
                             nullptr, 0, 0),
              CUBLAS_STATUS_SUCCESS);
    const auto D = dD.download();
    const auto exact16 = ref_gemm(ta, false, m, n, k, 1.0f, wW, ta ? k : m, wX, k, 0.0f, std::vector<float>(m * n), m);
    const auto exact32 = ref_gemm(ta, false, m, n, k, 1.0f, W, ta ? k : m, X, k, 0.0f, std::vector<float>(m * n), m);
    expect_close(D, exact16, 1e-5f, "bf16 inputs, fp32 accumulation");
    EXPECT_FALSE(close(D, exact32, 1e-5f)) << "the inputs were not rounded to bf16";
    const int32_t tf32 = CUBLAS_COMPUTE_32F_FAST_TF32;
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(c.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &tf32, sizeof tf32),
              CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmul(c.lt, c.desc, &one, dW.ptr, la16, dX.ptr, lb16, &zero, dD.ptr, c.lc, dD.ptr, c.lc, nullptr,
                             nullptr, 0, 0),
              CUBLAS_STATUS_NOT_SUPPORTED);
    cublasLtMatrixLayoutDestroy(la16);
    cublasLtMatrixLayoutDestroy(lb16);
  }
}

TEST_F(Cublas, LtEpiloguesBiasGeluAuxAndDgelu) {
  const int m = 5, n = 4, k = 3;
  const auto W = random_vec(k * m, 10), X = random_vec(k * n, 11), b = random_vec(m, 12);
  DeviceBuffer<float> dW(W), dX(X), db(b), dD((size_t)m * n), dAux((size_t)m * n), dPlain((size_t)m * n);
  LtCase c(m, n, k, true);  // D = W^T X, W stored k x m
  ASSERT_EQ(c.run(dW.ptr, dX.ptr, dPlain.ptr), CUBLAS_STATUS_SUCCESS);
  const auto plain = dPlain.download();
  expect_close(plain, ref_gemm(true, false, m, n, k, 1.0f, W, k, X, k, 0.0f, std::vector<float>(m * n), m), 1e-5f,
               "default epilogue");

  c.epilogue(CUBLASLT_EPILOGUE_BIAS);
  c.bias(db.ptr);
  ASSERT_EQ(c.run(dW.ptr, dX.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  auto D = dD.download();
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i)  // fp32 accumulation, then + bias: one rounding, as the hardware's epilogue
      EXPECT_EQ(D[i + j * m], plain[i + j * m] + b[i]) << "bias over rows";

  c.epilogue(CUBLASLT_EPILOGUE_GELU_AUX_BIAS);
  c.aux(dAux.ptr, m);
  ASSERT_EQ(c.run(dW.ptr, dX.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  D = dD.download();
  const auto aux = dAux.download();
  for (int i = 0; i < m * n; ++i) {
    EXPECT_FLOAT_EQ(aux[i], plain[i] + b[i % m]) << "aux holds the pre-GELU input";
    EXPECT_NEAR(D[i], gelu_ref(aux[i]), 1e-6f);
  }

  c.epilogue(CUBLASLT_EPILOGUE_DGELU);
  ASSERT_EQ(c.run(dW.ptr, dX.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  D = dD.download();
  for (int i = 0; i < m * n; ++i) EXPECT_NEAR(D[i], plain[i] * gelu_grad_ref(aux[i]), 2e-4f) << i;

  c.epilogue(CUBLASLT_EPILOGUE_GELU_AUX);
  c.aux(dAux.ptr, m - 1);  // aux ld < m
  EXPECT_EQ(c.run(dW.ptr, dX.ptr, dD.ptr), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(Cublas, LtBiasGradientOfBReducesOverK) {
  // dW-style call: D (m x n) = A (m x k) B^T... BGRADB: bias[j] = sum_p op(B)(p, j), length n.
  const int m = 3, n = 4, k = 6;
  const auto A = random_vec(m * k, 13), B = random_vec(k * n, 14);
  DeviceBuffer<float> dA(A), dB(B), dD((size_t)m * n), dbias(n);
  LtCase c(m, n, k, false);
  c.epilogue(CUBLASLT_EPILOGUE_BGRADB);
  c.bias(dbias.ptr);
  ASSERT_EQ(c.run(dA.ptr, dB.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  const auto bias = dbias.download();
  for (int j = 0; j < n; ++j) {
    double s = 0.0;
    for (int p = 0; p < k; ++p) s += B[p + j * k];
    EXPECT_NEAR(bias[j], s, 1e-5);
  }
  expect_close(dD.download(), ref_gemm(false, false, m, n, k, 1.0f, A, m, B, k, 0.0f, std::vector<float>(m * n), m),
               1e-5f, "D unchanged by BGRADB");
}

TEST_F(Cublas, LtDgeluBiasGradientReluBiasAndBiasGradientOfA) {
  const int m = 4, n = 5, k = 3;
  const auto A = random_vec(m * k, 15), B = random_vec(k * n, 16), pre = random_vec(m * n, 17), b = random_vec(m, 18);
  DeviceBuffer<float> dA(A), dB(B), dAux(pre), dD((size_t)m * n), dbias(m), dPlain((size_t)m * n), dRb(b);
  LtCase c(m, n, k, false);
  ASSERT_EQ(c.run(dA.ptr, dB.ptr, dPlain.ptr), CUBLAS_STATUS_SUCCESS);
  const auto plain = dPlain.download();

  c.epilogue(CUBLASLT_EPILOGUE_DGELU_BGRAD);  // D = AB * gelu'(aux); bias[i] = sum_j D(i, j)
  c.aux(dAux.ptr, m);
  c.bias(dbias.ptr);
  ASSERT_EQ(c.run(dA.ptr, dB.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  const auto D = dD.download();
  const auto bias = dbias.download();
  for (int i = 0; i < m; ++i) {
    double s = 0.0;
    for (int j = 0; j < n; ++j) {
      EXPECT_NEAR(D[i + j * m], plain[i + j * m] * gelu_grad_ref(pre[i + j * m]), 2e-4f);
      s += D[i + j * m];
    }
    EXPECT_NEAR(bias[i], s, 1e-5) << "row " << i;
  }

  c.epilogue(CUBLASLT_EPILOGUE_BGRADA);  // bias[i] = sum_p A(i, p)
  ASSERT_EQ(c.run(dA.ptr, dB.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  const auto ga = dbias.download();
  for (int i = 0; i < m; ++i) {
    double s = 0.0;
    for (int p = 0; p < k; ++p) s += A[i + p * m];
    EXPECT_NEAR(ga[i], s, 1e-5);
  }

  c.epilogue(CUBLASLT_EPILOGUE_RELU_BIAS);
  c.bias(dRb.ptr);
  ASSERT_EQ(c.run(dA.ptr, dB.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  const auto R = dD.download();
  for (int i = 0; i < m * n; ++i) EXPECT_FLOAT_EQ(R[i], std::max(0.0f, plain[i] + b[i % m]));

  c.epilogue(CUBLASLT_EPILOGUE_BIAS);
  c.bias(nullptr);
  EXPECT_EQ(c.run(dA.ptr, dB.ptr, dD.ptr), CUBLAS_STATUS_INVALID_VALUE) << "BIAS without a bias pointer";
}

TEST_F(Cublas, LtBatchedLayoutsEqualSeparateProducts) {
  const int m = 3, n = 2, k = 4, batch = 3;
  const long long sA = m * k, sB = k * n, sD = m * n;
  const auto A = random_vec(sA * batch, 19), B = random_vec(sB * batch, 20);
  DeviceBuffer<float> dA(A), dB(B), dD(sD * batch), dRef(sD * batch);
  LtCase c(m, n, k, false);
  const int32_t count = batch;
  for (auto [l, stride] : {std::pair{c.la, sA}, std::pair{c.lb, sB}, std::pair{c.lc, sD}}) {
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count),
              CUBLAS_STATUS_SUCCESS);
    const int64_t s = stride;
    ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s),
              CUBLAS_STATUS_SUCCESS);
  }
  ASSERT_EQ(c.run(dA.ptr, dB.ptr, dD.ptr), CUBLAS_STATUS_SUCCESS);
  const float one = 1.0f, zero = 0.0f;
  ASSERT_EQ(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, dA.ptr, CUDA_R_32F, m, sA, dB.ptr,
                                       CUDA_R_32F, k, sB, &zero, dRef.ptr, CUDA_R_32F, m, sD, batch,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(bitwise_equal(dD.download(), dRef.download()));
  // One layout with another batch count: rejected.
  const int32_t two = 2;
  ASSERT_EQ(cublasLtMatrixLayoutSetAttribute(c.lb, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &two, sizeof two),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.run(dA.ptr, dB.ptr, dD.ptr), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(Cublas, HandleStreamAndPointerMode) {
  cudaStream_t s, got = nullptr;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cublasSetStream(h, s), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasGetStream(h, &got), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, s);
  // Device pointer mode: alpha and beta live in device memory.
  ASSERT_EQ(cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  DeviceBuffer<float> ab(std::vector<float>{2.0f, 0.0f}), a(std::vector<float>{3.0f}), b(std::vector<float>{4.0f}), c(1);
  ASSERT_EQ(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, ab.ptr, a.ptr, 1, b.ptr, 1, ab.ptr + 1, c.ptr, 1),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(c.download()[0], 24.0f);
  EXPECT_EQ(cublasSetStream(h, 0), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
}
