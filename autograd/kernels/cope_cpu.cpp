// autograd/kernels/cope_cpu.cpp — the CPU kernels of CoPE's gated positions (cope.h, the
// semantics; registered below for Device::CPU): one scan per query row (cope_formula.h), rows in
// parallel: cope_formula.h's row with its sigmoids, interpolations and dL/dp taken on whole vectors
// (core/cpu/simd.h), the running sums and dz's scatter scalar; the attention's kernels run the
// row's softmax (core/cpu/softmax_fast.h) while the row is in cache. Its CUDA twin is cope_cuda.cu.
#include "autograd/kernels/cope.h"
#include "autograd/kernels/cope_formula.h"
#include "core/cpu/parallel.h"
#include "core/cpu/simd.h"
#include "core/cpu/softmax_fast.h"

#include <algorithm>
#include <type_traits>
#if defined(__AVX512F__)
#include <immintrin.h>
#endif
#include <utility>

namespace ctx::kernels {
namespace {

// y[j] = sigmoid(x[j]) for j in [lo, hi], or its derivative sigmoid (1 - sigmoid) with Deriv
template <bool Deriv, class F>
void sigmoids(const F* x, int64_t lo, int64_t hi, F* y) {
  constexpr int64_t W = cpu::kW<F>;
  int64_t j = lo;
  for (; j + W <= hi + 1; j += W) {
    const cpu::Vec<F> g = cpu::sigmoid_vec<F>(cpu::vload(x + j));
    cpu::vstore(y + j, Deriv ? g * (F(1) - g) : g);
  }
  for (; j <= hi; ++j) {
    const F g = cope_sigmoid(x[j]);
    y[j] = Deriv ? g * (F(1) - g) : g;
  }
}

// The integer lanes as wide as Vec<F> (int32 for float, int64 for double).
template <class F>
struct VecIT {
  typedef std::conditional_t<sizeof(F) == 4, int32_t, int64_t> type __attribute__((vector_size(cpu::kVecBytes)));
};
template <class F>
using VecI = typename VecIT<F>::type;

// out[t] = z[idx[t]]: the hardware gather where the vectors are AVX-512 (one vgatherdps /
// vgatherqpd where lane-by-lane loads and inserts took a third of the scans' time; the masked
// form: GCC 12 warns on the plain one's undefined source), else lanes.
template <class F>
inline void gather(const F* z, VecI<F> idx, cpu::Vec<F>& out) {
#if defined(__AVX512F__)
  if constexpr (cpu::kVecBytes == 64 && sizeof(F) == 4) {
    out = (cpu::Vec<F>)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), (__mmask16)0xFFFF, (__m512i)idx, z, 4);
    return;
  } else if constexpr (cpu::kVecBytes == 64 && sizeof(F) == 8) {
    out = (cpu::Vec<F>)_mm512_mask_i64gather_pd(_mm512_setzero_pd(), (__mmask8)0xFF, (__m512i)idx, z, 8);
    return;
  }
#endif
  for (int64_t t = 0; t < cpu::kW<F>; ++t) out[t] = z[idx[t]];
}

// cope_interp on W lanes: p = min(psum, npos - 1) (NaN -> the cap), floor / ceil (p >= 0: the
// truncation is the floor), w = p - floor, and z at both indices.
template <class F>
struct Interp {
  cpu::Vec<F> w, zf, zc;
  VecI<F> fl, ce;
};
template <class F>
inline Interp<F> interp_vec(cpu::Vec<F> psum, const F* z, cpu::Vec<F> cap) {
  Interp<F> r;
  const cpu::Vec<F> p = psum < cap ? psum : cap;
  r.fl = __builtin_convertvector(p, VecI<F>);
  const cpu::Vec<F> f = __builtin_convertvector(r.fl, cpu::Vec<F>);
  r.w = p - f;
  r.ce = r.fl - (VecI<F>)(p > f);  // a true comparison lane is -1
  gather(z, r.fl, r.zf);
  gather(z, r.ce, r.zc);
  return r;
}

