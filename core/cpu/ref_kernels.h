// core/cpu/ref_kernels.h — the reference CPU kernels: plain loops templated on the element type
// (float, double), OpenMP over rows where it pays. These define what every primitive means;
// fast paths (oneDNN, OpenBLAS, CUDA) are tested against them.
#pragma once
#include <omp.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/causal_rows.h"
#include "core/cpu/parallel.h"
#include "core/dropout_mask.h"
#include "core/elementwise_formulas.h"

namespace ctx::cpu::ref {

// ---- N-d strided iteration: calls f(src_off, dst_off) for every index of `shape` ----
template <class F>
void for_each_strided(const Shape& shape, const std::vector<int64_t>& sa, int64_t oa,
                      const std::vector<int64_t>& sb, int64_t ob, F&& f) {
  const int64_t nd = (int64_t)shape.size();
  const int64_t n = shape_numel(shape);
  if (n == 0) return;
  if (nd == 0) { f(oa, ob); return; }
  const int64_t inner = shape[nd - 1];
  const int64_t outer = n / inner;
  const int64_t ia = sa[nd - 1], ib = sb[nd - 1];
  CTX_OMP_IF(parallel_pays(n * 2), "omp parallel for schedule(static)",
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, pa = oa, pb = ob;
    for (int64_t d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % shape[d];
      rem /= shape[d];
      pa += idx * sa[d];
      pb += idx * sb[d];
    }
    for (int64_t i = 0; i < inner; ++i) f(pa + i * ia, pb + i * ib);
  });
}

// ---- elementwise (the per-element formulas: core/elementwise_formulas.h) ----
template <class T>
void unary(UnaryOp op, const T* x, T* y, int64_t n, T a, T b) {
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < n; ++i) y[i] = formula::unary(op, x[i], a, b););
}

template <class T>
void unary_backward(UnaryOp op, const T* x, const T* y, const T* dy, T* dx, int64_t n, T a, T b) {
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * formula::unary_deriv(op, x ? x[i] : T(0), y ? y[i] : T(0), a, b););
}

// y = x * mask factor (core/dropout_mask.h); the backward is the same call on dy
template <class T>
void dropout(const T* x, T* y, int64_t n, const DropoutMask& m) {
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * m.factor<T>((uint64_t)i););
}

// ---- softmax over the last dim: x, y [N, C] ----
// With `rows` (a causal mask, core/causal_rows.h) each row is the softmax of its visible columns
// [lo, hi) and 0 elsewhere (log: -inf), the masked inputs never read: the same values as
// causal_fill(-inf) then softmax, in one pass. y may be x.
template <class T>
void softmax(const T* x, T* y, int64_t N, int64_t C, bool log, CausalRows rows = {}) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = x + n * C;
    T* yr = y + n * C;
    const int64_t lo = rows.lo(n), hi = std::max(lo, rows.hi(n, C));
    const T out = log ? -INFINITY : T(0);  // the masked columns' value
    T mx = -INFINITY;
    _Pragma("omp simd reduction(max : mx)")
    for (int64_t c = lo; c < hi; ++c) mx = std::max(mx, xr[c]);
    if (mx == -INFINITY) {  // fully masked row: define softmax as 0 (log: -inf)
      for (int64_t c = 0; c < C; ++c) yr[c] = out;
      continue;
    }
    T s = 0;
    if (log) {
      _Pragma("omp simd reduction(+ : s)")
      for (int64_t c = lo; c < hi; ++c) s += std::exp(xr[c] - mx);
      const T ls = std::log(s) + mx;
      _Pragma("omp simd")
      for (int64_t c = lo; c < hi; ++c) yr[c] = xr[c] - ls;
    } else {  // exp once, stored, then scaled
      for (int64_t c = lo; c < hi; ++c) {
        yr[c] = std::exp(xr[c] - mx);
        s += yr[c];
      }
      const T inv = T(1) / s;
      _Pragma("omp simd")
      for (int64_t c = lo; c < hi; ++c) yr[c] *= inv;
    }
    for (int64_t c = 0; c < lo; ++c) yr[c] = out;
    for (int64_t c = hi; c < C; ++c) yr[c] = out;
  });
}

