// autograd/kernels/cope_formula.h — CoPE's scan over one query row (POSENC_SPEC §7.2; cope.h),
// forward and backward: the one definition that the CPU kernels (cope_cpu.cpp) and the CUDA
// kernels (cope_cuda.cu) both compile. Row r: a, out, psum, da [S]; z, dz [npos].
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace ctx::kernels {

// The visible keys of query position qp: [lo, hi] (hi = min(qp, S - 1); lo = 0, or with a
// window W > 0, max(0, qp - W + 1)).
CTX_HOST_DEVICE inline void cope_visible(int64_t qp, int64_t S, int64_t window, int64_t& lo, int64_t& hi) {
  hi = qp < S - 1 ? qp : S - 1;
  lo = window > 0 && qp - window + 1 > 0 ? qp - window + 1 : 0;
}

template <class F>
CTX_HOST_DEVICE inline F cope_sigmoid(F x) {
  return F(1) / (F(1) + std::exp(-x));
}

// p = min(psum, npos - 1) and its floor / ceil indices and weight w = p - floor(p)
template <class F>
CTX_HOST_DEVICE inline void cope_interp(F psum, int64_t npos, int64_t& fl, int64_t& ce, F& w) {
  const F cap = F(npos - 1);
  const F p = psum < cap ? psum : cap;
  const F f = std::floor(p);
  fl = (int64_t)f;
  ce = (int64_t)std::ceil(p);
  w = p - f;
}

template <class F>
CTX_HOST_DEVICE inline void cope_row_forward(const F* a, const F* z, int64_t S, int64_t npos, int64_t qp,
                                             int64_t window, F scale, F* out, F* psum) {
  int64_t lo, hi;
  cope_visible(qp, S, window, lo, hi);
  for (int64_t j = 0; j < S; ++j) out[j] = a[j], psum[j] = F(0);
  F acc = F(0);
  for (int64_t j = hi; j >= lo; --j) {  // the reverse cumulative sum, from i down to j
    acc += cope_sigmoid(a[j]);
    psum[j] = acc;
    int64_t fl, ce;
    F w;
    cope_interp(acc, npos, fl, ce, w);
    out[j] = a[j] + (z[ce] * w + z[fl] * (F(1) - w)) * scale;
  }
}

template <class F>
CTX_HOST_DEVICE inline void cope_row_backward(const F* dout, const F* a, const F* z, const F* psum, int64_t S,
                                              int64_t npos, int64_t qp, int64_t window, F scale, F* da, F* dz) {
  int64_t lo, hi;
  cope_visible(qp, S, window, lo, hi);
  for (int64_t j = 0; j < S; ++j) da[j] = dout[j];
  for (int64_t n = 0; n < npos; ++n) dz[n] = F(0);
  F run = F(0);  // dL/dg_k = sum over visible j <= k of dL/dp_j
  for (int64_t j = lo; j <= hi; ++j) {
    int64_t fl, ce;
    F w;
    cope_interp(psum[j], npos, fl, ce, w);
    const F de = dout[j] * scale;
    dz[ce] += de * w;
    dz[fl] += de * (F(1) - w);
    if (psum[j] <= F(npos - 1)) run += de * (z[ce] - z[fl]);  // the clamp passes below its cap
    const F g = cope_sigmoid(a[j]);
    da[j] += run * g * (F(1) - g);
  }
}

}  // namespace ctx::kernels