// Lane t of the result is v[t + Sh] (Down) or v[t - Sh], 0 where that lane does not exist (index
// kW: the zero vector's first lane). __builtin_shufflevector (GCC >= 12 and clang) takes the lanes
// as constants, so this is one permute.
template <bool Down, class F, int Sh, size_t... I>
inline cpu::Vec<F> shifted(cpu::Vec<F> v, std::index_sequence<I...>) {
  constexpr int W = (int)cpu::kW<F>;
  return __builtin_shufflevector(v, cpu::Vec<F>{},
                                 (Down ? ((int)I + Sh < W ? (int)I + Sh : W) : ((int)I >= Sh ? (int)I - Sh : W))...);
}
// Suffix sums (lane t: v[t] + ... + v[W-1]) or prefix sums (v[0] + ... + v[t]) in log2(W) steps.
template <bool Suffix, class F, int Sh = 1>
inline cpu::Vec<F> running_sum(cpu::Vec<F> v) {
  if constexpr (Sh < cpu::kW<F>) {
    return running_sum<Suffix, F, 2 * Sh>(v + shifted<Suffix, F, Sh>(v, std::make_index_sequence<(size_t)cpu::kW<F>>{}));
  } else {
    return v;
  }
}

// cope_row_forward's scan over the keys [lo, hi] on vectors, acc carried in (the keys above) and
// out: W keys at a time from hi down (the gates already in out), the running sum (within the block
// by log steps, plus the sum of the blocks above) and the interpolation; the keys left below the
// last whole block take cope_forward_step.
template <class F>
void scan_forward(const F* a, const F* z, int64_t npos, int64_t lo, int64_t hi, F scale, F& acc, F* out, F* psum) {
  constexpr int64_t W = cpu::kW<F>;
  const cpu::Vec<F> cap = cpu::splat(F(npos - 1));
  int64_t j = hi;
  for (; j - W + 1 >= lo; j -= W) {
    const int64_t b = j - W + 1;
    const cpu::Vec<F> ps = running_sum<true, F>(cpu::vload(out + b)) + acc;
    acc = ps[0];
    cpu::vstore(psum + b, ps);
    const Interp<F> ip = interp_vec<F>(ps, z, cap);
    cpu::vstore(out + b, cpu::vload(a + b) + (ip.zc * ip.w + ip.zf * (F(1) - ip.w)) * scale);
  }
  for (; j >= lo; --j) cope_forward_step(a[j], out[j], z, npos, scale, acc, out[j], psum[j]);
}

// cope_row_forward on vectors: the gates first (into out), then the window's keys from i down and
// the sinks' below them (cope_visible), one running sum.
template <class F>
void row_forward(const F* a, const F* z, int64_t S, int64_t npos, int64_t qp, int64_t window, int64_t sinks, F scale,
                 F* out, F* psum) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  for (int64_t j = send; j < lo; ++j) out[j] = a[j], psum[j] = F(0);
  for (int64_t j = hi + 1; j < S; ++j) out[j] = a[j], psum[j] = F(0);
  sigmoids<false>(a, 0, send - 1, out);
  sigmoids<false>(a, lo, hi, out);
  F acc = F(0);
  scan_forward(a, z, npos, lo, hi, scale, acc, out, psum);
  scan_forward(a, z, npos, 0, send - 1, scale, acc, out, psum);
}

