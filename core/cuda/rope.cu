// core/cuda/rope.cu — the rotary rotation (Backend fused method Rope; the CPU twin is
// core/cpu/rope.cpp): one thread per rotated pair, exact, no reductions. Its backward is the same
// kernel with the angle negated.
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// x, out are (R, T, d); C, S are (T, d/2): one thread per (r, t, pair k)
template <class T>
__global__ void rope_kernel(const T* x, const T* C, const T* S, T* out, int64_t R, int64_t Tn, int64_t d,
                            bool interleaved, bool transpose) {
  const int64_t h = d / 2;
  const T sgn = transpose ? T(-1) : T(1);
  CTX_GRID_STRIDE(e, R * Tn * h) {
    const int64_t k = e % h, rt = e / h, t = rt % Tn;
    const int64_t ia = interleaved ? 2 * k : k, ib = interleaved ? 2 * k + 1 : k + h;
    const T a = x[rt * d + ia], b = x[rt * d + ib], c = C[t * h + k], sk = sgn * S[t * h + k];
    out[rt * d + ia] = a * c - b * sk;
    out[rt * d + ib] = b * c + a * sk;
  }
}

}  // namespace

template <class T>
void rope_rotate(const T* x, const T* C, const T* S, T* out, int64_t R, int64_t Tn, int64_t d, bool interleaved,
                 bool transpose) {
  const int64_t n = R * Tn * (d / 2);
  if (n == 0) return;
  CTX_LAUNCH(rope_kernel<T>, grid_for(n), kThreads, 0, stream(), x, C, S, out, R, Tn, d, interleaved, transpose);
  CTX_CUDA_LAUNCH_CHECK("rope_kernel");
}

#define CTX_INST_ROPE(T) \
  template void rope_rotate<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, bool, bool);
CTX_INST_ROPE(float)
CTX_INST_ROPE(double)

}  // namespace ctx::cuda