// With `rows`: the gradient of the masked softmax above, 0 in the masked columns (their inputs
// were overwritten by the mask), dy read only where visible.
template <class T>
void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C, bool log, CausalRows rows = {}) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* yr = y + n * C;
    const T* gr = dy + n * C;
    T* dr = dx + n * C;
    const int64_t lo = rows.lo(n), hi = std::max(lo, rows.hi(n, C));
    T s = 0;
    if (log) {  // dx = dy - softmax * sum(dy)
      _Pragma("omp simd reduction(+ : s)")
      for (int64_t c = lo; c < hi; ++c) s += gr[c];
      for (int64_t c = lo; c < hi; ++c) dr[c] = gr[c] - std::exp(yr[c]) * s;
    } else {  // dx = y * (dy - sum(dy * y))
      _Pragma("omp simd reduction(+ : s)")
      for (int64_t c = lo; c < hi; ++c) s += gr[c] * yr[c];
      _Pragma("omp simd")
      for (int64_t c = lo; c < hi; ++c) dr[c] = yr[c] * (gr[c] - s);
    }
    for (int64_t c = 0; c < lo; ++c) dr[c] = T(0);
    for (int64_t c = hi; c < C; ++c) dr[c] = T(0);
  });
}

// The residual add in front of a norm (Backend::add_layernorm / add_rmsnorm): with a (and h), row n
// of h = x + a is written first and normalised in its place; returns the row the norm reads.
template <class T>
inline const T* residual_row(const T* x, const T* a, T* h, int64_t n, int64_t C) {
  const T* xr = x + n * C;
  if (!a) return xr;
  const T* ar = a + n * C;
  T* hr = h + n * C;
#pragma omp simd
  for (int64_t c = 0; c < C; ++c) hr[c] = xr[c] + ar[c];
  return hr;
}

// ---- layer norm: x, y [N, C]; w, b [C]; mean, rstd [N]; a, h [N, C] or null: the norm of h = x + a ----
template <class T>
void layernorm(const T* x, const T* w, const T* b, T eps, T* y, T* mean, T* rstd, int64_t N,
               int64_t C, const T* a = nullptr, T* h = nullptr) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = residual_row(x, a, h, n, C);
    T* yr = y + n * C;
    T m = 0;
    _Pragma("omp simd reduction(+ : m)")
    for (int64_t c = 0; c < C; ++c) m += xr[c];
    m /= T(C);
    T v = 0;
    _Pragma("omp simd reduction(+ : v)")
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    v /= T(C);
    T r = T(1) / std::sqrt(v + eps);
    if (b) {
      _Pragma("omp simd")
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * r * w[c] + b[c];
    } else {
      _Pragma("omp simd")
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * r * w[c];
    }
    mean[n] = m;
    rstd[n] = r;
  });
}

// Canonical column sums over the rows of a gradient: out[c] (+)= sum over r < R of row(r)[c],
// for bias, norm-weight and broadcast gradients. The rows are cut by recursive halving (the first
// n/2, then the rest) down to leaves of at most kRowLeaf rows, each summed in row order, and the
// leaf sums are added back up the same tree. The bits depend on R and the data only, not on the
// thread count (threads split the columns), and splitting the rows in two halves gives, bit for bit,
//   colsum(rows [0, R)) == colsum(rows [0, R/2)) + colsum(rows [R/2, R))
// which is what two MPI ranks (MPI_Allreduce of their partial sums) or two accumulated
// micro-batches compute. With the weight GEMMs and embedding scatters summed in the same kind of
// tree (autograd/ops_util.h row_tree), an AdamW run under `mpirun -np 2` or `--accum 2` equals
// the single process bit for bit, even where a gradient is pure rounding noise (the key part of
// the qkv bias: docs/distributed.md). Scratch (one row of C per tree level, per thread) is kept
// and grows once: no allocation in a warm step.
//   row(r, c0, w, acc): acc[0 .. w) += the terms of row r at columns c0 .. c0 + w.
constexpr int64_t kRowLeaf = 32;

template <class T, class Row>
void colsum_tree_rec(const Row& row, int64_t r0, int64_t n, int64_t c0, int64_t w, T* dst, T* scratch) {
  if (n <= kRowLeaf) {
    for (int64_t c = 0; c < w; ++c) dst[c] = T(0);
    for (int64_t r = r0; r < r0 + n; ++r) row(r, c0, w, dst);
    return;
  }
  const int64_t h = n / 2;
  colsum_tree_rec(row, r0, h, c0, w, dst, scratch + w);
  colsum_tree_rec(row, r0 + h, n - h, c0, w, scratch, scratch + w);
#pragma omp simd
  for (int64_t c = 0; c < w; ++c) dst[c] += scratch[c];
}

