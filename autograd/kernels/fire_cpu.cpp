// autograd/kernels/fire_cpu.cpp — the CPU kernel of FIRE's normalised distances (fire.h, the
// semantics; registered below for Device::CPU): one pass over [Bp, T, S]. Its CUDA twin is
// fire_cuda.cu; both compile the same formula (fire_formula.h).
#include "autograd/kernels/fire.h"
#include "autograd/kernels/fire_formula.h"
#include "core/cpu/parallel.h"

namespace ctx::kernels {
namespace {

template <class F>
void run(const F* pq, const F* pk, F c, F lm, F init_L, F eps, F* x, F* dc, F* dl, int64_t Bp, int64_t T,
         int64_t S) {
  CTX_OMP_IF(cpu::parallel_pays(Bp * T * S * 2), "omp parallel for schedule(static)",
  for (int64_t r = 0; r < Bp * T; ++r) {
    const int64_t b = r / T;
    for (int64_t j = 0; j < S; ++j) {
      const int64_t e = r * S + j;
      fire_point(pq[r], pk[b * S + j], c, lm, init_L, eps, x[e], dc[e], dl[e]);
    }
  });
}

// The arguments are checked (fire.cpp) before this runs.
void distances(const Tensor& pq, const Tensor& pk, const Tensor& c, const Tensor& lm, double init_L, double eps,
               Tensor& x, Tensor& dxdc, Tensor& dxdl) {
  const int64_t Bp = pq.size(0), T = pq.size(1), S = pk.size(1);
  if (pq.dtype() == DType::F32)
    run<float>(pq.data<float>(), pk.data<float>(), c.data<float>()[0], lm.data<float>()[0], (float)init_L,
               (float)eps, x.data<float>(), dxdc.data<float>(), dxdl.data<float>(), Bp, T, S);
  else
    run<double>(pq.data<double>(), pk.data<double>(), c.data<double>()[0], lm.data<double>()[0], init_L, eps,
                x.data<double>(), dxdc.data<double>(), dxdl.data<double>(), Bp, T, S);
}

[[maybe_unused]] const bool g_registered = (fire_distances.add(Device::CPU, &distances, __FILE__), true);

}  // namespace
}  // namespace ctx::kernels
