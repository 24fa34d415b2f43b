// core/host_device.h — CTX_HOST_DEVICE: marks a function that runs both on the CPU and inside
// CUDA kernels (__host__ __device__ under nvcc; nothing for the C++ compilers, the emulator's
// included). The headers that carry one formula for both devices use it: core/dropout_mask.h,
// core/elementwise_formulas.h.
#pragma once

#if defined(__CUDACC__)
#define CTX_HOST_DEVICE __host__ __device__
#else
#define CTX_HOST_DEVICE
#endif
