// tests/test_cuda.cpp — the CUDA device layer: allocation, a kernel, copies. Skips with a
// message where the build has no CUDA or the machine has no GPU.
#include <gtest/gtest.h>

#include "core/tensor.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/cuda_runtime.h"
#endif

using namespace ctx;

TEST(Cuda, FillKernelAndCopies) {
#ifndef CTXLAB_WITH_CUDA
  GTEST_SKIP() << "built without CUDA (CTXLAB_WITH_CUDA=OFF)";
#else
  if (cuda::device_count() == 0) GTEST_SKIP() << "no GPU on this machine";
  cuda::ensure_allocator();
  Tensor d = Tensor::empty({1000}, DType::F32, Device::CUDA);
  cuda::fill_f32(static_cast<float*>(d.raw()), 1000, 2.5f);
  std::vector<float> h(1000);
  cuda::copy_to_host(h.data(), d.raw(), 4000);
  for (float v : h) ASSERT_EQ(v, 2.5f);
  std::printf("GPU: %s\n", cuda::device_name().c_str());
#endif
}
