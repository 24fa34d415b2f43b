// tests/test_cuda.cpp — the CUDA device layer: allocation, a kernel, copies. Registered only in
// CUDA builds (nothing to skip without one); skips with the device probe's own reason
// (CTX_SKIP_WITHOUT_GPU) where the machine has no GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#ifdef CTXLAB_WITH_CUDA
#include "core/bf16.h"
#include "core/cuda/cuda_runtime.h"
#include "core/tensor.h"
#include "tests/test_util.h"

using namespace ctx;

TEST(Cuda, FillKernelAndCopies) {
  CTX_SKIP_WITHOUT_GPU(cuda::device_count() > 0);
  cuda::ensure_allocator();
  Tensor d = Tensor::empty({1000}, DType::F32, Device::CUDA);
  cuda::fill_f32(static_cast<float*>(d.raw()), 1000, 2.5f);
  std::vector<float> h(1000);
  cuda::copy_to_host(h.data(), d.raw(), 4000);
  for (float v : h) ASSERT_EQ(v, 2.5f);
  std::printf("GPU: %s\n", cuda::device_name().c_str());
}

// The bf16 GEMMs' conversion kernel (gemm.cu, __float2bfloat16_rn) equals core/bf16.h's
// reference bit for bit on every upper half with low halves at, around and away from the tie,
// and on the special values (NaN payloads, infinities, denormals, overflow), on its vector path
// and its scalar one (odd lengths, misaligned source and destination).
TEST(Cuda, Bf16ConversionKernelIsBitExact) {
  CTX_SKIP_WITHOUT_GPU(cuda::device_count() > 0);
  cuda::ensure_allocator();
  std::vector<float> h;
  std::mt19937 rng(9);
  for (uint32_t hi = 0; hi < 0x10000; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu, (uint32_t)(rng() & 0xffff)}) {
      const uint32_t u = hi << 16 | lo;
      float f;
      std::memcpy(&f, &u, 4);
      h.push_back(f);
    }
  const int64_t n = (int64_t)h.size();
  Tensor x = Tensor::empty({n}, DType::F32, Device::CUDA), y = Tensor::empty({(n + 1) / 2}, DType::F32, Device::CUDA);
  cuda::copy_to_device(x.raw(), h.data(), (size_t)n * 4);
  cuda::f32_to_bf16(static_cast<const float*>(x.raw()), static_cast<uint16_t*>(y.raw()), n);
  std::vector<uint16_t> got((size_t)n);
  cuda::copy_to_host(got.data(), y.raw(), (size_t)n * 2);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], float_to_bf16_rne(h[i])) << "element " << i;

  // Both paths of the kernel: float4 loads with 8-byte stores where x (after a head of < 4
  // elements) is 16-byte and y 8-byte aligned in step, one element at a time where they are not,
  // and the tails: every source offset (0..3 floats) against every destination offset (0..3
  // halves), lengths around multiples of 4. The halves just before and after the destination
  // keep their sentinel.
  const int64_t span = 1100;
  Tensor ys = Tensor::empty({span}, DType::F32, Device::CUDA);
  std::vector<uint16_t> sentinel((size_t)span * 2, 0xabcd), out((size_t)span * 2);
  for (int64_t xoff : {0, 1, 2, 3})
    for (int64_t yoff : {1, 2, 3, 4})  // yoff >= 1: the half before y is inside the buffer
      for (int64_t len : {1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 17, 1000, 1027}) {
        SCOPED_TRACE("x + " + std::to_string(xoff) + ", y + " + std::to_string(yoff) + ", n " + std::to_string(len));
        cuda::copy_to_device(ys.raw(), sentinel.data(), sentinel.size() * 2);
        const int64_t src = 40000 * xoff + xoff;  // other values per offset; x + src is xoff floats past 16 bytes
        cuda::f32_to_bf16(static_cast<const float*>(x.raw()) + src, static_cast<uint16_t*>(ys.raw()) + yoff, len);
        cuda::copy_to_host(out.data(), ys.raw(), out.size() * 2);
        ASSERT_EQ(out[yoff - 1], 0xabcd) << "wrote before y";
        ASSERT_EQ(out[yoff + len], 0xabcd) << "wrote past n";
        for (int64_t i = 0; i < len; ++i)
          ASSERT_EQ(out[yoff + i], float_to_bf16_rne(h[src + i])) << "element " << i;
      }
}

#endif  // CTXLAB_WITH_CUDA
