// core/cpu/attention.cpp — Backend::attention_forward / _backward on the CPU (core/cpu/fused.h):
// the f32 / f64 kernels of core/cpu/flash_attention.h on the tensors' pointers (the tensors are
// checked against AttnDims by Backend: core/attention_checks.h).
#include "core/cpu/fused.h"
#include "core/cpu/flash_attention.h"

namespace ctx::cpu {
namespace {

template <class F>
const F* ptr(const Tensor& t) {
  return t.defined() ? t.data<F>() : nullptr;
}
template <class F>
F* mptr(Tensor& t) {
  return t.defined() ? t.data<F>() : nullptr;
}

// The kernels' view of rel (and of the relative gradients to write, when given).
template <class F>
FlashRel<F> flash_rel(const AttnRel& rel, AttnRelGrad* drel) {
  CTX_CHECK(!rel.dist_bias.defined(), "cpu attention: AttnRel::dist_bias reaches these kernels expanded into the ",
            "bias [H, T, S] (Backend::attention_forward does it: reads_dist_bias is false here)");
  FlashRel<F> fr;
  fr.Rq = rel.Rq, fr.Rk = rel.Rk;
  if (rel.qidx.defined()) fr.qidx = rel.qidx.data<int32_t>();
  if (rel.kidx.defined()) fr.kidx = rel.kidx.data<int32_t>();
  fr.qrel = ptr<F>(rel.qrel);
  fr.krel = ptr<F>(rel.krel);
  fr.vrel = ptr<F>(rel.vrel);
  if (drel) {
    fr.dqrel = mptr<F>(drel->dqrel);
    fr.dkrel = mptr<F>(drel->dkrel);
    fr.dvrel = mptr<F>(drel->dvrel);
  }
  return fr;
}

}  // namespace

void attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                       Tensor& out, Tensor& lse, const AttnRel& rel, AttnRowStats* stats) {
  auto run = [&](auto tag) {
    using F = decltype(tag);
    FlashStats<F> fs;
    if (stats) fs.rows = stats->rows.data<F>(), fs.sink_keys = stats->sink_keys;
    flash_attention_forward<F>(d, q.data<F>(), k.data<F>(), v.data<F>(), ptr<F>(bias), out.data<F>(),
                               lse.data<F>(), flash_rel<F>(rel, nullptr), fs);
  };
  if (q.dtype() == DType::F32) run(float());
  else run(double());
}

void attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                        Tensor& dv, Tensor& dbias, const AttnRel& rel, AttnRelGrad& drel) {
  auto run = [&](auto tag) {
    using F = decltype(tag);
    flash_attention_backward<F>(d, q.data<F>(), k.data<F>(), v.data<F>(), ptr<F>(bias), out.data<F>(),
                                lse.data<F>(), dout.data<F>(), dq.data<F>(), dk.data<F>(), dv.data<F>(),
                                mptr<F>(dbias), flash_rel<F>(rel, &drel));
  };
  if (q.dtype() == DType::F32) run(float());
  else run(double());
}

}  // namespace ctx::cpu
