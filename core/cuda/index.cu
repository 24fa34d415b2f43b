// core/cuda/index.cu — gather (index_select) and deterministic scatter-add (index_add) along the
// middle dim of [outer, n, inner]. Indices are range-checked on the host before these run
// (cuda_backend.cu), or proven by their writer (Tensor::checked_bound). index_add takes buckets
// (like llm.c's encoder backward), planned on the host or on the device (index_plan.cu): each
// output element is owned by one thread, which adds its sources in index order — no atomics, and
// the same bits as the CPU reference.
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// x is (outer, n, inner), idx (m), out (outer, m, inner)
template <class T, class I>
__global__ void index_select_kernel(const T* x, const I* idx, T* out, int64_t outer, int64_t n, int64_t m,
                                    int64_t inner) {
  CTX_GRID_STRIDE(e, outer * m * inner) {
    const int64_t r = e % inner, i = (e / inner) % m, o = e / (inner * m);
    out[e] = x[(o * n + (int64_t)idx[i]) * inner + r];
  }
}

// out is (outer, n, inner), src (outer, m, inner); plan = U, rows (U), starts (U + 1), pos (m):
// thread (o, u, r) adds src[o, pos[p], r] for p in [starts[u], starts[u+1]) to out[o, rows[u], r]
template <class T>
__global__ void index_add_kernel(T* out, const int64_t* plan, const T* src, int64_t outer, int64_t n, int64_t m,
                                 int64_t inner) {
  const int64_t U = plan[0];
  const int64_t* rows = plan + 1;
  const int64_t* starts = plan + 1 + U;
  const int64_t* pos = plan + 2 * U + 2;
  CTX_GRID_STRIDE(e, outer * U * inner) {
    const int64_t r = e % inner, u = (e / inner) % U, o = e / (inner * U);
    T* dst = out + (o * n + rows[u]) * inner + r;
    T acc = *dst;
    for (int64_t p = starts[u]; p < starts[u + 1]; ++p) acc += src[(o * m + pos[p]) * inner + r];
    *dst = acc;
  }
}

}  // namespace

template <class T, class I>
void index_select(const T* x, const I* idx, T* out, int64_t outer, int64_t n, int64_t m, int64_t inner) {
  const int64_t total = outer * m * inner;
  if (total == 0) return;
  CTX_LAUNCH((index_select_kernel<T, I>), grid_for(total), kThreads, 0, stream(), x, idx, out, outer, n, m, inner);
  CTX_CUDA_LAUNCH_CHECK("index_select_kernel");
}

template <class T>
void index_add(T* out, const int64_t* plan, int64_t rows_bound, const T* src, int64_t outer, int64_t n, int64_t m,
               int64_t inner) {
  const int64_t total = outer * rows_bound * inner;  // >= the kernel's outer * U * inner
  if (total == 0) return;
  CTX_LAUNCH(index_add_kernel<T>, grid_for(total), kThreads, 0, stream(), out, plan, src, outer, n, m, inner);
  CTX_CUDA_LAUNCH_CHECK("index_add_kernel");
}

#define CTX_INST_SELECT_I(T, I) \
  template void index_select<T, I>(const T*, const I*, T*, int64_t, int64_t, int64_t, int64_t);
#define CTX_INST_INDEX(T) CTX_INST_SELECT_I(T, int32_t) CTX_INST_SELECT_I(T, int64_t)
CTX_INST_INDEX(float)
CTX_INST_INDEX(double)
CTX_INST_INDEX(int32_t)
CTX_INST_INDEX(int64_t)
template void index_add<float>(float*, const int64_t*, int64_t, const float*, int64_t, int64_t, int64_t, int64_t);
template void index_add<double>(double*, const int64_t*, int64_t, const double*, int64_t, int64_t, int64_t,
                                int64_t);

}  // namespace ctx::cuda
