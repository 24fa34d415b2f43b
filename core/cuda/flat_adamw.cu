// core/cuda/flat_adamw.cu — the optimizer over flat buffers (Backend fused method FlatAdamW):
// sum_squares for the global gradient norm and one AdamW step, both over `tiles` built on the
// host from the chunks (each tile at most kFlatTile elements of one chunk, tiles in chunk
// order; one block per tile). sum_squares: each block sums its tile in f64 through a fixed tree,
// then one block adds the tile sums in order: deterministic. adamw_flat reads the clip factor from
// the device norm (no host round trip); its element update is ref::adamw's, term for term. Under
// --precision bf16 it also writes the flat parameters' bf16 rounding (the weights' kept copy, which
// every GEMM reading a weight then takes instead of converting it: cuda_backend.cu).
#include <cmath>
#include <cstdint>

#include "core/cuda/bf16_out.cuh"  // bf16_bits
#include "core/cuda/block_reduce.cuh"
#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

constexpr int kFlatThreads = 256;

// x is flat; tiles (ntiles, 3) = begin, end, decay; part (ntiles): sum of x^2 over each tile, f64
template <class T>
__global__ void sum_squares_tiles_kernel(const T* x, const int64_t* tiles, int64_t ntiles, double* part) {
  CTX_DYNAMIC_SHARED(double, buf);
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    double s = 0;
    for (int64_t i = tiles[3 * t] + threadIdx.x; i < tiles[3 * t + 1]; i += blockDim.x)
      s += (double)x[i] * (double)x[i];
    s = block_reduce(s, buf, SumOp());
    if (threadIdx.x == 0) part[t] = s;
  }
}

// part (n) -> out (1) = the sum, one block
__global__ void sum_partials_kernel(const double* part, int64_t n, double* out) {
  CTX_DYNAMIC_SHARED(double, buf);
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += part[i];
  s = block_reduce(s, buf, SumOp());
  if (threadIdx.x == 0) out[0] = s;
}

// p, g, m, v flat; tiles (ntiles, 3); norm_sq null or (1): the clip factor as clip_grad_norm;
// p16 (or null): the updated p's bf16 rounding as well (the weights' kept copy)
template <class T>
__global__ void adamw_tiles_kernel(T* p, const T* g, T* m, T* v, const int64_t* tiles, int64_t ntiles,
                                   const double* norm_sq, double grad_scale, double max_norm, T decay_on,
                                   T decay_off, T tb1, T tb2, T bc2_sqrt, T teps, T step_size, uint16_t* p16,
                                   const double* terms) {
  if (terms) {  // this step's constants, written before the (captured) step: AdamWHyper::terms
    decay_on = (T)terms[0];
    bc2_sqrt = (T)terms[1];
    step_size = (T)terms[2];
  }
  double gscale = grad_scale;
  if (norm_sq && max_norm > 0) {
    const double norm = std::sqrt(norm_sq[0]);
    if (norm > max_norm) gscale *= max_norm / (norm + 1e-6);
  }
  const T gs = (T)gscale;
  for (int64_t t = blockIdx.x; t < ntiles; t += gridDim.x) {
    const T decay = tiles[3 * t + 2] ? decay_on : decay_off;
    for (int64_t i = tiles[3 * t] + threadIdx.x; i < tiles[3 * t + 1]; i += blockDim.x) {
      const T gi = gs * g[i];
      const T mi = tb1 * m[i] + (T(1) - tb1) * gi;
      const T vi = tb2 * v[i] + (T(1) - tb2) * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const T denom = std::sqrt(vi) / bc2_sqrt + teps;
      const T pi = p[i] * decay;
      const T pn = pi - step_size * mi / denom;
      p[i] = pn;
      if (p16) p16[i] = bf16_bits(pn);
    }
  }
}

}  // namespace

template <class T>
void sum_squares_tiles(const T* x, const int64_t* tiles, int64_t ntiles, double* part, double* out) {
  if (ntiles > 0) {
    CTX_LAUNCH(sum_squares_tiles_kernel<T>, row_grid(ntiles), kFlatThreads, kFlatThreads * sizeof(double), stream(), x,
               tiles, ntiles, part);
    CTX_CUDA_LAUNCH_CHECK("sum_squares_tiles_kernel");
  }
  CTX_LAUNCH(sum_partials_kernel, 1, kFlatThreads, kFlatThreads * sizeof(double), stream(), part, ntiles, out);
  CTX_CUDA_LAUNCH_CHECK("sum_partials_kernel");
}

template <class T>
void adamw_tiles(T* p, const T* g, T* m, T* v, const int64_t* tiles, int64_t ntiles, const double* norm_sq,
                 const AdamWHyper& h, uint16_t* p16) {
  if (ntiles == 0) return;
  // constants as ref::adamw computes them (a chunk without decay: 1 - lr * 0 = 1), or read by the
  // kernel from h.terms
  const AdamWStepTerms st = h.terms.defined() ? AdamWStepTerms{} : adamw_step_terms(h);
  CTX_LAUNCH(adamw_tiles_kernel<T>, row_grid(ntiles), kFlatThreads, 0, stream(), p, g, m, v, tiles, ntiles, norm_sq,
             h.grad_scale, h.max_norm, (T)st.decay, T(1), (T)h.beta1, (T)h.beta2, (T)st.bc2_sqrt, (T)h.eps,
             (T)st.step_size, p16, h.terms.defined() ? h.terms.data<double>() : nullptr);
  CTX_CUDA_LAUNCH_CHECK("adamw_tiles_kernel");
}

template void sum_squares_tiles<float>(const float*, const int64_t*, int64_t, double*, double*);
template void sum_squares_tiles<double>(const double*, const int64_t*, int64_t, double*, double*);
template void adamw_tiles<float>(float*, const float*, float*, float*, const int64_t*, int64_t, const double*,
                                 const AdamWHyper&, uint16_t*);
template void adamw_tiles<double>(double*, const double*, double*, double*, const int64_t*, int64_t,
                                  const double*, const AdamWHyper&, uint16_t*);

}  // namespace ctx::cuda