// cope_row_backward's scan over the keys [lo, hi] on vectors (the slopes g (1 - g) already in da),
// run carried in (the keys below): W keys at a time from lo up, the interpolation, dL/dp, its
// running sum and da; dz's scatter stays scalar (lanes often share an index). (Spreading it over 4
// copies of dz to break the add chains was slower: 13.0 vs 6.7 ms for [8, 8, 256, 256], the
// copies' zeroing and sum cost more than the chains.)
template <class F>
void scan_backward(const F* dout, const F* z, const F* psum, int64_t npos, int64_t lo, int64_t hi, F scale, F& run,
                   F* da, F* dz) {
  constexpr int64_t W = cpu::kW<F>;
  const cpu::Vec<F> cap = cpu::splat(F(npos - 1));
  int64_t j = lo;
  for (; j + W - 1 <= hi; j += W) {
    const cpu::Vec<F> ps = cpu::vload(psum + j), de = cpu::vload(dout + j) * scale;
    const Interp<F> ip = interp_vec<F>(ps, z, cap);
    const cpu::Vec<F> dp = ps <= cap ? de * (ip.zc - ip.zf) : cpu::Vec<F>{};  // the clamp passes below its cap
    const cpu::Vec<F> tc = de * ip.w, tf = de * (F(1) - ip.w);
    const cpu::Vec<F> runs = running_sum<false, F>(dp) + run;
    run = runs[W - 1];
    cpu::vstore(da + j, cpu::vload(dout + j) + runs * cpu::vload(da + j));
    for (int64_t t = 0; t < W; ++t) {
      dz[ip.ce[t]] += tc[t];
      dz[ip.fl[t]] += tf[t];
    }
  }
  for (; j <= hi; ++j) da[j] = cope_backward_step(dout[j], da[j], psum[j], z, npos, scale, run, dz);
}

// cope_row_backward on vectors: the slopes first (into da), then the sinks' keys from 0 up and the
// window's above them, one running sum.
template <class F>
void row_backward(const F* dout, const F* a, const F* z, const F* psum, int64_t S, int64_t npos, int64_t qp,
                  int64_t window, int64_t sinks, F scale, F* da, F* dz) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  for (int64_t j = send; j < lo; ++j) da[j] = dout[j];
  for (int64_t j = hi + 1; j < S; ++j) da[j] = dout[j];
  for (int64_t n = 0; n < npos; ++n) dz[n] = F(0);
  sigmoids<true>(a, 0, send - 1, da);
  sigmoids<true>(a, lo, hi, da);
  F run = F(0);
  scan_backward(dout, z, psum, npos, 0, send - 1, scale, run, da, dz);
  scan_backward(dout, z, psum, npos, lo, hi, scale, run, da, dz);
}

// The softmax of one row over its visible keys in place (0 elsewhere), and its backward into dp:
// f32 on vectors (core/cpu/softmax_fast.h, no threads of its own; with sinks over [0, hi] with the
// gap between sinks and window at -inf, whose probabilities are then 0, and so their gradients),
// f64 cope_formula.h's loop.
template <class F>
void softmax_row(F* row, int64_t S, int64_t qp, int64_t window, int64_t sinks) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  if constexpr (std::is_same_v<F, float>) {
    if (send > 0) std::fill(row + send, row + lo, -INFINITY), lo = 0;
    cpu::softmax_row_f32(row, row, S, lo, std::max(lo, hi + 1));
  } else {
    cope_row_softmax(row, S, qp, window, sinks);
  }
}
template <class F>
void softmax_backward_row(const F* p, F* dp, int64_t S, int64_t qp, int64_t window, int64_t sinks) {
  int64_t send, lo, hi;
  cope_visible(qp, S, window, sinks, send, lo, hi);
  if constexpr (std::is_same_v<F, float>)
    cpu::softmax_backward_row_f32(p, dp, dp, S, send > 0 ? 0 : lo, std::max(lo, hi + 1));
  else
    cope_row_softmax_backward(p, dp, S, qp, window, sinks);
}

