// autograd/kernels/gru_cell_cpu.cpp — the CPU kernels of the GRU cell (gru_cell.h, registered
// below for Device::CPU): one pass over [B, H] that reads the two gate projections and writes the
// new state and what the backward needs, instead of ~20 elementwise primitives and their
// temporaries per step. The reference is the composed loop in autograd/ops_gru.cpp
// (CTXLAB_FUSED_GRU=0); tests/test_backend_ops.cpp holds every device's kernels to short loops,
// and tests/test_posenc_survey.cpp the fused op to the composed one.
#include <cmath>

#include "autograd/kernels/gru_cell.h"
#include "core/cpu/parallel.h"

namespace ctx::kernels {
namespace {

template <class F>
inline F sigm(F x) {  // (1 + tanh(x / 2)) / 2, the composed path's formula
  return F(0.5) * std::tanh(F(0.5) * x) + F(0.5);
}

template <class F>
void forward_kernel(const F* xg, const F* hg, const F* bhn, const F* hp, F* h, F* rzn, F* hn, int64_t B, int64_t H) {
#pragma omp parallel for schedule(static) if (cpu::parallel_pays(B * H * 2))
  for (int64_t b = 0; b < B; ++b) {
    const F* x = xg + b * 3 * H;
    const F* g = hg + b * 3 * H;
    F* s = rzn + b * 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      const F r = sigm(x[j] + g[j]), z = sigm(x[H + j] + g[H + j]);
      const F hv = g[2 * H + j] + bhn[j];
      const F n = std::tanh(x[2 * H + j] + r * hv);
      const F p = hp[b * H + j];
      h[b * H + j] = n + z * (p - n);
      s[j] = r, s[H + j] = z, s[2 * H + j] = n;
      hn[b * H + j] = hv;
    }
  }
}

template <class F>
void backward_kernel(const F* gy, const F* dhc, const F* hp, const F* rzn, const F* hn, F* d1, F* d2, F* dh,
                     int64_t B, int64_t H) {
#pragma omp parallel for schedule(static) if (cpu::parallel_pays(B * H * 2))
  for (int64_t b = 0; b < B; ++b) {
    const F* s = rzn + b * 3 * H;
    F* a = d1 + b * 3 * H;
    F* c = d2 + b * 3 * H;
    for (int64_t j = 0; j < H; ++j) {
      const int64_t i = b * H + j;
      const F g = gy[i] + dhc[i];
      const F r = s[j], z = s[H + j], n = s[2 * H + j];
      const F dnp = (g - g * z) * (F(1) - n * n);
      const F dar = dnp * hn[i] * (r * (F(1) - r));
      const F daz = g * (hp[i] - n) * (z * (F(1) - z));
      a[j] = dar, a[H + j] = daz, a[2 * H + j] = dnp;
      c[j] = dar, c[H + j] = daz, c[2 * H + j] = dnp * r;
      dh[i] = g * z;
    }
  }
}

// The arguments are checked (gru_cell.cpp) before these run.
void forward(const Tensor& xg, const Tensor& hg, const Tensor& bhn, const Tensor& hp, Tensor& h, Tensor& rzn,
             Tensor& hn) {
  const int64_t B = hp.size(0), H = hp.size(1);
  if (hp.dtype() == DType::F32)
    forward_kernel(xg.data<float>(), hg.data<float>(), bhn.data<float>(), hp.data<float>(), h.data<float>(),
                   rzn.data<float>(), hn.data<float>(), B, H);
  else
    forward_kernel(xg.data<double>(), hg.data<double>(), bhn.data<double>(), hp.data<double>(), h.data<double>(),
                   rzn.data<double>(), hn.data<double>(), B, H);
}

void backward(const Tensor& gy, const Tensor& dhc, const Tensor& hp, const Tensor& rzn, const Tensor& hn, Tensor& d1,
              Tensor& d2, Tensor& dh) {
  const int64_t B = hp.size(0), H = hp.size(1);
  if (hp.dtype() == DType::F32)
    backward_kernel(gy.data<float>(), dhc.data<float>(), hp.data<float>(), rzn.data<float>(), hn.data<float>(),
                    d1.data<float>(), d2.data<float>(), dh.data<float>(), B, H);
  else
    backward_kernel(gy.data<double>(), dhc.data<double>(), hp.data<double>(), rzn.data<double>(), hn.data<double>(),
                    d1.data<double>(), d2.data<double>(), dh.data<double>(), B, H);
}

[[maybe_unused]] const bool g_registered = (gru_cell_forward.add(Device::CPU, &forward, __FILE__),
                                            gru_cell_backward.add(Device::CPU, &backward, __FILE__), true);

}  // namespace
}  // namespace ctx::kernels