template <class T, class Row>
void colsum_tree(int64_t R, int64_t C, const Row& row, T* out, bool accumulate) {
  int64_t depth = 1;
  for (int64_t n = R; n > kRowLeaf; n = n - n / 2) ++depth;  // the deepest path (the right spine)
  const int64_t nt = std::max<int64_t>(1, std::min<int64_t>(threads_for(R * C), C / 16));
  const int64_t chunk = ((C + nt - 1) / nt + 15) / 16 * 16;  // columns per thread, 64-byte multiples
  auto part = [&](int64_t t) {  // thread t's columns (no omp_get_thread_num: a team may call this)
    thread_local std::vector<T> scratch;
    const int64_t c0 = std::min<int64_t>(C, t * chunk);
    const int64_t w = std::min<int64_t>(C - c0, chunk);
    if (w > 0) {
      if ((int64_t)scratch.size() < (depth + 2) * w) scratch.resize((size_t)((depth + 2) * w));
      T* sum = accumulate ? scratch.data() + (depth + 1) * w : out + c0;
      colsum_tree_rec(row, 0, R, c0, w, sum, scratch.data());
      if (accumulate)
        for (int64_t c = 0; c < w; ++c) out[c0 + c] += sum[c];
    }
  };
  if (nt > 1) {
#pragma omp parallel num_threads((int)nt)
    part(omp_get_thread_num());
  } else {
    part(0);
  }
}

// out [C] = column sums of x [R, C] in the canonical order
template <class T>
void colsum_rows(const T* x, int64_t R, int64_t C, T* out) {
  colsum_tree<T>(R, C, [x, C](int64_t r, int64_t c0, int64_t w, T* acc) {
    const T* xr = x + r * C + c0;
#pragma omp simd
    for (int64_t c = 0; c < w; ++c) acc[c] += xr[c];
  }, out, false);
}

// The weight gradients of a norm over x [N, C] with per-row (mean, rstd), accumulated in the
// canonical order: dw += sum_r dy * (x - mean) * rstd (mean null: RMSNorm), db += sum_r dy.
template <class T>
void norm_param_grads(const T* dy, const T* x, const T* mean, const T* rstd, T* dw, T* db, int64_t N,
                      int64_t C) {
  colsum_tree<T>(N, C, [=](int64_t r, int64_t c0, int64_t w, T* acc) {
    const T* g = dy + r * C + c0;
    const T* xr = x + r * C + c0;
    const T m = mean ? mean[r] : T(0), s = rstd[r];
#pragma omp simd
    for (int64_t c = 0; c < w; ++c) acc[c] += g[c] * ((xr[c] - m) * s);
  }, dw, true);
  if (db) colsum_tree<T>(N, C, [=](int64_t r, int64_t c0, int64_t w, T* acc) {
    const T* g = dy + r * C + c0;
#pragma omp simd
    for (int64_t c = 0; c < w; ++c) acc[c] += g[c];
  }, db, true);
}

// Per-thread partial sums combined in thread order after the parallel region, so that a
// reduction gives the same bits for a given thread count whatever order the threads finish in
// (an `omp critical` accumulation does not: (a+b)+c != (a+c)+b).
template <class T>
struct ThreadPartials {
  explicit ThreadPartials(int64_t n) : n_(n), parts_((size_t)omp_get_max_threads()) {}
  T* mine() {  // inside the parallel region: this thread's zeroed buffer
    auto& v = parts_[(size_t)omp_get_thread_num()];
    v.assign((size_t)n_, T(0));
    return v.data();
  }
  void add_to(T* out) const {  // after the region: out += sum of the buffers, thread 0 first
    for (auto& v : parts_)
      if (!v.empty())
        for (int64_t i = 0; i < n_; ++i) out[i] += v[(size_t)i];
  }

 private:
  int64_t n_;
  std::vector<std::vector<T>> parts_;
};