// The rows in parallel, the arguments checked (cope.cpp) before these run. Softmax: the attention's
// kernels (out is p: each row's softmax right after its scan; dout is dp, overwritten with
// dL/dlogits before the scan's backward reads it).
template <class F, bool Softmax>
void forward_t(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, int64_t sinks, double scale,
               Tensor& out, Tensor& psum) {
  const int64_t T = a.size(2), S = a.size(3), np = z.size(3), R = a.numel() / S;
  const F *ap = a.data<F>(), *zp = z.data<F>();
  F *op = out.data<F>(), *pp = psum.data<F>();
  CTX_OMP_IF(cpu::parallel_pays(R * S * (Softmax ? 3 : 2)), "omp parallel for schedule(static)",
  for (int64_t r = 0; r < R; ++r) {
    row_forward(ap + r * S, zp + r * np, S, np, q_pos0 + r % T, window, sinks, (F)scale, op + r * S, pp + r * S);
    if constexpr (Softmax) softmax_row(op + r * S, S, q_pos0 + r % T, window, sinks);
  });
}

// p: the forward's probabilities (Softmax only; else null)
template <class F, bool Softmax>
void backward_t(Tensor dout, const Tensor* p, const Tensor& a, const Tensor& z, const Tensor& psum, int64_t q_pos0,
                int64_t window, int64_t sinks, double scale, Tensor& da, Tensor& dz) {
  const int64_t T = a.size(2), S = a.size(3), np = z.size(3), R = a.numel() / S;
  const F *ap = a.data<F>(), *zp = z.data<F>(), *pp = psum.data<F>(), *prob = Softmax ? p->data<F>() : nullptr;
  F *dp = dout.data<F>(), *dap = da.data<F>(), *dzp = dz.data<F>();
  CTX_OMP_IF(cpu::parallel_pays(R * S * (Softmax ? 3 : 2)), "omp parallel for schedule(static)",
  for (int64_t r = 0; r < R; ++r) {
    if constexpr (Softmax) softmax_backward_row(prob + r * S, dp + r * S, S, q_pos0 + r % T, window, sinks);
    row_backward(dp + r * S, ap + r * S, zp + r * np, pp + r * S, S, np, q_pos0 + r % T, window, sinks, (F)scale,
                 dap + r * S, dzp + r * np);
  });
}

// cope_forward (Softmax false) and cope_softmax_forward (true): the same signature
template <bool Softmax>
void forward(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, int64_t sinks, double scale,
             Tensor& out, Tensor& psum) {
  if (a.dtype() == DType::F32)
    forward_t<float, Softmax>(a, z, q_pos0, window, sinks, scale, out, psum);
  else
    forward_t<double, Softmax>(a, z, q_pos0, window, sinks, scale, out, psum);
}

void backward(const Tensor& dout, const Tensor& a, const Tensor& z, const Tensor& psum, int64_t q_pos0,
              int64_t window, int64_t sinks, double scale, Tensor& da, Tensor& dz) {
  if (a.dtype() == DType::F32)
    backward_t<float, false>(dout, nullptr, a, z, psum, q_pos0, window, sinks, scale, da, dz);
  else
    backward_t<double, false>(dout, nullptr, a, z, psum, q_pos0, window, sinks, scale, da, dz);
}

void softmax_backward(Tensor& dp, const Tensor& p, const Tensor& a, const Tensor& z, const Tensor& psum,
                      int64_t q_pos0, int64_t window, int64_t sinks, double scale, Tensor& da, Tensor& dz) {
  if (a.dtype() == DType::F32)
    backward_t<float, true>(dp, &p, a, z, psum, q_pos0, window, sinks, scale, da, dz);
  else
    backward_t<double, true>(dp, &p, a, z, psum, q_pos0, window, sinks, scale, da, dz);
}

[[maybe_unused]] const bool g_registered = (cope_forward.add(Device::CPU, &forward<false>, __FILE__),
                                            cope_backward.add(Device::CPU, &backward, __FILE__),
                                            cope_softmax_forward.add(Device::CPU, &forward<true>, __FILE__),
                                            cope_softmax_backward.add(Device::CPU, &softmax_backward, __FILE__), true);

}  // namespace
}  // namespace ctx::kernels
