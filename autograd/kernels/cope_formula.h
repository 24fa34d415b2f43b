// autograd/kernels/cope_formula.h — CoPE's scan over one query row (POSENC_SPEC §7.2; cope.h),
// forward and backward: the one definition that the CPU kernels (cope_cpu.cpp) and the CUDA
// kernels (cope_cuda.cu) both compile. Row r: a, out, psum, da [S]; z, dz [npos].
#pragma once
#include <cmath>
#include <cstdint>

#include "core/host_device.h"

namespace ctx::kernels {

// The visible keys of query position qp (POSENC_SPEC §6): the window [lo, hi] (hi = min(qp, S - 1);
// lo = 0, or with a window W > 0, max(0, qp - W + 1)) and, with sinks > 0, the sink keys [0, send)
// below it. send < lo always; send = 0 when there are no sinks or they touch the window (then
// lo = 0: one interval). The scans run the window from hi down and then the sinks (forward), or
// the sinks from 0 up and then the window (backward): keys in rank order, the gap between skipped.
CTX_HOST_DEVICE inline void cope_visible(int64_t qp, int64_t S, int64_t window, int64_t sinks, int64_t& send,
                                         int64_t& lo, int64_t& hi) {
  hi = qp < S - 1 ? qp : S - 1;
  lo = window > 0 && qp - window + 1 > 0 ? qp - window + 1 : 0;
  send = 0;
  if (sinks >= lo) lo = 0;                            // sinks and window touch: [0, hi]
  else if (sinks > 0) send = sinks < hi + 1 ? sinks : hi + 1;
}
CTX_HOST_DEVICE inline bool cope_in_row(int64_t j, int64_t send, int64_t lo, int64_t hi) {
  return j < send || (j >= lo && j <= hi);
}
// The visible keys in rank order: for (j = cope_first(send, lo); j <= hi; j = cope_next(j, send, lo)).
CTX_HOST_DEVICE inline int64_t cope_first(int64_t send, int64_t lo) { return send > 0 ? 0 : lo; }
CTX_HOST_DEVICE inline int64_t cope_next(int64_t j, int64_t send, int64_t lo) { return j + 1 == send ? lo : j + 1; }

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

// One visible key j of the forward scan (from i down): acc += g_j, psum_j = acc, and the logit
// out_j = a_j + e_j scale with e_j interpolated in z.
template <class F>
CTX_HOST_DEVICE inline void cope_forward_step(F a, F g, const F* z, int64_t npos, F scale, F& acc, F& out, F& psum) {
  acc += g;
  psum = acc;
  int64_t fl, ce;
  F w;
  cope_interp(acc, npos, fl, ce, w);
  out = a + (z[ce] * w + z[fl] * (F(1) - w)) * scale;
}

// One visible key j of the backward scan (from lo up), slope = g_j (1 - g_j): adds its dz terms,
// run += dL/dp_j where the clamp passes (psum <= npos - 1), and returns da_j = dout_j + run slope.
template <class F>
CTX_HOST_DEVICE inline F cope_backward_step(F dout, F slope, F psum, const F* z, int64_t npos, F scale, F& run,
                                            F* dz) {
  int64_t fl, ce;
  F w;
  cope_interp(psum, npos, fl, ce, w);
  const F de = dout * scale;
  dz[ce] += de * w;
  dz[fl] += de * (F(1) - w);
  if (psum <= F(npos - 1)) run += de * (z[ce] - z[fl]);  // the clamp passes below its cap
  return dout + run * slope;
}

template <class F>
CTX_HOST_DEVICE inline void cope_row_forward(const F* a, const F* z, int64_t S, int64_t npos, int64_t qp,
                                             int64_t window, int64_t sinks, F scale, F* out, F* psum) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  for (int64_t j = 0; j < S; ++j) out[j] = a[j], psum[j] = F(0);
  F acc = F(0);
  for (int64_t j = hi; j >= lo; --j) cope_forward_step(a[j], cope_sigmoid(a[j]), z, npos, scale, acc, out[j], psum[j]);
  for (int64_t j = send - 1; j >= 0; --j)
    cope_forward_step(a[j], cope_sigmoid(a[j]), z, npos, scale, acc, out[j], psum[j]);
}

template <class F>
CTX_HOST_DEVICE inline void cope_row_backward(const F* dout, const F* a, const F* z, const F* psum, int64_t S,
                                              int64_t npos, int64_t qp, int64_t window, int64_t sinks, F scale,
                                              F* da, F* dz) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  for (int64_t j = 0; j < S; ++j) da[j] = dout[j];
  for (int64_t n = 0; n < npos; ++n) dz[n] = F(0);
  F run = F(0);  // dL/dg_k = sum over visible j <= k of dL/dp_j
  for (int64_t j = cope_first(send, lo); j <= hi; j = cope_next(j, send, lo)) {  // the sinks, then the window
    const F g = cope_sigmoid(a[j]);
    da[j] = cope_backward_step(dout[j], g * (F(1) - g), psum[j], z, npos, scale, run, dz);
  }
}

// The attention's rows (cope_softmax_*): the softmax of the row's logits over its visible keys in
// place, 0 elsewhere (a row without a finite logit: all 0, as ref::softmax); and its backward in
// place, dp -> p (dp - sum(dp p)) on the visible keys, 0 elsewhere. Sequential over the row: the
// CUDA kernels' (one thread per row) and the CPU's f64 (its f32 runs on vectors, softmax_fast.h).
template <class F>
CTX_HOST_DEVICE inline void cope_row_softmax(F* row, int64_t S, int64_t qp, int64_t window, int64_t sinks) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  F mx = -INFINITY;
  for (int64_t j = cope_first(send, lo); j <= hi; j = cope_next(j, send, lo)) mx = row[j] > mx ? row[j] : mx;
  F sum = F(0);
  for (int64_t j = cope_first(send, lo); j <= hi; j = cope_next(j, send, lo))
    sum += row[j] = mx == -INFINITY ? F(0) : std::exp(row[j] - mx);
  const F inv = sum > F(0) ? F(1) / sum : F(0);
  for (int64_t j = 0; j < S; ++j) row[j] = cope_in_row(j, send, lo, hi) ? row[j] * inv : F(0);
}

template <class F>
CTX_HOST_DEVICE inline void cope_row_softmax_backward(const F* p, F* dp, int64_t S, int64_t qp, int64_t window,
                                                      int64_t sinks) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  F s = F(0);
  for (int64_t j = cope_first(send, lo); j <= hi; j = cope_next(j, send, lo)) s += dp[j] * p[j];
  for (int64_t j = 0; j < S; ++j) dp[j] = cope_in_row(j, send, lo, hi) ? p[j] * (dp[j] - s) : F(0);
}

}  // namespace ctx::kernels