// dx overwritten (dres: dx = dres + the gradient; dres may be dx); dw, db accumulated (canonical
// row order: norm_param_grads). Parallel over rows.
template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                        T* dw, T* db, int64_t N, int64_t C, const T* dres = nullptr) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* g = dy + n * C;
    const T* xr = x + n * C;
    const T* dr = dres ? dres + n * C : nullptr;
    T* d = dx + n * C;
    T m = mean[n], r = rstd[n];
    T sg = 0, sgx = 0;
    _Pragma("omp simd reduction(+ : sg, sgx)")
    for (int64_t c = 0; c < C; ++c) {
      T xh = (xr[c] - m) * r;
      T gw = g[c] * w[c];
      sg += gw;
      sgx += gw * xh;
    }
    sg /= T(C);
    sgx /= T(C);
    _Pragma("omp simd")
    for (int64_t c = 0; c < C; ++c) {
      T xh = (xr[c] - m) * r;
      const T t = r * (g[c] * w[c] - sg - xh * sgx);
      d[c] = dr ? dr[c] + t : t;
    }
  });
  norm_param_grads(dy, x, mean, rstd, dw, db, N, C);
}

// ---- RMS norm: y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) ----
template <class T>
void rmsnorm(const T* x, const T* w, T eps, T* y, T* rstd, int64_t N, int64_t C, const T* a = nullptr,
             T* h = nullptr) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* xr = residual_row(x, a, h, n, C);
    T s = 0;
    _Pragma("omp simd reduction(+ : s)")
    for (int64_t c = 0; c < C; ++c) s += xr[c] * xr[c];
    T r = T(1) / std::sqrt(s / T(C) + eps);
    _Pragma("omp simd")
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = xr[c] * r * w[c];
    rstd[n] = r;
  });
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw, int64_t N,
                      int64_t C, const T* dres = nullptr) {
  CTX_OMP_IF(parallel_pays(N * C * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* g = dy + n * C;
    const T* xr = x + n * C;
    T r = rstd[n];
    T s = 0;  // sum g*w*x
    _Pragma("omp simd reduction(+ : s)")
    for (int64_t c = 0; c < C; ++c) s += g[c] * w[c] * xr[c];
    T k = s * r * r * r / T(C);
    _Pragma("omp simd")
    for (int64_t c = 0; c < C; ++c) {
      const T t = g[c] * w[c] * r - xr[c] * k;
      dx[n * C + c] = dres ? dres[n * C + c] + t : t;
    }
  });
  norm_param_grads<T>(dy, x, nullptr, rstd, dw, nullptr, N, C);  // canonical row order
}

// ---- cross entropy: logits [N, V], targets [N] ----
template <class T, class I>
void cross_entropy(const T* logits, const I* tgt, T* loss, T* lse, int64_t N, int64_t V) {
  CTX_OMP_IF(parallel_pays(N * V * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    T mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, z[v]);
    T s = 0;
    for (int64_t v = 0; v < V; ++v) s += std::exp(z[v] - mx);
    T l = std::log(s) + mx;
    lse[n] = l;
    loss[n] = tgt[n] < 0 ? T(0) : l - z[tgt[n]];
  });
}

template <class T, class I>
void cross_entropy_backward(const T* logits, const I* tgt, const T* lse, const T* dloss, T* dz,
                            int64_t N, int64_t V) {
  CTX_OMP_IF(parallel_pays(N * V * 4), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n) {
    const T* z = logits + n * V;
    T* d = dz + n * V;
    if (tgt[n] < 0) {
      for (int64_t v = 0; v < V; ++v) d[v] = 0;
      continue;
    }
    T g = dloss[n], l = lse[n];
    for (int64_t v = 0; v < V; ++v) d[v] = g * std::exp(z[v] - l);
    d[tgt[n]] -= g;
  });
}

// ---- AdamW (PyTorch semantics: p -= lr*wd*p; then Adam with bias correction) ----
template <class T>
void adamw(T* p, const T* g, T* m, T* v, int64_t n, double lr, double b1, double b2, double eps,
           double wd, int64_t step) {
  const double bc1 = 1.0 - std::pow(b1, (double)step);
  const double bc2 = 1.0 - std::pow(b2, (double)step);
  const T step_size = (T)(lr / bc1);
  const T bc2_sqrt = (T)std::sqrt(bc2);
  const T decay = (T)(1.0 - lr * wd);
  const T tb1 = (T)b1, tb2 = (T)b2, teps = (T)eps;
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t i = 0; i < n; ++i) {
    T gi = g[i];
    p[i] *= decay;
    m[i] = tb1 * m[i] + (T(1) - tb1) * gi;
    v[i] = tb2 * v[i] + (T(1) - tb2) * gi * gi;
    T denom = std::sqrt(v[i]) / bc2_sqrt + teps;
    p[i] -= step_size * m[i] / denom;
  });
}


