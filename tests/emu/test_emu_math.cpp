// tests/emu/test_emu_math.cpp — the device math intrinsics and helpers under the emulator map to
// the exact host functions (the GPU's fast versions are approximations: compare across devices
// with tolerances), bit casts, integer intrinsics, CUDA's global min/max, __ldg, vector types.
#include <cmath>
#include <cstring>

#include "tests/emu/emu_test_util.h"

__global__ void intrinsics(const float* x, float* f, int* i) {
  const float v = x[threadIdx.x];
  const int t = threadIdx.x;
  f[t * 8 + 0] = __expf(v);
  f[t * 8 + 1] = __logf(v + 2.0f);
  f[t * 8 + 2] = rsqrtf(v + 2.0f);
  f[t * 8 + 3] = __fdividef(v, 3.0f);
  f[t * 8 + 4] = __saturatef(v);
  f[t * 8 + 5] = tanhf(v);
  f[t * 8 + 6] = min(v, 0.25f) + max(v, -0.25f);
  f[t * 8 + 7] = __ldg(x + t);
  i[t * 4 + 0] = __float_as_int(v);
  i[t * 4 + 1] = __popc((unsigned)t * 2654435761u);
  i[t * 4 + 2] = (int)__brev((unsigned)t);
  i[t * 4 + 3] = min(t, 3) + max(t - 8, 0) + __float2int_rn(v * 10.0f);
}

TEST_F(Emu, MathIntrinsicsAreTheExactHostFunctions) {
  const int n = 16;
  std::vector<float> x(n);
  for (int t = 0; t < n; ++t) x[t] = -1.2f + 0.17f * t;
  DeviceBuffer<float> dx(x), f(n * 8);
  DeviceBuffer<int> i(n * 4);
  CTX_LAUNCH(intrinsics, 1, n, 0, 0, dx.ptr, f.ptr, i.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto hf = f.download();
  const auto hi = i.download();
  for (int t = 0; t < n; ++t) {
    const float v = x[t];
    EXPECT_EQ(hf[t * 8 + 0], expf(v));
    EXPECT_EQ(hf[t * 8 + 1], logf(v + 2.0f));
    EXPECT_EQ(hf[t * 8 + 2], 1.0f / sqrtf(v + 2.0f));
    EXPECT_EQ(hf[t * 8 + 3], v / 3.0f);
    EXPECT_EQ(hf[t * 8 + 4], std::fmin(std::fmax(v, 0.0f), 1.0f));
    EXPECT_EQ(hf[t * 8 + 5], tanhf(v));
    EXPECT_EQ(hf[t * 8 + 6], std::fmin(v, 0.25f) + std::fmax(v, -0.25f));
    EXPECT_EQ(hf[t * 8 + 7], v);
    int bits;
    std::memcpy(&bits, &v, 4);
    EXPECT_EQ(hi[t * 4 + 0], bits);
    EXPECT_EQ(hi[t * 4 + 1], __builtin_popcount((unsigned)t * 2654435761u));
    unsigned rev = 0;
    for (int b = 0; b < 32; ++b) rev |= (((unsigned)t >> b) & 1u) << (31 - b);
    EXPECT_EQ((unsigned)hi[t * 4 + 2], rev);
    EXPECT_EQ(hi[t * 4 + 3], std::min(t, 3) + std::max(t - 8, 0) + (int)std::nearbyint(v * 10.0f));
  }
}

__global__ void float4_copy(const float4* in, float4* out) {
  const float4 v = in[threadIdx.x];
  out[threadIdx.x] = make_float4(v.w, v.z, v.y, v.x);
}

TEST_F(Emu, Float4LoadsAndStores) {
  std::vector<float> h(32);
  for (int k = 0; k < 32; ++k) h[k] = (float)k;
  DeviceBuffer<float> in(h), out(32);
  CTX_LAUNCH(float4_copy, 1, 8, 0, 0, reinterpret_cast<const float4*>(in.ptr), reinterpret_cast<float4*>(out.ptr));
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto r = out.download();
  for (int k = 0; k < 32; ++k) EXPECT_EQ(r[k], (float)(k / 4 * 4 + 3 - k % 4));
}
