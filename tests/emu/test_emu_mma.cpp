// tests/emu/test_emu_mma.cpp — the tensor-core intrinsics of core/cuda/mma.cuh under the emulator,
// against scalar references written here from the PTX ISA's text: mma.sync m16n8k16 bf16 -> f32
// (fragments lane by lane, fp32 sums in k order: bitwise), ldmatrix x1/x2/x4 with and without
// .trans (each lane's pair), ldmatrix + mma composed as the attention kernels compose them, the
// cp.async groups (a copy lands at the wait that covers it, NaN before), and the planted bugs the
// emulator must catch: a read before the cp.async wait, a copy never waited for, a lane that
// diverged away from an mma, a misaligned or non-shared ldmatrix row.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "core/cuda/mma.cuh"
#include "tests/emu/emu_test_util.h"

namespace tc = ctx::cuda::tc;

namespace {

// bf16-representable values over 13 binades (sums of them depend on their order)
std::vector<float> bf16_values(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::vector<float> v(n);
  for (float& x : v) {
    const float m = 1.0f + (float)(g() % 128) / 128.0f;
    x = std::ldexp(g() % 2 ? -m : m, (int)(g() % 13) - 6);
  }
  return v;
}
__device__ uint32_t bits_of(float x) {  // x is bf16-representable: its upper half
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u >> 16;
}
__device__ uint32_t pair(float lo, float hi) { return bits_of(lo) | (bits_of(hi) << 16); }

// ---- mma: fragments built by the ISA's formulas; warp w uses matrices w ----
// A [W, 16, 16], B [W, 16, 8] (k, n), C, D [W, 16, 8]
__global__ void mma_from_fragments(const float* A, const float* B, const float* C, float* D) {
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
  const float* a = A + w * 256;
  const float* b = B + w * 128;
  const float* c = C + w * 128;
  // a_i: row g for i in {0,1,4,5}, else g + 8; col 2t + (i & 1), + 8 for i >= 4
  const uint32_t fa[4] = {pair(a[g * 16 + 2 * t], a[g * 16 + 2 * t + 1]),
                          pair(a[(g + 8) * 16 + 2 * t], a[(g + 8) * 16 + 2 * t + 1]),
                          pair(a[g * 16 + 2 * t + 8], a[g * 16 + 2 * t + 9]),
                          pair(a[(g + 8) * 16 + 2 * t + 8], a[(g + 8) * 16 + 2 * t + 9])};
  // b_i: row 2t + (i & 1), + 8 for i >= 2; col g
  const uint32_t fb[2] = {pair(b[(2 * t) * 8 + g], b[(2 * t + 1) * 8 + g]),
                          pair(b[(2 * t + 8) * 8 + g], b[(2 * t + 9) * 8 + g])};
  // c_i: row g for i < 2, else g + 8; col 2t + (i & 1)
  const float fc[4] = {c[g * 8 + 2 * t], c[g * 8 + 2 * t + 1], c[(g + 8) * 8 + 2 * t], c[(g + 8) * 8 + 2 * t + 1]};
  float d[4];
  tc::mma_16816(d, fa, fb, fc);
  float* o = D + w * 128;
  o[g * 8 + 2 * t] = d[0], o[g * 8 + 2 * t + 1] = d[1];
  o[(g + 8) * 8 + 2 * t] = d[2], o[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// D = C + sum_k A[:, k] B[k, :], k in order, in fp32
std::vector<float> mma_reference(const std::vector<float>& A, const std::vector<float>& B, const std::vector<float>& C,
                                 int W, int ldb = 8) {
  std::vector<float> D((size_t)W * 128);
  for (int w = 0; w < W; ++w)
    for (int r = 0; r < 16; ++r)
      for (int n = 0; n < 8; ++n) {
        float acc = C[w * 128 + r * 8 + n];
        for (int k = 0; k < 16; ++k) acc += A[w * 256 + r * 16 + k] * B[w * 16 * ldb + k * ldb + n];
        D[w * 128 + r * 8 + n] = acc;
      }
  return D;
}

class EmuMma : public Emu {};

TEST_F(EmuMma, MmaIsTheIsaProductLaneByLane) {
  constexpr int W = 3;  // warps, each its own matrices
  for (unsigned seed : {1u, 2u, 3u}) {
    const std::vector<float> A = bf16_values(W * 256, seed), B = bf16_values(W * 128, seed + 10),
                             C = bf16_values(W * 128, seed + 20);
    DeviceBuffer<float> a(A), b(B), c(C), d(W * 128);
    CTX_LAUNCH(mma_from_fragments, 1, W * 32, 0, 0, a.ptr, b.ptr, c.ptr, d.ptr);
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
    EXPECT_TRUE(bitwise_equal(d.download(), mma_reference(A, B, C, W))) << "seed " << seed;
  }
}

// The counters see one mma per warp instruction: 3 warps, one mma each, 2 * 16 * 8 * 16 FLOPs each.
TEST_F(EmuMma, EachWarpMmaIsCountedOnce) {
  constexpr int W = 3;
  const std::vector<float> A = bf16_values(W * 256, 7), B = bf16_values(W * 128, 8), C = bf16_values(W * 128, 9);
  DeviceBuffer<float> a(A), b(B), c(C), d(W * 128);
  cuemu::set_counters(true);
  cuemu::reset_counters();
  CTX_LAUNCH(mma_from_fragments, 1, W * 32, 0, 0, a.ptr, b.ptr, c.ptr, d.ptr);
  const std::vector<cuemu::LaunchCounters> r = cuemu::counter_records();
  cuemu::set_counters(false);
  cuemu::reset_counters();
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].mma[(int)cuemu::MmaType::BF16], (uint64_t)W);
  EXPECT_EQ(r[0].tensor_flops[(int)cuemu::MmaType::BF16], W * 2.0 * 16 * 8 * 16);
}

// ---- ldmatrix: smem [32 rows, 16 b16] with code(r, c) = r * 16 + c; lane l supplies row
// perm(l) = (5 l + 3) % 32 at column 8 ((l / 8) % 2); out[l * 4 + m] = r[m] ----
__host__ __device__ int perm_row(int l) { return (5 * l + 3) % 32; }
__host__ __device__ int col0(int l) { return 8 * ((l / 8) % 2); }

template <int N, bool Trans>
__global__ void ldmatrix_codes(uint32_t* out) {
  CTX_DYNAMIC_SHARED(uint16_t, sm);
  const int l = threadIdx.x;
  for (int e = l; e < 32 * 16; e += 32) sm[e] = (uint16_t)e;
  __syncthreads();
  uint32_t r[N];
  tc::ldmatrix<N, Trans>(r, sm + perm_row(l) * 16 + col0(l));
  for (int m = 0; m < 4; ++m) out[l * 4 + m] = m < N ? r[m] : 0u;
}

uint32_t code(int r, int c) { return (uint32_t)(r * 16 + c); }

template <int N, bool Trans>
void check_ldmatrix() {
  DeviceBuffer<uint32_t> out(128);
  CTX_LAUNCH((ldmatrix_codes<N, Trans>), 1, 32, 32 * 16 * 2, 0, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  const std::vector<uint32_t> h = out.download();
  for (int l = 0; l < 32; ++l)
    for (int m = 0; m < N; ++m) {
      uint32_t want;
      if (!Trans) {  // row l / 4 of matrix m (the row lane 8m + l/4 gave), columns 2(l%4) + {0, 1}
        const int s = 8 * m + l / 4;
        want = code(perm_row(s), col0(s) + 2 * (l % 4)) | (code(perm_row(s), col0(s) + 2 * (l % 4) + 1) << 16);
      } else {  // rows 2(l%4) + {0, 1} of matrix m, column l / 4
        const int s0 = 8 * m + 2 * (l % 4), s1 = s0 + 1;
        want = code(perm_row(s0), col0(s0) + l / 4) | (code(perm_row(s1), col0(s1) + l / 4) << 16);
      }
      EXPECT_EQ(h[l * 4 + m], want) << "x" << N << (Trans ? ".trans" : "") << " lane " << l << " matrix " << m;
    }
}

TEST_F(EmuMma, LdmatrixGivesEachLaneItsIsaPair) {
  check_ldmatrix<1, false>();
  check_ldmatrix<2, false>();
  check_ldmatrix<4, false>();
  check_ldmatrix<1, true>();
  check_ldmatrix<2, true>();
  check_ldmatrix<4, true>();
}

// ---- ldmatrix + mma as the attention kernels compose them (row stride 24 b16: 48 bytes) ----
// X [16, 16] (A operand, x4), K [8, 16] (B = K^T, x2), V [16, 8] (B = V, x2 .trans); floats in,
// D1 = X K^T [16, 8], D2 = X V [16, 8] out (C = 0).
constexpr int kLd = 24;
__global__ void composed(const float* X, const float* K, const float* V, float* D1, float* D2) {
  CTX_DYNAMIC_SHARED(__nv_bfloat16, sm);
  __nv_bfloat16 *xs = sm, *ks = xs + 16 * kLd, *vs = ks + 8 * kLd;
  const int l = threadIdx.x, g = l >> 2, t = l & 3;
  for (int e = l; e < 256; e += 32) xs[(e / 16) * kLd + e % 16] = __float2bfloat16_rn(X[e]);
  for (int e = l; e < 128; e += 32) ks[(e / 16) * kLd + e % 16] = __float2bfloat16_rn(K[e]);
  for (int e = l; e < 128; e += 32) vs[(e / 8) * kLd + e % 8] = __float2bfloat16_rn(V[e]);
  __syncthreads();
  uint32_t a[4], bk[2], bv[2];
  const int m = l / 8;
  tc::ldmatrix<4, false>(a, xs + ((l % 8) + 8 * (m % 2)) * kLd + 8 * (m / 2));
  tc::ldmatrix<2, false>(bk, ks + (l % 8) * kLd + 8 * ((l / 8) % 2));
  tc::ldmatrix<2, true>(bv, vs + (l % 16) * kLd);
  const float z[4] = {0, 0, 0, 0};
  float d1[4], d2[4];
  tc::mma_16816(d1, a, bk, z);
  tc::mma_16816(d2, a, bv, z);
  for (int i = 0; i < 4; ++i) {
    const int r = i < 2 ? g : g + 8, c = 2 * t + (i & 1);
    D1[r * 8 + c] = d1[i];
    D2[r * 8 + c] = d2[i];
  }
}

TEST_F(EmuMma, LdmatrixFeedsMmaAsTheAttentionKernelsUseIt) {
  const std::vector<float> X = bf16_values(256, 7), K = bf16_values(128, 8), V = bf16_values(128, 9);
  DeviceBuffer<float> x(X), k(K), v(V), d1(128), d2(128);
  CTX_LAUNCH(composed, 1, 32, (16 + 8 + 16) * kLd * 2, 0, x.ptr, k.ptr, v.ptr, d1.ptr, d2.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  std::vector<float> KT(128), Z(128, 0.0f);  // K^T as [16 (k), 8 (n)]
  for (int n = 0; n < 8; ++n)
    for (int kk = 0; kk < 16; ++kk) KT[kk * 8 + n] = K[n * 16 + kk];
  EXPECT_TRUE(bitwise_equal(d1.download(), mma_reference(X, KT, Z, 1)));
  EXPECT_TRUE(bitwise_equal(d2.download(), mma_reference(X, V, Z, 1)));
}

// ---- cp.async: group 0 (16-byte .cg copies), group 1 (8-byte), an uncommitted 4-byte copy;
// out [3 stages, 32 lanes, 7 floats]: what lane l sees of its own destinations after wait<1>,
// after wait<0>, after wait_all ----
__global__ void async_groups(const float* src, float* out) {
  CTX_DYNAMIC_SHARED(float, sm);
  const int l = threadIdx.x;
  float *d16 = sm + l * 4, *d8 = sm + 128 + l * 2, *d4 = sm + 192 + l;
  tc::AsyncCopies cp;
  cp.copy<16, true>(d16, src + l * 4);
  cp.commit();
  cp.copy<8>(d8, src + 128 + l * 2);
  cp.commit();
  cp.copy<4>(d4, src + 192 + l);
  auto record = [&](int stage) {
    float* o = out + (stage * 32 + l) * 7;
    for (int i = 0; i < 4; ++i) o[i] = d16[i];
    o[4] = d8[0], o[5] = d8[1], o[6] = d4[0];
  };
  cp.wait<1>();
  record(0);
  cp.wait<0>();
  record(1);
  cp.wait_all();
  record(2);
}

TEST_F(EmuMma, CpAsyncCopiesLandAtTheirWait) {
  std::vector<float> S(224);
  for (int i = 0; i < 224; ++i) S[i] = (float)i + 0.5f;
  DeviceBuffer<float> src(S), out(3 * 32 * 7);
  CTX_LAUNCH(async_groups, 1, 32, 224 * 4, 0, src.ptr, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  const std::vector<float> h = out.download();
  for (int l = 0; l < 32; ++l)
    for (int stage = 0; stage < 3; ++stage) {
      const float* o = &h[(stage * 32 + l) * 7];
      for (int i = 0; i < 4; ++i) EXPECT_EQ(o[i], S[l * 4 + i]) << "group 0 lands by wait_group 1";
      for (int i = 0; i < 2; ++i) {
        if (stage == 0) EXPECT_TRUE(std::isnan(o[4 + i])) << "group 1 is still in flight after wait_group 1";
        else EXPECT_EQ(o[4 + i], S[128 + l * 2 + i]);
      }
      if (stage < 2) EXPECT_TRUE(std::isnan(o[6])) << "an uncommitted copy waits for wait_all";
      else EXPECT_EQ(o[6], S[192 + l]);
    }
}

// ---- planted bugs ----
// Thread l copies element l; the block reads its neighbour's after the barrier but before the wait.
__global__ void read_before_wait(const float* src, float* out) {
  CTX_DYNAMIC_SHARED(float, sm);
  const int l = threadIdx.x;
  tc::AsyncCopies cp;
  cp.copy<4>(sm + l, src + l);
  cp.commit();
  __syncthreads();
  out[l] = sm[(l + 1) % 32];  // BUG: no cp.wait<0>() before the barrier
  cp.wait_all();
}
__global__ void never_waited(const float* src) {
  CTX_DYNAMIC_SHARED(float, sm);
  tc::AsyncCopies cp;
  cp.copy<4>(sm + threadIdx.x, src + threadIdx.x);
  cp.commit();
}
__global__ void diverged_mma(float* out) {
  const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
  const float c[4] = {1, 1, 1, 1};
  float d[4] = {0, 0, 0, 0};
  if (threadIdx.x % 32 == 5) return;  // BUG: lane 5 leaves before the warp's mma
  tc::mma_16816(d, a, b, c);
  out[threadIdx.x] = d[0];
}
__global__ void misaligned_ldmatrix(uint32_t* out, int shift_bytes) {
  CTX_DYNAMIC_SHARED(unsigned char, sm);
  for (int e = threadIdx.x; e < 1024; e += 32) sm[e] = 0;
  __syncthreads();
  uint32_t r[4];
  tc::ldmatrix<4, false>(r, sm + threadIdx.x * 32 + (threadIdx.x == 3 ? shift_bytes : 0));
  out[threadIdx.x] = r[0];
}
__global__ void ldmatrix_from_global(const uint16_t* g, uint32_t* out) {
  uint32_t r[1];
  tc::ldmatrix<1, false>(r, g + (threadIdx.x % 8) * 8);
  out[threadIdx.x] = r[0];
}


void expect_fault(const std::string& what, const std::string& needle) {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure) << what;
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find(needle), std::string::npos) << what << ": " << m;
  EXPECT_NE(m.find("test_emu_mma.cpp:"), std::string::npos) << what << ": names the call site: " << m;
  cuemu::clear_faults();
}

TEST_F(EmuMma, AReadBeforeTheCpAsyncWaitSeesNaN) {
  std::vector<float> S(32, 2.0f);
  DeviceBuffer<float> src(S), out(32);
  for (auto s : {cuemu::Schedule::Forward, cuemu::Schedule::Reverse}) {
    cuemu::set_schedule(s);
    CTX_LAUNCH(read_before_wait, 1, 32, 128, 0, src.ptr, out.ptr);
    if (cuemu::racecheck()) {  // the race detector sees the late copy race with the early read
      expect_fault("missing cp.async wait under the race detector", "race hazard");
      continue;
    }
    ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
    // a lane whose neighbour has not reached its wait yet reads the poison: under forward order
    // lanes 0..30 (31 reads thread 0's landed copy), under reverse order lane 31
    int nans = 0;
    for (float x : out.download()) nans += std::isnan(x) ? 1 : 0;
    EXPECT_EQ(nans, s == cuemu::Schedule::Forward ? 31 : 1) << "the planted missing wait must read the poison";
  }
}

TEST_F(EmuMma, PlantedTensorCoreBugsAreReported) {
  DeviceBuffer<float> src(std::vector<float>(32, 1.0f)), out(64);
  DeviceBuffer<uint32_t> u(64);
  DeviceBuffer<uint16_t> g(std::vector<uint16_t>(64, 0));
  CTX_LAUNCH(never_waited, 1, 32, 128, 0, src.ptr);
  expect_fault("copy never waited for", "never waited for");
  CTX_LAUNCH(diverged_mma, 1, 64, 0, 0, out.ptr);
  expect_fault("lane 5 exited before the mma", "which exited");
  CTX_LAUNCH(misaligned_ldmatrix, 1, 32, 1024, 0, u.ptr, 8);
  expect_fault("row 3 misaligned by 8 bytes", "16-byte aligned");
  CTX_LAUNCH(ldmatrix_from_global, 1, 32, 0, 0, g.ptr, u.ptr);
  expect_fault("rows in global memory", "row of shared memory");
  CTX_LAUNCH(misaligned_ldmatrix, 1, 32, 1024, 0, u.ptr, 0);  // the same kernel, aligned: clean
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cuemu::last_fault();
}

}  // namespace