// ---- broadcasting binary op: out[idx] = a[idx . sa] op b[idx . sb], out contiguous ----
template <class T>
void binary(BinaryOp op, const T* ap, const std::vector<int64_t>& sa, const T* bp,
            const std::vector<int64_t>& sb, T* out, const Shape& os, int64_t na, int64_t nb) {
  const int64_t n = shape_numel(os);
  if (n == 0) return;
  if (na == n && nb == n) {
    CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
    for (int64_t i = 0; i < n; ++i) out[i] = formula::binary(op, ap[i], bp[i]););
    return;
  }
  if (na == n && nb == 1) {
    const T bv = bp[0];
    CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
    for (int64_t i = 0; i < n; ++i) out[i] = formula::binary(op, ap[i], bv););
    return;
  }
  const int64_t nd = (int64_t)os.size();
  const int64_t inner = os[nd - 1], outer = n / inner;
  const int64_t ia = sa[nd - 1], ib = sb[nd - 1];
  CTX_OMP_IF(parallel_pays(n), "omp parallel for schedule(static)",
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, pa = 0, pb = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      int64_t idx = rem % os[d];
      rem /= os[d];
      pa += idx * sa[d];
      pb += idx * sb[d];
    }
    T* orow = out + o * inner;
    for (int64_t i = 0; i < inner; ++i) orow[i] = formula::binary(op, ap[pa + i * ia], bp[pb + i * ib]);
  });
}

// ---- sum of x [xs] into out, out strides `so` over xs (0 on summed dims) ----
template <class T>
void reduce_sum(const T* xp, const Shape& xs, const std::vector<int64_t>& so, T* out, int64_t no) {
  const int64_t n = shape_numel(xs);
  for (int64_t i = 0; i < no; ++i) out[i] = T(0);
  if (n == 0) return;
  const int64_t nd = (int64_t)xs.size();
  if (no == 1) {
    T s = 0;
    CTX_OMP_IF(parallel_pays(n), "omp parallel for reduction(+ : s) schedule(static)",
    for (int64_t i = 0; i < n; ++i) s += xp[i];);
    out[0] = s;
    return;
  }
  {  // leading dims summed, the trailing ones kept in out's order: [R, C] -> [C] (bias gradients,
     // a [B, T, D] gradient of a [T, D] table): the canonical row order, see colsum_tree
    int64_t k = 0;
    while (k < nd && (so[k] == 0 || xs[k] == 1)) ++k;
    bool suffix = true;
    int64_t C = 1;
    for (int64_t d = nd - 1; d >= k; --d) {
      suffix &= xs[d] == 1 || so[d] == C;
      C *= xs[d];
    }
    if (suffix && C == no) {
      colsum_rows(xp, n / C, C, out);
      return;
    }
  }
  // Any other pattern (e.g. [B, H, T, D] -> [1, H, 1, D]): the dims, size-1 ones dropped, are
  // merged into alternating runs of reduced (out stride 0) and kept dims; x is walked in rows of
  // the innermost run (summed to one value, or added to a contiguous run of out), the outer
  // position advanced like an odometer (no division per element). Threads: a kept inner run is
  // split by columns (each thread owns its slice of out: no extra memory, the same sums at any
  // thread count); a reduced one by rows, each thread summing into its own copy of out
  // (ThreadPartials, deterministic for a thread count), only when out is small next to x.
  struct Run {
    int64_t n, so;  // size, stride in out (0: reduced)
  };
  std::vector<Run> runs;
  for (int64_t d = 0; d < nd; ++d) {
    if (xs[d] == 1) continue;
    const Run cur{xs[d], so[d]};
    if (!runs.empty()) {
      Run& b = runs.back();
      if ((b.so == 0 && cur.so == 0) || (b.so != 0 && cur.so != 0 && b.so == cur.so * cur.n)) {
        b.n *= cur.n;
        b.so = cur.so;
        continue;
      }
    }
    runs.push_back(cur);
  }
  if (runs.empty()) {  // every dim has size 1
    out[0] += xp[0];
    return;
  }
  const Run inner = runs.back();  // inner.so is 0 (reduced) or 1 (kept: out is contiguous)
  const int64_t L = inner.n, rows = n / L, k = (int64_t)runs.size() - 1;
  // rows [r0, r1), inner columns [c0, c1) (kept inner run) into acc
  auto walk = [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1, T* acc) {
    std::vector<int64_t> idx((size_t)k);
    int64_t rem = r0, po = 0;
    for (int64_t d = k - 1; d >= 0; --d) {
      idx[(size_t)d] = rem % runs[(size_t)d].n;
      rem /= runs[(size_t)d].n;
      po += idx[(size_t)d] * runs[(size_t)d].so;
    }
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = xp + r * L;
      if (inner.so == 0) {
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < L; ++c) sum += xr[c];
        acc[po] += sum;
      } else {
        T* o = acc + po;
#pragma omp simd
        for (int64_t c = c0; c < c1; ++c) o[c] += xr[c];
      }
      for (int64_t d = k - 1; d >= 0; --d) {  // next row's output offset
        po += runs[(size_t)d].so;
        if (++idx[(size_t)d] < runs[(size_t)d].n) break;
        po -= runs[(size_t)d].so * runs[(size_t)d].n;
        idx[(size_t)d] = 0;
      }
    }
  };
  const int nt = threads_for(n);
  if (nt < 2 || rows < 2) {
    walk(0, rows, 0, L, out);
  } else if (inner.so != 0) {
#pragma omp parallel num_threads(nt)
    {
      const int64_t t = omp_get_thread_num(), m = omp_get_num_threads();
      walk(0, rows, L * t / m, L * (t + 1) / m, out);
    }
  } else if (no * nt <= n) {
    ThreadPartials<T> parts(no);
#pragma omp parallel num_threads(nt)
    {
      T* acc = parts.mine();
      const int64_t t = omp_get_thread_num(), m = omp_get_num_threads();
      walk(rows * t / m, rows * (t + 1) / m, 0, L, acc);
    }
    parts.add_to(out);
  } else {
    walk(0, rows, 0, L, out);
  }
}

