// core/cuda/optim.cu — AdamW over flat buffers (PyTorch semantics, as core/cpu/ref_kernels.h:
// p *= 1 - lr wd; m, v moments; p -= step_size m / (sqrt(v) / sqrt(bc2) + eps)). The scalars
// are computed on the host in double, once per call.
#include <cmath>
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// p, g, m, v are (n)
template <class T>
__global__ void adamw_kernel(T* p, const T* g, T* m, T* v, int64_t n, T decay, T b1, T b2, T eps, T step_size,
                             T bc2_sqrt) {
  CTX_GRID_STRIDE(i, n) {
    const T gi = g[i];
    T pi = p[i] * decay;
    const T mi = b1 * m[i] + (T(1) - b1) * gi;
    const T vi = b2 * v[i] + (T(1) - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    const T denom = std::sqrt(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * mi / denom;
  }
}

}  // namespace

template <class T>
void adamw(T* p, const T* g, T* m, T* v, int64_t n, T decay, T b1, T b2, T eps, T step_size, T bc2_sqrt) {
  if (n == 0) return;
  CTX_LAUNCH(adamw_kernel<T>, grid_for(n), kThreads, 0, stream(), p, g, m, v, n, decay, b1, b2, eps, step_size, bc2_sqrt);
  CTX_CUDA_LAUNCH_CHECK("adamw_kernel");
}

template void adamw<float>(float*, const float*, float*, float*, int64_t, float, float, float, float, float, float);
template void adamw<double>(double*, const double*, double*, double*, int64_t, double, double, double, double,
                            double, double);

}  // namespace ctx::cuda