// ---- causal fill: x [N, T, S], x[n, i, j] = v for j > i + diag; with window > 0 also for
// j <= i + diag - window (sliding-window attention: each row keeps at most `window` keys) ----
template <class T>
void causal_fill(T* p, int64_t N, int64_t Tq, int64_t S, T v, int64_t diag, int64_t window) {
  CTX_OMP_IF(parallel_pays(N * Tq * S), "omp parallel for schedule(static)",
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < Tq; ++i) {
      T* row = p + (n * Tq + i) * S;
      for (int64_t j = std::max<int64_t>(0, i + diag + 1); j < S; ++j) row[j] = v;
      if (window > 0)
        for (int64_t j = 0, e = std::min<int64_t>(S, i + diag - window + 1); j < e; ++j) row[j] = v;
    });
}

// ---- gather / scatter-add along the middle dim of [outer, n, inner] (indices checked) ----
template <class T, class I>
void index_select(const T* x, const I* idx, T* out, int64_t outer, int64_t n, int64_t m,
                  int64_t inner) {
  CTX_OMP_IF(parallel_pays(outer * m * inner), "omp parallel for collapse(2) schedule(static)",
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < m; ++i)
      std::memcpy(out + (o * m + i) * inner, x + (o * n + idx[i]) * inner, inner * sizeof(T)););
}

template <class T, class I>
void index_add(T* out, const I* idx, const T* src, int64_t outer, int64_t n, int64_t m,
               int64_t inner) {
  // parallel over column blocks: no two threads touch the same element
  CTX_OMP_IF(parallel_pays(outer * m * inner) && inner >= 128, "omp parallel for schedule(static)",
  for (int64_t c0 = 0; c0 < inner; c0 += 64) {
    const int64_t c1 = std::min(inner, c0 + 64);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < m; ++i) {
        T* dst = out + (o * n + idx[i]) * inner;
        const T* s = src + (o * m + i) * inner;
        for (int64_t c = c0; c < c1; ++c) dst[c] += s[c];
      }
  });
}

}  // namespace ctx::cpu::ref
