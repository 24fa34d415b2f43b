// tests/test_backend_ops.cpp — one test table for every backend (the idea of ggml's
// test-backend-ops): each Backend method, forward and backward, f32 and f64, on shapes that
// include size 1, odd sizes and sizes past one block of threads, run on every available device
// and compared with the CPU reference kernels (core/cpu/ref_kernels.h, gemm_reference) — or, for
// the fused methods and the extension kernels (core/extension.h: an op's own kernels, registered
// per device by the op that owns them), with a short loop here. Devices:
//   cpu   the CPU backend (its oneDNN / OpenBLAS / fast GELU paths against the reference)
//   cuda  the emulated build (CTXLAB_CUDA_EMULATOR): always; the real build: when a GPU is
//         present, else the test reports "skipped: no GPU" (the only skip in this file).
// Tolerances come from the dtype and the longest reduction behind an output (`L`); ops that are
// exact on every device (copies, index ops, selects, + - * /) must match bit for bit.
// CTXLAB_BACKEND_DIGEST=FILE appends one line per cuda case (name, hash of the output bytes):
// CI runs the emulated table under CTXLAB_EMU_SCHEDULE=forward and =shuffle:7 and compares.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <tuple>
#include <string>
#include <vector>

#include "autograd/kernels/cope.h"
#include "autograd/kernels/fire.h"
#include "autograd/kernels/gru_cell.h"
#include "core/backend.h"
#include "core/cpu/gemm.h"
#include "core/cpu/ref_kernels.h"
#include "core/device_table.h"  // to_device_like
#include "core/elementwise_formulas.h"
#include "core/rng.h"
#include "core/settings.h"
#include "core/tensor.h"
#include "tests/test_util.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/check.h"  // CTX_CUDA_CHECK, CTX_CUBLAS_CHECK (compat.h: CUDA's or the emulator's API)
#include "core/cuda/cuda_runtime.h"
#include "core/cuda/index_plan.h"  // index_add_plan_host / _device, plan_capacity
#endif
#ifdef CTXLAB_CUDA_EMULATOR
#include "core/cuda/emu/emu_runtime.h"  // cuemu::stats, cuemu::set_schedule
#endif

namespace {
using namespace ctx;
namespace ref = ctx::cpu::ref;

// ---------------------------------------------------------------------------------------------
// inputs, devices, outputs

// Uniform in [lo, hi) from `seed`; integer dtypes get the floor.
Tensor rnd(const Shape& s, DType dt, uint64_t seed, double lo = -1, double hi = 1) {
  Rng r(seed);
  Tensor t = Tensor::empty(s, dt);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = r.uniform(lo, hi);
    t.set(i, is_float(dt) ? v : std::floor(v));
  }
  return t;
}
Tensor ints(const std::vector<int64_t>& v, DType dt) {
  Tensor t = Tensor::empty({(int64_t)v.size()}, dt);
  for (size_t i = 0; i < v.size(); ++i) t.set((int64_t)i, (double)v[i]);
  return t;
}

// The device under test: inputs are copied to it, outputs allocated on it (floats NaN-filled, so
// an element a kernel forgets to write cannot match).
struct Dev {
  Device d;
  Backend& be() const { return backend(d); }
  Tensor in(const Tensor& h) const { return d == Device::CPU ? h.clone() : h.to(d); }
  Tensor out(const Shape& s, DType dt) const {
    Tensor t = Tensor::empty(s, dt, d);
    if (is_float(dt)) be().fill(t, NAN);
    return t;
  }
};
Tensor host(const Tensor& t) { return t.device() == Device::CPU ? t : t.to(Device::CPU); }
std::vector<Tensor> hosts(std::initializer_list<Tensor> ts) {
  std::vector<Tensor> v;
  for (const Tensor& t : ts) v.push_back(host(t));
  return v;
}

// Strides of shape s broadcast to out (0 where broadcast), as the backends compute them.
std::vector<int64_t> bstrides(const Shape& s, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  const Shape cs = contiguous_strides(s);
  const size_t off = out.size() - s.size();
  for (size_t i = 0; i < s.size(); ++i) st[i + off] = (s[i] == 1 && out[i + off] != 1) ? 0 : cs[i];
  return st;
}
Shape bshape(const Shape& a, const Shape& b) {
  Shape o(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < o.size(); ++i) {
    const int64_t x = i + a.size() >= o.size() ? a[i + a.size() - o.size()] : 1;
    const int64_t y = i + b.size() >= o.size() ? b[i + b.size() - o.size()] : 1;
    o[i] = x == 1 ? y : x;
  }
  return o;
}

template <class T> T* P(Tensor& t) { return t.data<T>(); }
template <class T> const T* P(const Tensor& t) { return t.data<T>(); }

// ---------------------------------------------------------------------------------------------
// the table

// What a case needs beyond the primitives (nothing: every backend runs it): a fused method,
// compared where the backend's has() says so, else the call must throw; or an extension kernel,
// compared where the device registers one, else the call must throw.
struct Needs {
  std::optional<Fused> fused;
  std::function<bool(Device)> ext_has;  // an extension kernel's has()
  Needs() = default;
  Needs(Fused f) : fused(f) {}
  template <class Sig>
  Needs(const ExtensionKernel<Sig>& k) : ext_has([&k](Device d) { return k.has(d); }) {}
};

struct Case {
  std::string name;
  DType dt = DType::F32;
  bool exact = false;
  int64_t L = 1;  // the longest reduction behind one output element
  Needs needs;    // a fused method or an extension kernel (see Needs)
  std::function<std::vector<Tensor>(const Dev&)> run;  // the outputs, on the host
  std::function<std::vector<Tensor>()> ref;
  bool large = false;  // millions of emulated threads: left out of the in-process schedule test
  // > 0: the error is measured against each output's own magnitude instead of 1 + |want|:
  // |got - want| <= rel_tol eps (|want| + max |want| of that output) (expect_match)
  double rel_tol = 0;
};

std::string S(const Shape& s) { return shape_str(s); }
template <class T> const char* tn() { return dtype_name(dtype_of<T>::value); }

// --- memory: fill, copy_strided, convert ---
void memory_cases(std::vector<Case>& cs) {
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64})
    for (Shape s : {Shape{1}, Shape{7}, Shape{3, 5, 2}, Shape{1000}}) {
      cs.push_back({str("fill ", dtype_name(dt), S(s)), dt, true, 1, {},
                    [=](const Dev& D) {
                      Tensor x = D.out(s, dt);
                      D.be().fill(x, -3.0);
                      return hosts({x});
                    },
                    [=] { return std::vector<Tensor>{Tensor::full(s, -3.0, dt)}; }});
    }
  struct CopyCase {
    const char* what;
    Shape shape, src_shape, dst_shape;
    Strided s, d;
    bool acc;
  };
  std::vector<CopyCase> cc = {
      {"permute(2,0,1)", {4, 2, 3}, {2, 3, 4}, {4, 2, 3}, {0, {1, 12, 4}}, {0, {6, 3, 1}}, false},
      {"broadcast", {4, 5}, {1, 5}, {4, 5}, {0, {0, 1}}, {0, {5, 1}}, false},
      {"slice+offset", {3, 2}, {5, 4}, {3, 2}, {5, {4, 1}}, {0, {2, 1}}, false},
      {"concat-into", {3, 3}, {3, 3}, {3, 7}, {0, {3, 1}}, {4, {7, 1}}, false},
      {"accumulate", {5, 3}, {3, 5}, {5, 3}, {0, {1, 5}}, {0, {3, 1}}, true},
      {"accumulate-overlap", {6, 4}, {6, 4}, {4}, {0, {4, 1}}, {0, {0, 1}}, true},
      {"odd", {1, 9, 1, 3}, {27}, {3, 9}, {0, {0, 3, 0, 1}}, {0, {0, 1, 0, 9}}, false},
  };
  for (DType dt : {DType::F32, DType::F64, DType::I32, DType::I64})
    for (const CopyCase& c : cc) {
      cs.push_back({str("copy_strided ", c.what, " ", dtype_name(dt), S(c.shape)), dt, true, 1, {},
                    [=](const Dev& D) {
                      Tensor src = D.in(rnd(c.src_shape, dt, 11, -9, 9));
                      Tensor dst = D.in(rnd(c.dst_shape, dt, 12, -9, 9));
                      D.be().copy_strided(src, c.s, dst, c.d, c.shape, c.acc);
                      return hosts({dst});
                    },
                    [=] {
                      Tensor src = rnd(c.src_shape, dt, 11, -9, 9), dst = rnd(c.dst_shape, dt, 12, -9, 9);
                      const Shape sh = c.shape;
                      auto walk = [&](auto* sp, auto* dp) {
                        ref::for_each_strided(sh, c.s.strides, c.s.offset, c.d.strides, c.d.offset,
                                              [&](int64_t a, int64_t b) {
                                                if (c.acc) dp[b] += sp[a];
                                                else dp[b] = sp[a];
                                              });
                      };
                      switch (dt) {
                        case DType::F32: walk(P<float>(src), P<float>(dst)); break;
                        case DType::F64: walk(P<double>(src), P<double>(dst)); break;
                        case DType::I32: walk(P<int32_t>(src), P<int32_t>(dst)); break;
                        case DType::I64: walk(P<int64_t>(src), P<int64_t>(dst)); break;
                      }
                      return std::vector<Tensor>{dst};
                    }});
    }
  for (DType from : {DType::F32, DType::F64, DType::I32, DType::I64})
    for (DType to : {DType::F32, DType::F64, DType::I32, DType::I64}) {
      const Shape s{3, 7};
      cs.push_back({str("convert ", dtype_name(from), "->", dtype_name(to), S(s)), to, true, 1, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(s, from, 13, -50, 50));
                      Tensor y = D.out(s, to);
                      D.be().convert(x, y);
                      return hosts({y});
                    },
                    [=] {
                      Tensor x = rnd(s, from, 13, -50, 50), y = Tensor::empty(s, to);
                      for (int64_t i = 0; i < x.numel(); ++i) {  // C++ conversion, as the kernels
                        const double v = x.at(i);
                        y.set(i, is_float(to) ? (to == DType::F32 ? (double)(float)v : v) : std::trunc(v));
                      }
                      return std::vector<Tensor>{y};
                    }});
    }
}

// --- elementwise: unary (+ backward), binary, where, causal_fill, dropout ---
template <class T>
void elementwise_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  for (UnaryOp op : kUnaryOps)  // every op of CTX_UNARY_OPS (core/backend.h)
    for (Shape s : {Shape{1}, Shape{37}, Shape{3, 1, 5}, Shape{600}}) {
      const bool pos = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Pow;
      const double lo = pos ? 0.1 : -3, hi = pos ? 3 : 3;
      const double a = op == UnaryOp::Pow ? 1.7 : (op == UnaryOp::Clamp ? -0.5 : 0.75), b = 0.8;
      const uint64_t seed = 100 + (uint64_t)op;
      cs.push_back({str("unary ", unary_name(op), " ", tn<T>(), S(s)), dt, unary_exact(op), 4, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(s, dt, seed, lo, hi)), y = D.out(s, dt);
                      D.be().unary(op, x, y, a, b);
                      return hosts({y});
                    },
                    [=] {
                      Tensor x = rnd(s, dt, seed, lo, hi), y = Tensor::empty(s, dt);
                      ref::unary<T>(op, P<T>(x), P<T>(y), x.numel(), (T)a, (T)b);
                      return std::vector<Tensor>{y};
                    }});
      cs.push_back({str("unary_backward ", unary_name(op), " ", tn<T>(), S(s)), dt, unary_exact(op), 8, {},
                    [=](const Dev& D) {
                      Tensor xh = rnd(s, dt, seed, lo, hi), yh = Tensor::empty(s, dt);
                      ref::unary<T>(op, P<T>(xh), P<T>(yh), xh.numel(), (T)a, (T)b);
                      Tensor x = D.in(xh), y = D.in(yh), dy = D.in(rnd(s, dt, seed + 1)), dx = D.out(s, dt);
                      D.be().unary_backward(op, x, y, dy, dx, a, b);
                      return hosts({dx});
                    },
                    [=] {
                      Tensor x = rnd(s, dt, seed, lo, hi), y = Tensor::empty(s, dt), dy = rnd(s, dt, seed + 1);
                      ref::unary<T>(op, P<T>(x), P<T>(y), x.numel(), (T)a, (T)b);
                      Tensor dx = Tensor::empty(s, dt);
                      ref::unary_backward<T>(op, P<T>(x), P<T>(y), P<T>(dy), P<T>(dx), x.numel(), (T)a, (T)b);
                      return std::vector<Tensor>{dx};
                    }});
    }
  const std::vector<std::pair<Shape, Shape>> bshapes = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}}, {{2, 1, 5}, {3, 1}}, {{1}, {7}}, {{5, 1}, {1, 6}}, {{2, 3}, {}},
      {{300}, {300}}, {{2, 3, 1, 4}, {3, 5, 1}}};
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div})
    for (const auto& [sa, sb] : bshapes) {
      const Shape os = bshape(sa, sb);
      cs.push_back({str("binary ", binary_name(op), " ", tn<T>(), S(sa), S(sb)), dt, true, 1, {},
                    [=](const Dev& D) {
                      Tensor a = D.in(rnd(sa, dt, 21)), b = D.in(rnd(sb, dt, 22, 0.5, 2)), out = D.out(os, dt);
                      D.be().binary(op, a, b, out);
                      return hosts({out});
                    },
                    [=] {
                      Tensor a = rnd(sa, dt, 21), b = rnd(sb, dt, 22, 0.5, 2), out = Tensor::empty(os, dt);
                      ref::binary<T>(op, P<T>(a), bstrides(sa, os), P<T>(b), bstrides(sb, os), P<T>(out), os,
                                     a.numel(), b.numel());
                      return std::vector<Tensor>{out};
                    }});
    }
  // contiguous operands at an odd element offset (slice0 of [302]: rows 1..301, 301 elements): the
  // CUDA flat kernel's element-wise path, where 16-byte accesses are not aligned
  for (int shift : {0, 1})
    cs.push_back({str("binary mul ", tn<T>(), " views from element ", 1 + shift, " [301]"), dt, true, 1, {},
                  [=](const Dev& D) {
                    Tensor a = D.in(rnd({302}, dt, 23)).slice0(1, 302), b = D.in(rnd({302}, dt, 24)).slice0(shift, 301 + shift);
                    Tensor out = D.out({301}, dt);
                    D.be().binary(BinaryOp::Mul, a, b, out);
                    return hosts({out});
                  },
                  [=] {
                    Tensor a = rnd({302}, dt, 23).slice0(1, 302).clone(), b = rnd({302}, dt, 24).slice0(shift, 301 + shift).clone();
                    Tensor out = Tensor::empty({301}, dt);
                    ref::binary<T>(BinaryOp::Mul, P<T>(a), {1}, P<T>(b), {1}, P<T>(out), {301}, 301, 301);
                    return std::vector<Tensor>{out};
                  }});
  // where / masked fill: masks of every dtype, broadcast or full
  for (DType mdt : {DType::F32, DType::I32, DType::I64})
    for (const auto& [ms, s] : std::vector<std::pair<Shape, Shape>>{{{3, 5}, {3, 5}}, {{1, 5}, {3, 5}}, {{1}, {7}}}) {
      cs.push_back({str("where mask ", dtype_name(mdt), S(ms), " ", tn<T>(), S(s)), dt, true, 1, {},
                    [=](const Dev& D) {
                      Tensor m = D.in(rnd(ms, mdt, 31, 0, 2)), a = D.in(rnd(s, dt, 32)), b = D.in(rnd(s, dt, 33));
                      Tensor y1 = D.out(s, dt), y2 = D.out(s, dt);
                      D.be().where(m, a, b, y1);
                      D.be().where_scalar(m, a, -7.5, y2);
                      return hosts({y1, y2});
                    },
                    [=] {
                      Tensor m = rnd(ms, mdt, 31, 0, 2), a = rnd(s, dt, 32), b = rnd(s, dt, 33);
                      Tensor y1 = Tensor::empty(s, dt), y2 = Tensor::empty(s, dt);
                      const auto sm = bstrides(ms, s);
                      ref::for_each_strided(s, sm, 0, contiguous_strides(s), 0, [&](int64_t mi, int64_t i) {
                        const bool on = m.at(mi) != 0;
                        y1.set(i, on ? a.at(i) : b.at(i));
                        y2.set(i, on ? -7.5 : a.at(i));
                      });
                      return std::vector<Tensor>{y1, y2};
                    }});
    }
  struct CF { Shape s; int64_t diag, window; };
  for (const CF& c : {CF{{2, 5, 7}, 0, 0}, CF{{2, 5, 7}, 2, 0}, CF{{3, 6, 6}, 0, 3}, CF{{1, 1, 1}, 0, 0},
                      CF{{4, 9}, -1, 2}}) {
    cs.push_back({str("causal_fill ", tn<T>(), S(c.s), " diag ", c.diag, " window ", c.window), dt, true, 1, {},
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd(c.s, dt, 41));
                    D.be().causal_fill(x, -INFINITY, c.diag, c.window);
                    return hosts({x});
                  },
                  [=] {
                    Tensor x = rnd(c.s, dt, 41);
                    const int64_t Tq = c.s[c.s.size() - 2], Sk = c.s.back();
                    ref::causal_fill<T>(P<T>(x), x.numel() / (Tq * Sk), Tq, Sk, (T)-INFINITY, c.diag, c.window);
                    return std::vector<Tensor>{x};
                  }});
  }
  // dropout: the mask is computed on the device from the seed, so the devices must agree exactly
  for (double p : {0.1, 0.5, 0.9})
    for (Shape s : {Shape{1}, Shape{37}, Shape{3, 5, 70}, Shape{2, 4, 33, 33}, Shape{5, 41, 1031}}) {
      const DropoutMask m = dropout_mask(p, 0xD00Dull + (uint64_t)(p * 10));
      cs.push_back({str("dropout p ", p, " ", tn<T>(), S(s)), dt, true, 1, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(s, dt, 51)), y = D.out(s, dt);
                      D.be().dropout(x, m, y);
                      return hosts({y});
                    },
                    [=] {
                      Tensor x = rnd(s, dt, 51), y = Tensor::empty(s, dt);
                      ref::dropout<T>(P<T>(x), P<T>(y), x.numel(), m);
                      return std::vector<Tensor>{y};
                    }});
    }
}

// --- reduce_sum ---
template <class T>
void reduce_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  const std::vector<std::pair<Shape, Shape>> rs = {
      {{6, 5}, {5}},           {{6, 5}, {6, 1}},      {{6, 5}, {1}},        {{2, 3, 4, 5}, {1, 3, 1, 5}},
      {{2, 3, 4, 5}, {2, 1, 4, 1}}, {{7}, {7}},       {{1, 9}, {1, 1}},     {{700}, {1}},
      {{3, 1, 333}, {3, 1, 1}}, {{33, 17}, {17}},  {{600, 40}, {40}},  {{5, 120, 33}, {1, 1, 33}}};
  // ({600, 40} -> {40} and {5, 120, 33} -> {33}: rows summed, CUDA's two-pass column sums with
  // several rows per lane of a chunk)
  for (const auto& [xs, os] : rs) {
    const int64_t L = shape_numel(xs) / shape_numel(os);
    cs.push_back({str("reduce_sum ", tn<T>(), S(xs), "->", S(os)), dt, false, L, {},
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd(xs, dt, 51)), out = D.out(os, dt);
                    D.be().reduce_sum(x, out);
                    return hosts({out});
                  },
                  [=] {
                    Tensor x = rnd(xs, dt, 51), out = Tensor::empty(os, dt);
                    ref::reduce_sum<T>(P<T>(x), xs, bstrides(os, xs), P<T>(out), out.numel());
                    return std::vector<Tensor>{out};
                  }});
  }
}

// --- gemm ---
template <class T>
void gemm_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  struct G { int64_t M, N, K, batch; bool ta, tb; int sb_mode; float alpha, beta; };  // sb_mode 1: B broadcast
  const std::vector<G> gs = {
      {1, 1, 1, 1, false, false, 0, 1, 0},   {7, 5, 3, 1, false, false, 0, 1, 0}, {7, 5, 3, 1, true, false, 0, 1, 0},
      {7, 5, 3, 1, false, true, 0, 1, 0},    {7, 5, 3, 1, true, true, 0, 1, 0},   {33, 1, 17, 1, false, true, 0, 1, 0},
      {1, 33, 17, 1, true, false, 0, 1, 0},  {5, 6, 7, 3, false, false, 0, 0.5f, 0},
      {5, 6, 7, 3, false, true, 1, 1, 1},    {4, 9, 65, 2, true, false, 0, 1, 0.5f}, {3, 4, 0, 2, false, false, 0, 1, 0},
      {3, 4, 0, 1, false, false, 0, 1, 0.5f}};
  for (const G& g : gs) {
    GemmDesc d;
    d.M = g.M; d.N = g.N; d.K = g.K; d.batch = g.batch; d.trans_a = g.ta; d.trans_b = g.tb;
    d.stride_a = g.M * g.K; d.stride_b = g.sb_mode == 1 ? 0 : g.K * g.N; d.stride_c = g.M * g.N;
    d.alpha = g.alpha; d.beta = g.beta;
    const Shape as{g.batch, g.M * g.K}, bs{g.sb_mode == 1 ? 1 : g.batch, std::max<int64_t>(1, g.K * g.N)},
        csh{g.batch, g.M * g.N};
    cs.push_back({str("gemm ", tn<T>(), " M", g.M, " N", g.N, " K", g.K, " batch", g.batch, g.ta ? " tA" : "",
                      g.tb ? " tB" : "", g.sb_mode ? " B-broadcast" : "", " alpha", g.alpha, " beta", g.beta),
                  dt, false, g.K + 1, {},
                  [=](const Dev& D) {
                    Tensor a = D.in(rnd(as, dt, 61)), b = D.in(rnd(bs, dt, 62));
                    Tensor c = g.beta != 0 ? D.in(rnd(csh, dt, 63)) : D.out(csh, dt);  // beta 0: C not read
                    D.be().gemm(d, a, b, c);
                    return hosts({c});
                  },
                  [=] {
                    Tensor a = rnd(as, dt, 61), b = rnd(bs, dt, 62), c = rnd(csh, dt, 63);
                    cpu::gemm_reference<T>(d, P<T>(a), P<T>(b), P<T>(c));
                    return std::vector<Tensor>{c};
                  }});
  }
}

// --- softmax, norms, cross entropy (row ops over the last dim) ---
template <class T>
void row_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  // causal_softmax and its backward (core/causal_rows.h): the mask and the softmax in one pass,
  // against the reference's masked rows; diag -1 leaves row 0 of each matrix without a key; the
  // last shapes have rows past one block of threads; "in place" passes y = x.
  struct CS { Shape s; int64_t diag, window; bool in_place; };
  for (const CS& c : {CS{{2, 5, 7}, 0, 0, false}, CS{{2, 5, 7}, 2, 0, true}, CS{{3, 6, 6}, 0, 3, false},
                      CS{{1, 1, 1}, 0, 0, false}, CS{{4, 9}, -1, 2, false}, CS{{2, 3, 5, 5}, -1, 0, true},
                      CS{{2, 33, 1100}, 1067, 0, false}, CS{{1, 40, 1030}, 990, 300, true}}) {
    const int64_t C = c.s.back(), N = shape_numel(c.s) / C;
    const CausalRows rows{c.s[c.s.size() - 2], c.diag, c.window};
    const std::string tag = str(tn<T>(), S(c.s), " diag ", c.diag, " window ", c.window, c.in_place ? " in place" : "");
    cs.push_back({"causal_softmax " + tag, dt, false, C, {},
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd(c.s, dt, 74, -4, 4));
                    Tensor y = c.in_place ? x : D.out(c.s, dt);
                    D.be().causal_softmax(x, y, c.diag, c.window);
                    return hosts({y});
                  },
                  [=] {
                    Tensor x = rnd(c.s, dt, 74, -4, 4), y = Tensor::empty(c.s, dt);
                    ref::softmax<T>(P<T>(x), P<T>(y), N, C, false, rows);
                    return std::vector<Tensor>{y};
                  }});
    auto make_y = [=] {
      Tensor x = rnd(c.s, dt, 75, -4, 4), y = Tensor::empty(c.s, dt);
      ref::softmax<T>(P<T>(x), P<T>(y), N, C, false, rows);
      return y;
    };
    cs.push_back({"causal_softmax_backward " + tag, dt, false, C, {},
                  [=](const Dev& D) {
                    Tensor y = D.in(make_y()), dy = D.in(rnd(c.s, dt, 76)), dx = D.out(c.s, dt);
                    D.be().causal_softmax_backward(y, dy, dx, c.diag, c.window);
                    return hosts({dx});
                  },
                  [=] {
                    Tensor y = make_y(), dy = rnd(c.s, dt, 76), dx = Tensor::empty(c.s, dt);
                    ref::softmax_backward<T>(P<T>(y), P<T>(dy), P<T>(dx), N, C, false, rows);
                    return std::vector<Tensor>{dx};
                  }});
  }
  // The CUDA norms (norm.cu) keep rows of C <= 1024 in registers, 4, 8, 16, 24 or 32 per lane
  // (CTX_ROW_REGS: C = 7, 200, 300, 700, 1000 here, most not multiples of 32), and their backward
  // sums the weight gradients per warp over its rows, then per block of 8 warps: N = 1, 3, 4 below
  // one block, {70, 5}, {600, 40}, {300, 200}, {40, 700} several rows per warp and a partial last block,
  // {9000, 3} past the cap of 256 blocks (the warps' rows strided by the whole grid).
  // {3, 1500}: rows past the one-warp-a-row kernels (one block a row, the weight gradients in row chunks).
  const std::vector<Shape> shapes = {{1, 1},    {3, 7},      {2, 300}, {4, 1, 9},  {70, 5},
                                     {600, 40}, {300, 200}, {40, 700}, {3, 1000}, {9000, 3}, {3, 1500}};
  for (const Shape& s : shapes) {
    const int64_t C = s.back(), N = shape_numel(s) / C;
    for (bool lg : {false, true}) {
      // x with row 0 fully masked (-inf) when there are several rows
      auto make_x = [=] {
        Tensor x = rnd(s, dt, 71, -4, 4);
        if (N > 1)
          for (int64_t c = 0; c < C; ++c) x.set(c, -INFINITY);
        return x;
      };
      for (bool in_place : {false, true})
        cs.push_back({str(lg ? "log_softmax " : "softmax ", tn<T>(), S(s), in_place ? " in place" : ""), dt, false, C,
                      {},
                      [=](const Dev& D) {
                        Tensor x = D.in(make_x()), y = in_place ? x : D.out(s, dt);
                        D.be().softmax(x, y, lg);
                        return hosts({y});
                      },
                      [=] {
                        Tensor x = make_x(), y = Tensor::empty(s, dt);
                        ref::softmax<T>(P<T>(x), P<T>(y), N, C, lg);
                        return std::vector<Tensor>{y};
                      }});
      auto make_y = [=] {
        Tensor x = rnd(s, dt, 72, -4, 4), y = Tensor::empty(s, dt);
        ref::softmax<T>(P<T>(x), P<T>(y), N, C, lg);
        return y;
      };
      cs.push_back({str(lg ? "log_softmax_backward " : "softmax_backward ", tn<T>(), S(s)), dt, false, C, {},
                    [=](const Dev& D) {
                      Tensor y = D.in(make_y()), dy = D.in(rnd(s, dt, 73)), dx = D.out(s, dt);
                      D.be().softmax_backward(y, dy, dx, lg);
                      return hosts({dx});
                    },
                    [=] {
                      Tensor y = make_y(), dy = rnd(s, dt, 73), dx = Tensor::empty(s, dt);
                      ref::softmax_backward<T>(P<T>(y), P<T>(dy), P<T>(dx), N, C, lg);
                      return std::vector<Tensor>{dx};
                    }});
    }
    for (bool bias : {true, false}) {
      const double eps = 1e-5;
      cs.push_back({str("layernorm ", bias ? "" : "no-bias ", tn<T>(), S(s)), dt, false, C, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(s, dt, 81, -2, 3)), w = D.in(rnd({C}, dt, 82)),
                             b = bias ? D.in(rnd({C}, dt, 83)) : Tensor();
                      Tensor y = D.out(s, dt), mean = D.out({N}, dt), rstd = D.out({N}, dt);
                      D.be().layernorm(x, w, b, eps, y, mean, rstd);
                      return hosts({y, mean, rstd});
                    },
                    [=] {
                      Tensor x = rnd(s, dt, 81, -2, 3), w = rnd({C}, dt, 82), b = rnd({C}, dt, 83);
                      Tensor y = Tensor::empty(s, dt), mean = Tensor::empty({N}, dt), rstd = Tensor::empty({N}, dt);
                      ref::layernorm<T>(P<T>(x), P<T>(w), bias ? P<T>(b) : nullptr, (T)eps, P<T>(y), P<T>(mean),
                                        P<T>(rstd), N, C);
                      return std::vector<Tensor>{y, mean, rstd};
                    }});
      // backward: dx overwritten, dw / db accumulated into random starting values
      auto stats = [=](Tensor& mean, Tensor& rstd) {
        Tensor x = rnd(s, dt, 81, -2, 3), w = rnd({C}, dt, 82), y = Tensor::empty(s, dt);
        mean = Tensor::empty({N}, dt);
        rstd = Tensor::empty({N}, dt);
        ref::layernorm<T>(P<T>(x), P<T>(w), nullptr, (T)eps, P<T>(y), P<T>(mean), P<T>(rstd), N, C);
      };
      cs.push_back({str("layernorm_backward ", bias ? "" : "no-bias ", tn<T>(), S(s)), dt, false, N + C, {},
                    [=](const Dev& D) {
                      Tensor mh, rh;
                      stats(mh, rh);
                      Tensor dy = D.in(rnd(s, dt, 84)), x = D.in(rnd(s, dt, 81, -2, 3)), w = D.in(rnd({C}, dt, 82));
                      Tensor mean = D.in(mh), rstd = D.in(rh), dx = D.out(s, dt), dw = D.in(rnd({C}, dt, 85));
                      Tensor db = bias ? D.in(rnd({C}, dt, 86)) : Tensor();
                      D.be().layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
                      return bias ? hosts({dx, dw, db}) : hosts({dx, dw});
                    },
                    [=] {
                      Tensor mean, rstd;
                      stats(mean, rstd);
                      Tensor dy = rnd(s, dt, 84), x = rnd(s, dt, 81, -2, 3), w = rnd({C}, dt, 82);
                      Tensor dx = Tensor::empty(s, dt), dw = rnd({C}, dt, 85), db = rnd({C}, dt, 86);
                      ref::layernorm_backward<T>(P<T>(dy), P<T>(x), P<T>(w), P<T>(mean), P<T>(rstd), P<T>(dx),
                                                 P<T>(dw), bias ? P<T>(db) : nullptr, N, C);
                      return bias ? std::vector<Tensor>{dx, dw, db} : std::vector<Tensor>{dx, dw};
                    }});
      // the residual add fused in front (h = x + a written, the norm of h) and, in the backward, the
      // residual stream's gradient summed into dx: from another tensor, and in place (dres is dx)
      cs.push_back({str("add_layernorm ", bias ? "" : "no-bias ", tn<T>(), S(s)), dt, false, C, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(s, dt, 81, -2, 3)), a = D.in(rnd(s, dt, 87, -1, 1));
                      Tensor w = D.in(rnd({C}, dt, 82)), b = bias ? D.in(rnd({C}, dt, 83)) : Tensor();
                      Tensor h = D.out(s, dt), y = D.out(s, dt), mean = D.out({N}, dt), rstd = D.out({N}, dt);
                      D.be().add_layernorm(x, a, w, b, eps, h, y, mean, rstd);
                      return hosts({h, y, mean, rstd});
                    },
                    [=] {
                      Tensor x = rnd(s, dt, 81, -2, 3), a = rnd(s, dt, 87, -1, 1), w = rnd({C}, dt, 82);
                      Tensor b = rnd({C}, dt, 83), h = Tensor::empty(s, dt), y = Tensor::empty(s, dt);
                      Tensor mean = Tensor::empty({N}, dt), rstd = Tensor::empty({N}, dt);
                      ref::layernorm<T>(P<T>(x), P<T>(w), bias ? P<T>(b) : nullptr, (T)eps, P<T>(y), P<T>(mean),
                                        P<T>(rstd), N, C, P<T>(a), P<T>(h));
                      return std::vector<Tensor>{h, y, mean, rstd};
                    }});
      for (bool in_place : {false, true})
        cs.push_back({str("layernorm_backward +dres", in_place ? " in place " : " ", bias ? "" : "no-bias ", tn<T>(),
                          S(s)),
                      dt, false, N + C, {},
                      [=](const Dev& D) {
                        Tensor mh, rh;
                        stats(mh, rh);
                        Tensor dy = D.in(rnd(s, dt, 84)), x = D.in(rnd(s, dt, 81, -2, 3)), w = D.in(rnd({C}, dt, 82));
                        Tensor mean = D.in(mh), rstd = D.in(rh), dres = D.in(rnd(s, dt, 88, -3, 3));
                        Tensor dx = in_place ? dres : D.out(s, dt), dw = D.in(rnd({C}, dt, 85));
                        Tensor db = bias ? D.in(rnd({C}, dt, 86)) : Tensor();
                        D.be().layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, dres);
                        return bias ? hosts({dx, dw, db}) : hosts({dx, dw});
                      },
                      [=] {
                        Tensor mean, rstd;
                        stats(mean, rstd);
                        Tensor dy = rnd(s, dt, 84), x = rnd(s, dt, 81, -2, 3), w = rnd({C}, dt, 82);
                        Tensor dres = rnd(s, dt, 88, -3, 3), dx = Tensor::empty(s, dt), dw = rnd({C}, dt, 85);
                        Tensor db = rnd({C}, dt, 86);
                        ref::layernorm_backward<T>(P<T>(dy), P<T>(x), P<T>(w), P<T>(mean), P<T>(rstd), P<T>(dx),
                                                   P<T>(dw), bias ? P<T>(db) : nullptr, N, C, P<T>(dres));
                        return bias ? std::vector<Tensor>{dx, dw, db} : std::vector<Tensor>{dx, dw};
                      }});
    }
    {
      const double eps = 1e-6;
      cs.push_back({str("rmsnorm ", tn<T>(), S(s)), dt, false, C, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(s, dt, 91, -2, 3)), w = D.in(rnd({C}, dt, 92));
                      Tensor y = D.out(s, dt), rstd = D.out({N}, dt);
                      D.be().rmsnorm(x, w, eps, y, rstd);
                      return hosts({y, rstd});
                    },
                    [=] {
                      Tensor x = rnd(s, dt, 91, -2, 3), w = rnd({C}, dt, 92);
                      Tensor y = Tensor::empty(s, dt), rstd = Tensor::empty({N}, dt);
                      ref::rmsnorm<T>(P<T>(x), P<T>(w), (T)eps, P<T>(y), P<T>(rstd), N, C);
                      return std::vector<Tensor>{y, rstd};
                    }});
      auto rstd_of = [=] {
        Tensor x = rnd(s, dt, 91, -2, 3), w = rnd({C}, dt, 92), y = Tensor::empty(s, dt);
        Tensor rstd = Tensor::empty({N}, dt);
        ref::rmsnorm<T>(P<T>(x), P<T>(w), (T)eps, P<T>(y), P<T>(rstd), N, C);
        return rstd;
      };
      cs.push_back({str("rmsnorm_backward ", tn<T>(), S(s)), dt, false, N + C, {},
                    [=](const Dev& D) {
                      Tensor dy = D.in(rnd(s, dt, 93)), x = D.in(rnd(s, dt, 91, -2, 3)), w = D.in(rnd({C}, dt, 92));
                      Tensor rstd = D.in(rstd_of()), dx = D.out(s, dt), dw = D.in(rnd({C}, dt, 94));
                      D.be().rmsnorm_backward(dy, x, w, rstd, dx, dw);
                      return hosts({dx, dw});
                    },
                    [=] {
                      Tensor dy = rnd(s, dt, 93), x = rnd(s, dt, 91, -2, 3), w = rnd({C}, dt, 92), rstd = rstd_of();
                      Tensor dx = Tensor::empty(s, dt), dw = rnd({C}, dt, 94);
                      ref::rmsnorm_backward<T>(P<T>(dy), P<T>(x), P<T>(w), P<T>(rstd), P<T>(dx), P<T>(dw), N, C);
                      return std::vector<Tensor>{dx, dw};
                    }});
      cs.push_back({str("add_rmsnorm ", tn<T>(), S(s)), dt, false, C, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(s, dt, 91, -2, 3)), a = D.in(rnd(s, dt, 95, -1, 1)), w = D.in(rnd({C}, dt, 92));
                      Tensor h = D.out(s, dt), y = D.out(s, dt), rstd = D.out({N}, dt);
                      D.be().add_rmsnorm(x, a, w, eps, h, y, rstd);
                      return hosts({h, y, rstd});
                    },
                    [=] {
                      Tensor x = rnd(s, dt, 91, -2, 3), a = rnd(s, dt, 95, -1, 1), w = rnd({C}, dt, 92);
                      Tensor h = Tensor::empty(s, dt), y = Tensor::empty(s, dt), rstd = Tensor::empty({N}, dt);
                      ref::rmsnorm<T>(P<T>(x), P<T>(w), (T)eps, P<T>(y), P<T>(rstd), N, C, P<T>(a), P<T>(h));
                      return std::vector<Tensor>{h, y, rstd};
                    }});
      for (bool in_place : {false, true})
        cs.push_back({str("rmsnorm_backward +dres", in_place ? " in place " : " ", tn<T>(), S(s)), dt, false, N + C, {},
                      [=](const Dev& D) {
                        Tensor dy = D.in(rnd(s, dt, 93)), x = D.in(rnd(s, dt, 91, -2, 3)), w = D.in(rnd({C}, dt, 92));
                        Tensor rstd = D.in(rstd_of()), dres = D.in(rnd(s, dt, 96, -3, 3));
                        Tensor dx = in_place ? dres : D.out(s, dt), dw = D.in(rnd({C}, dt, 94));
                        D.be().rmsnorm_backward(dy, x, w, rstd, dx, dw, dres);
                        return hosts({dx, dw});
                      },
                      [=] {
                        Tensor dy = rnd(s, dt, 93), x = rnd(s, dt, 91, -2, 3), w = rnd({C}, dt, 92), rstd = rstd_of();
                        Tensor dres = rnd(s, dt, 96, -3, 3), dx = Tensor::empty(s, dt), dw = rnd({C}, dt, 94);
                        ref::rmsnorm_backward<T>(P<T>(dy), P<T>(x), P<T>(w), P<T>(rstd), P<T>(dx), P<T>(dw), N, C,
                                                 P<T>(dres));
                        return std::vector<Tensor>{dx, dw};
                      }});
    }
  }
  // cross entropy: logits [N, V], targets with an ignored row (-1) and the last class
  for (const auto& [N, V] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {5, 7}, {3, 300}, {70, 3}})
    for (DType idt : {DType::I32, DType::I64}) {
      std::vector<int64_t> tv;
      for (int64_t n = 0; n < N; ++n) tv.push_back(n == 1 ? -1 : (n * 7 + 3) % V);
      if (N > 2) tv[2] = V - 1;
      auto fwd_ref = [=](Tensor& loss, Tensor& lse) {
        Tensor z = rnd({N, V}, dt, 101, -3, 3), t = ints(tv, idt);
        loss = Tensor::empty({N}, dt);
        lse = Tensor::empty({N}, dt);
        if (idt == DType::I32) ref::cross_entropy<T, int32_t>(P<T>(z), P<int32_t>(t), P<T>(loss), P<T>(lse), N, V);
        else ref::cross_entropy<T, int64_t>(P<T>(z), P<int64_t>(t), P<T>(loss), P<T>(lse), N, V);
      };
      cs.push_back({str("cross_entropy ", tn<T>(), " targets ", dtype_name(idt), " [", N, ", ", V, "]"), dt, false, V,
                    {},
                    [=](const Dev& D) {
                      Tensor z = D.in(rnd({N, V}, dt, 101, -3, 3)), t = D.in(ints(tv, idt));
                      Tensor loss = D.out({N}, dt), lse = D.out({N}, dt);
                      D.be().cross_entropy(z, t, loss, lse);
                      return hosts({loss, lse});
                    },
                    [=] {
                      Tensor loss, lse;
                      fwd_ref(loss, lse);
                      return std::vector<Tensor>{loss, lse};
                    }});
      cs.push_back({str("cross_entropy_backward ", tn<T>(), " targets ", dtype_name(idt), " [", N, ", ", V, "]"), dt,
                    false, V, {},
                    [=](const Dev& D) {
                      Tensor loss_h, lse_h;
                      fwd_ref(loss_h, lse_h);
                      Tensor z = D.in(rnd({N, V}, dt, 101, -3, 3)), t = D.in(ints(tv, idt)), lse = D.in(lse_h);
                      Tensor dl = D.in(rnd({N}, dt, 102)), dz = D.out({N, V}, dt);
                      D.be().cross_entropy_backward(z, t, lse, dl, dz);
                      return hosts({dz});
                    },
                    [=] {
                      Tensor loss, lse;
                      fwd_ref(loss, lse);
                      Tensor z = rnd({N, V}, dt, 101, -3, 3), t = ints(tv, idt), dl = rnd({N}, dt, 102);
                      Tensor dz = Tensor::empty({N, V}, dt);
                      if (idt == DType::I32)
                        ref::cross_entropy_backward<T, int32_t>(P<T>(z), P<int32_t>(t), P<T>(lse), P<T>(dl), P<T>(dz), N,
                                                                V);
                      else
                        ref::cross_entropy_backward<T, int64_t>(P<T>(z), P<int64_t>(t), P<T>(lse), P<T>(dl), P<T>(dz), N,
                                                                V);
                      return std::vector<Tensor>{dz};
                    }});
    }
}

// --- index_select / index_add (the embedding forward / backward) ---
template <class T>
void index_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  struct IC { Shape xs; int64_t dim; std::vector<int64_t> idx; };
  auto same = [](int64_t m, int64_t v) { return std::vector<int64_t>((size_t)m, v); };
  auto draw = [](int64_t m, int64_t n, uint64_t seed) {  // m indices in [0, n), repeats likely when m > n
    Rng r(seed);
    std::vector<int64_t> v((size_t)m);
    for (int64_t& x : v) x = (int64_t)r.below((uint64_t)n);
    return v;
  };
  // the last five are for the device plan (index_plan.cu), run with proven indices below: m > n
  // over several chunks of the placing block, one row, all indices equal, a large sparse vocabulary
  const std::vector<IC> ics = {{{6, 4}, 0, {3, 0, 3, 5, 3}},  {{2, 5, 3}, 1, {4, 4, 0, 1}}, {{2, 3, 7}, 2, {6, 0, 6}},
                               {{1, 1}, 0, {0, 0, 0}},        {{9}, 0, {8}},                {{50, 3}, 0, {}},
                               {{2, 5, 2}, 1, draw(700, 5, 7)}, {{1, 3}, 0, same(300, 0)},
                               {{100, 2}, 0, same(600, 42)},  {{3, 37}, 1, draw(290, 37, 8)},
                               {{50257, 1}, 0, draw(2048, 50257, 9)}};
  for (const IC& c : ics)
    for (DType idt : {DType::I32, DType::I64})
      for (bool proven : {false, true}) {
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < c.dim; ++i) outer *= c.xs[(size_t)i];
      for (size_t i = (size_t)c.dim + 1; i < c.xs.size(); ++i) inner *= c.xs[i];
      const int64_t n = c.xs[(size_t)c.dim], m = (int64_t)c.idx.size();
      Shape os = c.xs;
      os[(size_t)c.dim] = m;
      auto run_ref = [=](bool add) {
        Tensor x = rnd(c.xs, dt, 111), i = ints(c.idx, idt), src = rnd(os, dt, 112), out = Tensor::empty(os, dt);
        if (!add) {
          if (idt == DType::I32) ref::index_select<T, int32_t>(P<T>(x), P<int32_t>(i), P<T>(out), outer, n, m, inner);
          else ref::index_select<T, int64_t>(P<T>(x), P<int64_t>(i), P<T>(out), outer, n, m, inner);
          return out;
        }
        if (idt == DType::I32) ref::index_add<T, int32_t>(P<T>(x), P<int32_t>(i), P<T>(src), outer, n, m, inner);
        else ref::index_add<T, int64_t>(P<T>(x), P<int64_t>(i), P<T>(src), outer, n, m, inner);
        return x;
      };
      // proven: the indices carry their bound (Tensor::checked_bound) and no host mirror, so the
      // CUDA backend reads none of them on the host and index_add plans on the device
      const std::string nm = str(tn<T>(), S(c.xs), " dim ", c.dim, " ", m, " ", dtype_name(idt), " indices",
                                 proven ? " (proven: no host copy, device plan)" : "");
      auto indices = [=](const Dev& D) {
        Tensor i = D.in(ints(c.idx, idt));
        if (proven) i.set_checked_bound(n);
        return i;
      };
      cs.push_back({"index_select " + nm, dt, true, 1, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(c.xs, dt, 111)), i = indices(D), out = D.out(os, dt);
                      D.be().index_select(x, c.dim, i, out);
                      return hosts({out});
                    },
                    [=] { return std::vector<Tensor>{run_ref(false)}; }});
      // scatter-add into x, repeated indices adding in index order: bit-exact on every backend
      cs.push_back({"index_add " + nm, dt, true, 1, {},
                    [=](const Dev& D) {
                      Tensor x = D.in(rnd(c.xs, dt, 111)), i = indices(D), src = D.in(rnd(os, dt, 112));
                      D.be().index_add(x, c.dim, i, src);
                      return hosts({x});
                    },
                    [=] { return std::vector<Tensor>{run_ref(true)}; }});
    }
}

// --- adamw ---
template <class T>
void adamw_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  for (int64_t n : {1, 37, 1000})
    for (int64_t step : {1, 5})
      for (double wd : {0.0, 0.1}) {
        cs.push_back({str("adamw ", tn<T>(), " [", n, "] step ", step, " wd ", wd), dt, false, 2, {},
                      [=](const Dev& D) {
                        Tensor p = D.in(rnd({n}, dt, 121)), g = D.in(rnd({n}, dt, 122)), m = D.in(rnd({n}, dt, 123, -0.1, 0.1)),
                               v = D.in(rnd({n}, dt, 124, 0, 0.01));
                        D.be().adamw(p, g, m, v, 1e-2, 0.9, 0.999, 1e-8, wd, step);
                        return hosts({p, m, v});
                      },
                      [=] {
                        Tensor p = rnd({n}, dt, 121), g = rnd({n}, dt, 122), m = rnd({n}, dt, 123, -0.1, 0.1),
                               v = rnd({n}, dt, 124, 0, 0.01);
                        ref::adamw<T>(P<T>(p), P<T>(g), P<T>(m), P<T>(v), n, 1e-2, 0.9, 0.999, 1e-8, wd, step);
                        return std::vector<Tensor>{p, m, v};
                      }});
      }
}

// --- fused methods (where a backend reports them): references are short loops ---
template <class T>
void fused_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  // rope: x [..., T, d], cos / sin [T, d/2]
  for (const Shape& s : {Shape{2, 5, 8}, Shape{1, 1, 2}, Shape{3, 2, 7, 6}})
    for (bool inter : {false, true})
      for (bool tr : {false, true}) {
        const int64_t d = s.back(), Tn = s[s.size() - 2], h = d / 2, R = shape_numel(s) / (Tn * d);
        cs.push_back({str("rope_rotate ", tn<T>(), S(s), inter ? " interleaved" : "", tr ? " transpose" : ""), dt, false,
                      2, Fused::Rope,
                      [=](const Dev& D) {
                        Tensor x = D.in(rnd(s, dt, 131)), c = D.in(rnd({Tn, h}, dt, 132)), sn = D.in(rnd({Tn, h}, dt, 133));
                        Tensor out = D.out(s, dt);
                        D.be().rope_rotate(x, c, sn, out, inter, tr);
                        return hosts({out});
                      },
                      [=] {
                        Tensor x = rnd(s, dt, 131), c = rnd({Tn, h}, dt, 132), sn = rnd({Tn, h}, dt, 133);
                        Tensor out = Tensor::empty(s, dt);
                        for (int64_t rt = 0; rt < R * Tn; ++rt)
                          for (int64_t k = 0; k < h; ++k) {
                            const int64_t t = rt % Tn, ia = inter ? 2 * k : k, ib = inter ? 2 * k + 1 : k + h;
                            const T a = P<T>(x)[rt * d + ia], b = P<T>(x)[rt * d + ib], ck = P<T>(c)[t * h + k];
                            const T sk = (tr ? T(-1) : T(1)) * P<T>(sn)[t * h + k];
                            P<T>(out)[rt * d + ia] = a * ck - b * sk;
                            P<T>(out)[rt * d + ib] = b * ck + a * sk;
                          }
                        return std::vector<Tensor>{out};
                      }});
      }
  // heads: qkv [B, S, 3 H Dh] <-> q [B, H, S - q0, Dh], k, v [B, H, S, Dh]; merge o [B, H, T, Dh]
  struct HC { int64_t B, S, H, Dh, q0; };
  for (const HC& c : {HC{2, 5, 3, 4, 0}, HC{1, 1, 1, 1, 0}, HC{2, 7, 2, 3, 4}, HC{2, 6, 3, 8, 2}}) {  // Dh 4, 8: 16-byte moves
    const int64_t D3 = 3 * c.H * c.Dh, Tq = c.S - c.q0;
    const Shape qs{c.B, c.H, Tq, c.Dh}, ks{c.B, c.H, c.S, c.Dh}, xs{c.B, c.S, D3};
    // element (b, s, part, h, j) of qkv <-> its place in q / k / v
    auto each = [=](auto&& f) {
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t s = 0; s < c.S; ++s)
          for (int64_t part = 0; part < 3; ++part)
            for (int64_t h = 0; h < c.H; ++h)
              for (int64_t j = 0; j < c.Dh; ++j) {
                const int64_t xi = (b * c.S + s) * D3 + part * c.H * c.Dh + h * c.Dh + j;
                const int64_t qi = part == 0 ? (s >= c.q0 ? ((b * c.H + h) * Tq + s - c.q0) * c.Dh + j : -1)
                                             : ((b * c.H + h) * c.S + s) * c.Dh + j;
                f(part, xi, qi);
              }
    };
    const std::string nm = str(tn<T>(), " B", c.B, " S", c.S, " H", c.H, " Dh", c.Dh, " q_begin ", c.q0);
    cs.push_back({"split_heads " + nm, dt, true, 1, Fused::Heads,
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd(xs, dt, 141)), q = D.out(qs, dt), k = D.out(ks, dt), v = D.out(ks, dt);
                    D.be().split_heads(x, c.H, c.q0, q, k, v);
                    return hosts({q, k, v});
                  },
                  [=] {
                    Tensor x = rnd(xs, dt, 141), q = Tensor::empty(qs, dt), k = Tensor::empty(ks, dt),
                           v = Tensor::empty(ks, dt);
                    Tensor* parts[3] = {&q, &k, &v};
                    each([&](int64_t part, int64_t xi, int64_t qi) {
                      if (qi >= 0) parts[part]->set(qi, x.at(xi));
                    });
                    return std::vector<Tensor>{q, k, v};
                  }});
    for (int undefined_part : {-1, 0, 2}) {  // -1: all given; else that gradient undefined (zeros)
      cs.push_back({str("split_heads_backward ", nm, undefined_part >= 0 ? str(" d", "qkv"[undefined_part], " undefined") : ""),
                    dt, true, 1, Fused::Heads,
                    [=](const Dev& D) {
                      Tensor g[3] = {D.in(rnd(qs, dt, 142)), D.in(rnd(ks, dt, 143)), D.in(rnd(ks, dt, 144))};
                      if (undefined_part >= 0) g[undefined_part] = Tensor();
                      Tensor dx = D.out(xs, dt);
                      D.be().split_heads_backward(g[0], g[1], g[2], c.H, c.q0, dx);
                      return hosts({dx});
                    },
                    [=] {
                      Tensor g[3] = {rnd(qs, dt, 142), rnd(ks, dt, 143), rnd(ks, dt, 144)};
                      Tensor dx = Tensor::zeros(xs, dt);
                      each([&](int64_t part, int64_t xi, int64_t qi) {
                        if (qi >= 0 && part != undefined_part) dx.set(xi, g[part].at(qi));
                      });
                      return std::vector<Tensor>{dx};
                    }});
    }
    const Shape os{c.B, c.H, c.S, c.Dh}, ms{c.B, c.S, c.H * c.Dh};
    auto merged_index = [=](int64_t oi) {  // o (b, h, t, j) -> merged (b, t, h, j)
      const int64_t j = oi % c.Dh, t = (oi / c.Dh) % c.S, h = (oi / (c.Dh * c.S)) % c.H, b = oi / (c.Dh * c.S * c.H);
      return ((b * c.S + t) * c.H + h) * c.Dh + j;
    };
    cs.push_back({"merge_heads " + nm, dt, true, 1, Fused::Heads,
                  [=](const Dev& D) {
                    Tensor o = D.in(rnd(os, dt, 145)), out = D.out(ms, dt);
                    D.be().merge_heads(o, out);
                    Tensor dout = D.in(rnd(ms, dt, 146)), d_o = D.out(os, dt);
                    D.be().merge_heads_backward(dout, d_o);
                    return hosts({out, d_o});
                  },
                  [=] {
                    Tensor o = rnd(os, dt, 145), out = Tensor::empty(ms, dt), dout = rnd(ms, dt, 146),
                           d_o = Tensor::empty(os, dt);
                    for (int64_t i = 0; i < o.numel(); ++i) {
                      out.set(merged_index(i), o.at(i));
                      d_o.set(i, dout.at(merged_index(i)));
                    }
                    return std::vector<Tensor>{out, d_o};
                  }});
  }
  // linear: x [R, K] (leading dims), w [N, K], b [N]
  for (const auto& [xs, N] : std::vector<std::pair<Shape, int64_t>>{{{1, 1}, 1}, {{2, 3, 5}, 7}, {{9, 33}, 4}}) {
    const int64_t K = xs.back(), R = shape_numel(xs) / K;
    Shape ys = xs;
    ys.back() = N;
    cs.push_back({str("linear ", tn<T>(), " x", S(xs), " N ", N), dt, false, K + 1, Fused::Linear,
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd(xs, dt, 151)), w = D.in(rnd({N, K}, dt, 152)), b = D.in(rnd({N}, dt, 153));
                    Tensor y = D.out(ys, dt);
                    D.be().linear(x, w, b, y);
                    return hosts({y});
                  },
                  [=] {
                    Tensor x = rnd(xs, dt, 151), w = rnd({N, K}, dt, 152), b = rnd({N}, dt, 153), y = Tensor::empty(ys, dt);
                    for (int64_t r = 0; r < R; ++r)
                      for (int64_t j = 0; j < N; ++j) P<T>(y)[r * N + j] = P<T>(b)[j];
                    GemmDesc g;
                    g.trans_b = true;
                    g.M = R;
                    g.N = N;
                    g.K = K;
                    g.beta = 1;
                    cpu::gemm_reference<T>(g, P<T>(x), P<T>(w), P<T>(y));
                    return std::vector<Tensor>{y};
                  }});
  }
  // the MLP's GELU methods: linear_gelu (pre = x w^T + b, h = gelu_tanh(pre)) and gemm_dgelu
  // (dpre = (A B) * gelu_tanh'(pre), dbias = column sums of dpre, or none); the CUDA speed modes'
  // epilogues are held to these in test_bf16.cpp (CudaGemmLt)
  for (const auto& [xs, N] : std::vector<std::pair<Shape, int64_t>>{{{1, 1}, 1}, {{2, 3, 5}, 8}, {{9, 33}, 12}}) {
    const int64_t K = xs.back(), R = shape_numel(xs) / K;
    Shape ys = xs;
    ys.back() = N;
    auto gelu_ref = [](double x, bool deriv) {
      return deriv ? formula::unary_deriv(UnaryOp::GeluTanh, x, 0.0, 0.0, 0.0) : formula::unary(UnaryOp::GeluTanh, x, 0.0, 0.0);
    };
    // pre (+ its gelu) from x, w, b, or dpre from dy [R, K] w [K, N] and pre: in f64 on the host
    auto ref_gemm = [=](const Tensor& a, const Tensor& w, bool wt, const Tensor* b) {
      Tensor y = Tensor::empty({R, N}, DType::F64);
      for (int64_t r = 0; r < R; ++r)
        for (int64_t j = 0; j < N; ++j) {
          double v = b ? b->at(j) : 0.0;
          for (int64_t k = 0; k < K; ++k) v += a.at(r * K + k) * (wt ? w.at(j * K + k) : w.at(k * N + j));
          y.set(r * N + j, v);
        }
      return y;
    };
    cs.push_back({str("linear_gelu ", tn<T>(), " x", S(xs), " N ", N), dt, false, K + 1, Fused::Linear,
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd(xs, dt, 154)), w = D.in(rnd({N, K}, dt, 155)), b = D.in(rnd({N}, dt, 156));
                    Tensor pre = D.out(ys, dt), h = D.out(ys, dt);
                    D.be().linear_gelu(x, w, b, pre, h);
                    return hosts({pre, h});
                  },
                  [=] {
                    const Tensor bb = rnd({N}, dt, 156);
                    Tensor pre = ref_gemm(rnd(xs, dt, 154), rnd({N, K}, dt, 155), true, &bb), h = Tensor::empty({R, N}, DType::F64);
                    for (int64_t e = 0; e < R * N; ++e) h.set(e, gelu_ref(pre.at(e), false));
                    return std::vector<Tensor>{pre.to(dt).view(ys), h.to(dt).view(ys)};
                  }});
    for (const bool with_bias : {true, false}) {
      cs.push_back({str("gemm_dgelu ", tn<T>(), with_bias ? "" : " no-dbias", " [", R, ", ", K, "] x [", K, ", ", N, "]"), dt,
                    false, R + K + 1, Needs{},
                    [=](const Dev& D) {
                      Tensor dy = D.in(rnd({R, K}, dt, 157)), w = D.in(rnd({K, N}, dt, 158)), pre = D.in(rnd(ys, dt, 159));
                      Tensor dpre = D.out(ys, dt), db = with_bias ? D.out({N}, dt) : Tensor();
                      GemmDesc g;
                      g.M = R, g.N = N, g.K = K;
                      D.be().gemm_dgelu(g, dy, w, pre, dpre, db);
                      return with_bias ? hosts({dpre, db}) : hosts({dpre});
                    },
                    [=] {
                      Tensor d = ref_gemm(rnd({R, K}, dt, 157), rnd({K, N}, dt, 158), false, nullptr);
                      const Tensor pre = rnd(ys, dt, 159);
                      Tensor db = Tensor::zeros({N}, DType::F64);
                      for (int64_t e = 0; e < R * N; ++e) {
                        d.set(e, d.at(e) * gelu_ref(pre.at(e), true));
                        db.set(e % N, db.at(e % N) + d.at(e));
                      }
                      std::vector<Tensor> out{d.to(dt).view(ys)};
                      if (with_bias) out.push_back(db.to(dt));
                      return out;
                    }});
    }
  }
  // flat optimizer: chunks with and without decay, an empty one, a gap, one past a tile (16384)
  const int64_t n = 20000;
  const std::vector<FlatChunk> chunks = {{0, 7, true}, {7, 7, false}, {10, 17000, true}, {17000, 19999, false}};
  cs.push_back({str("sum_squares ", tn<T>(), " [", n, "] 4 chunks"), DType::F64, false, n, Fused::FlatAdamW,
                [=](const Dev& D) {
                  Tensor x = D.in(rnd({n}, dt, 161)), out = D.out({1}, DType::F64);
                  D.be().sum_squares(x, chunks, out);
                  return hosts({out});
                },
                [=] {
                  Tensor x = rnd({n}, dt, 161);
                  double s = 0;
                  for (const FlatChunk& c : chunks)
                    for (int64_t i = c.begin; i < c.end; ++i) s += (double)P<T>(x)[i] * (double)P<T>(x)[i];
                  return std::vector<Tensor>{Tensor::full({1}, s, DType::F64)};
                }});
  for (double max_norm : {0.0, 1.0}) {
    AdamWHyper h;
    h.lr = 1e-2;
    h.weight_decay = 0.1;
    h.step = 3;
    h.grad_scale = 0.5;
    h.max_norm = max_norm;
    cs.push_back({str("adamw_flat ", tn<T>(), " [", n, "] max_norm ", max_norm), dt, false, 4, Fused::FlatAdamW,
                  [=](const Dev& D) {
                    Tensor p = D.in(rnd({n}, dt, 171)), g = D.in(rnd({n}, dt, 172)), m = D.in(rnd({n}, dt, 173, -0.1, 0.1)),
                           v = D.in(rnd({n}, dt, 174, 0, 0.01)), ns = D.out({1}, DType::F64);
                    D.be().sum_squares(g, chunks, ns);
                    D.be().adamw_flat(p, g, m, v, chunks, h, ns);
                    return hosts({p, m, v});
                  },
                  [=] {
                    Tensor p = rnd({n}, dt, 171), g = rnd({n}, dt, 172), m = rnd({n}, dt, 173, -0.1, 0.1),
                           v = rnd({n}, dt, 174, 0, 0.01);
                    double ns = 0;
                    for (const FlatChunk& c : chunks)
                      for (int64_t i = c.begin; i < c.end; ++i) ns += (double)P<T>(g)[i] * (double)P<T>(g)[i];
                    double gscale = h.grad_scale;
                    if (h.max_norm > 0 && std::sqrt(ns) > h.max_norm) gscale *= h.max_norm / (std::sqrt(ns) + 1e-6);
                    Tensor gs = Tensor::empty({n}, dt);  // the gradient as read: gs * g rounded to T
                    for (int64_t i = 0; i < n; ++i) P<T>(gs)[i] = (T)gscale * P<T>(g)[i];
                    for (const FlatChunk& c : chunks)
                      ref::adamw<T>(P<T>(p) + c.begin, P<T>(gs) + c.begin, P<T>(m) + c.begin, P<T>(v) + c.begin,
                                    c.end - c.begin, h.lr, h.beta1, h.beta2, h.eps, c.decay ? h.weight_decay : 0.0,
                                    h.step);
                    return std::vector<Tensor>{p, m, v};
                  }});
  }
}

// --- random shapes (fixed seeds): broadcasting, reductions, row ops, GEMMs; sizes from 1 up ---
template <class T>
void random_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  Rng r(dt == DType::F32 ? 2024 : 2025);
  auto dim = [&](int64_t hi) { return r.uniform() < 0.25 ? 1 : 1 + (int64_t)r.below((uint64_t)hi); };
  for (int k = 0; k < 6; ++k) {
    // binary: a random shape, b the same with some dims set to 1 and leading dims dropped
    Shape sa;
    for (int64_t d = 0, nd = 1 + (int64_t)r.below(4); d < nd; ++d) sa.push_back(dim(9));
    Shape sb(sa.begin() + (int64_t)r.below(sa.size()), sa.end());
    for (int64_t& d : sb)
      if (r.uniform() < 0.4) d = 1;
    const Shape os = bshape(sa, sb);
    const BinaryOp op = (BinaryOp)r.below(4);
    cs.push_back({str("random binary ", binary_name(op), " ", tn<T>(), S(sa), S(sb)), dt, true, 1, {},
                  [=](const Dev& D) {
                    Tensor a = D.in(rnd(sa, dt, 201 + k)), b = D.in(rnd(sb, dt, 202 + k, 0.5, 2)), out = D.out(os, dt);
                    D.be().binary(op, a, b, out);
                    return hosts({out});
                  },
                  [=] {
                    Tensor a = rnd(sa, dt, 201 + k), b = rnd(sb, dt, 202 + k, 0.5, 2), out = Tensor::empty(os, dt);
                    ref::binary<T>(op, P<T>(a), bstrides(sa, os), P<T>(b), bstrides(sb, os), P<T>(out), os, a.numel(),
                                   b.numel());
                    return std::vector<Tensor>{out};
                  }});
    // reduce_sum: the same shape summed over a random subset of dims
    Shape rs = sa;
    for (int64_t& d : rs)
      if (r.uniform() < 0.5) d = 1;
    const int64_t L = shape_numel(sa) / shape_numel(rs);
    cs.push_back({str("random reduce_sum ", tn<T>(), S(sa), "->", S(rs)), dt, false, L, {},
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd(sa, dt, 203 + k)), out = D.out(rs, dt);
                    D.be().reduce_sum(x, out);
                    return hosts({out});
                  },
                  [=] {
                    Tensor x = rnd(sa, dt, 203 + k), out = Tensor::empty(rs, dt);
                    ref::reduce_sum<T>(P<T>(x), sa, bstrides(rs, sa), P<T>(out), out.numel());
                    return std::vector<Tensor>{out};
                  }});
    // softmax + layernorm on [N, C]
    const int64_t N = dim(20), C = dim(400);
    cs.push_back({str("random softmax+layernorm ", tn<T>(), " [", N, ", ", C, "]"), dt, false, C, {},
                  [=](const Dev& D) {
                    Tensor x = D.in(rnd({N, C}, dt, 204 + k, -3, 3)), w = D.in(rnd({C}, dt, 205 + k)),
                           b = D.in(rnd({C}, dt, 206 + k));
                    Tensor y = D.out({N, C}, dt), z = D.out({N, C}, dt), mean = D.out({N}, dt), rstd = D.out({N}, dt);
                    D.be().softmax(x, y, false);
                    D.be().layernorm(x, w, b, 1e-5, z, mean, rstd);
                    return hosts({y, z, mean, rstd});
                  },
                  [=] {
                    Tensor x = rnd({N, C}, dt, 204 + k, -3, 3), w = rnd({C}, dt, 205 + k), b = rnd({C}, dt, 206 + k);
                    Tensor y = Tensor::empty({N, C}, dt), z = Tensor::empty({N, C}, dt), mean = Tensor::empty({N}, dt),
                           rstd = Tensor::empty({N}, dt);
                    ref::softmax<T>(P<T>(x), P<T>(y), N, C, false);
                    ref::layernorm<T>(P<T>(x), P<T>(w), P<T>(b), (T)1e-5, P<T>(z), P<T>(mean), P<T>(rstd), N, C);
                    return std::vector<Tensor>{y, z, mean, rstd};
                  }});
    // gemm
    GemmDesc g;
    g.M = dim(40);
    g.N = dim(40);
    g.K = dim(40);
    g.batch = 1 + (int64_t)r.below(3);
    g.trans_a = r.below(2);
    g.trans_b = r.below(2);
    g.stride_a = g.M * g.K;
    g.stride_b = g.K * g.N;
    g.stride_c = g.M * g.N;
    cs.push_back({str("random gemm ", tn<T>(), " M", g.M, " N", g.N, " K", g.K, " batch", g.batch, g.trans_a ? " tA" : "",
                      g.trans_b ? " tB" : ""),
                  dt, false, g.K, {},
                  [=](const Dev& D) {
                    Tensor a = D.in(rnd({g.batch, g.M * g.K}, dt, 207 + k)), b = D.in(rnd({g.batch, g.K * g.N}, dt, 208 + k));
                    Tensor c = D.out({g.batch, g.M * g.N}, dt);
                    D.be().gemm(g, a, b, c);
                    return hosts({c});
                  },
                  [=] {
                    Tensor a = rnd({g.batch, g.M * g.K}, dt, 207 + k), b = rnd({g.batch, g.K * g.N}, dt, 208 + k);
                    Tensor c = Tensor::empty({g.batch, g.M * g.N}, dt);
                    cpu::gemm_reference<T>(g, P<T>(a), P<T>(b), P<T>(c));
                    return std::vector<Tensor>{c};
                  }});
  }
}

// --- sizes past the launch caps: grid-stride loops (> 4096 blocks of 256) and block loops
// (> 65535 rows) ---
void large_cases(std::vector<Case>& cs) {
  const DType dt = DType::F32;
  const Shape big{1048576 + 3};
  cs.push_back({"binary add f32" + S(big) + " (grid-stride)", dt, true, 1, {},
                [=](const Dev& D) {
                  Tensor a = D.in(rnd(big, dt, 301)), b = D.in(rnd({1}, dt, 302)), out = D.out(big, dt);
                  D.be().binary(BinaryOp::Add, a, b, out);
                  return hosts({out});
                },
                [=] {
                  Tensor a = rnd(big, dt, 301), b = rnd({1}, dt, 302), out = Tensor::empty(big, dt);
                  ref::binary<float>(BinaryOp::Add, P<float>(a), {1}, P<float>(b), {0}, P<float>(out), big, a.numel(), 1);
                  return std::vector<Tensor>{out};
                }});
  cs.back().large = true;
  cs.push_back({"binary sub f32" + S(big) + S(big) + " (flat, grid-stride)", dt, true, 1, {},
                [=](const Dev& D) {
                  Tensor a = D.in(rnd(big, dt, 304)), b = D.in(rnd(big, dt, 305)), out = D.out(big, dt);
                  D.be().binary(BinaryOp::Sub, a, b, out);
                  return hosts({out});
                },
                [=] {
                  Tensor a = rnd(big, dt, 304), b = rnd(big, dt, 305), out = Tensor::empty(big, dt);
                  ref::binary<float>(BinaryOp::Sub, P<float>(a), {1}, P<float>(b), {1}, P<float>(out), big, a.numel(),
                                     a.numel());
                  return std::vector<Tensor>{out};
                }});
  cs.back().large = true;
  const int64_t rows = 65535 + 2;
  cs.push_back({str("softmax f32 [", rows, ", 3] (rows past the grid)"), dt, false, 3, {},
                [=](const Dev& D) {
                  Tensor x = D.in(rnd({rows, 3}, dt, 303)), y = D.out({rows, 3}, dt);
                  D.be().softmax(x, y, false);
                  return hosts({y});
                },
                [=] {
                  Tensor x = rnd({rows, 3}, dt, 303), y = Tensor::empty({rows, 3}, dt);
                  ref::softmax<float>(P<float>(x), P<float>(y), rows, 3, false);
                  return std::vector<Tensor>{y};
                }});
  cs.back().large = true;
}

// --- the 2023-24 encodings' extension kernels (POSENC_SPEC §7): fire_distances (FIRE's
// normalised distances, a tie thr == p at p = 3, c of either sign) and cope_forward / backward
// (CoPE's gated positions: the clamp reached, a decoding offset, a window) and cope_softmax_* (its
// attention's rows: those logits' softmax, and back) against short loops ---
template <class T>
void posenc2024_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  for (double cv : {0.4, -0.3}) {
    const Tensor pq = Tensor::from_vector<double>({0, 1, 2, 3, 4, 1, 3, 6, 7, 9}, {2, 5}).to(dt);
    const Tensor pk = Tensor::from_vector<double>({0, 1, 2, 3, 1, 3, 6, 7}, {2, 4}).to(dt);
    const Tensor c = Tensor::full({1}, cv, dt), lm = Tensor::full({1}, 1.0, dt);
    cs.push_back({str("fire_distances ", tn<T>(), " c ", cv), dt, false, 1, kernels::fire_distances,
                  [=](const Dev& D) {
                    Tensor x = D.out({2, 5, 4}, dt), dc = D.out({2, 5, 4}, dt), dl = D.out({2, 5, 4}, dt);
                    kernels::fire_distances(D.d, D.in(pq), D.in(pk), D.in(c), D.in(lm), 3.0, 1e-6, x, dc, dl);
                    return hosts({x, dc, dl});
                  },
                  [=] {
                    Tensor x = Tensor::empty({2, 5, 4}, dt), dc = Tensor::empty({2, 5, 4}, dt),
                           dl = Tensor::empty({2, 5, 4}, dt);
                    const T cc = (T)cv, L = T(3), eps = T(1e-6);
                    auto sg = [](T v) { return v > 0 ? T(1) : (v < 0 ? T(-1) : T(0)); };
                    for (int64_t b = 0; b < 2; ++b)
                      for (int64_t i = 0; i < 5; ++i)
                        for (int64_t j = 0; j < 4; ++j) {
                          const T pi = P<T>(pq)[b * 5 + i], u = pi - P<T>(pk)[b * 4 + j], m = std::max(L, pi);
                          const T num = std::log(std::fabs(cc * u) + 1), den = std::log(std::fabs(cc * m) + 1) + eps;
                          const T xv = num / den, a = std::fabs(cc * m) + 1;
                          const T split = L > pi ? T(1) : (L == pi ? T(0.5) : T(0));
                          const int64_t e = (b * 5 + i) * 4 + j;
                          P<T>(x)[e] = xv;
                          P<T>(dc)[e] = (sg(cc * u) * u / (std::fabs(cc * u) + 1) - xv * sg(cc * m) * m / a) / den;
                          P<T>(dl)[e] = -xv / den * (sg(cc * m) * cc / a) * split * L;
                        }
                    return std::vector<Tensor>{x, dc, dl};
                  }});
  }
  // (S, q_pos0, window, sinks, npos); the sinks' cases leave a gap between sinks and window, and the
  // long one runs whole vectors over both
  for (auto [S, p0, win, snk, np] : {std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>{5, 0, 0, 0, 3},
                                     {7, 3, 0, 0, 9}, {7, 3, 2, 0, 6}, {300, 0, 0, 0, 301}, {9, 0, 3, 2, 10},
                                     {12, 7, 3, 1, 4}, {300, 0, 40, 20, 25}}) {
    const int64_t B = 2, H = 2, Tq = S - p0;
    const Shape ts{B, H, Tq, S}, zs{B, H, Tq, np};
    const double scale = 0.5;
    // key j visible to query position qp (POSENC_SPEC §6)
    auto vis = [=](int64_t qp, int64_t j) { return j <= qp && (win == 0 || qp - j < win || j < snk); };
    // the row loop both references share: visible keys, reverse sum, clamp, interpolation
    auto ref = [=](const Tensor& dout, const Tensor& a, const Tensor& z, bool fwd) {
      Tensor out = a.clone(), ps = Tensor::zeros(ts, dt), da = fwd ? Tensor::zeros(ts, dt) : dout.clone(),
             dz = Tensor::zeros(zs, dt);
      for (int64_t r = 0; r < B * H * Tq; ++r) {
        const int64_t qp = p0 + r % Tq, hi = std::min(qp, S - 1);
        const T *ar = P<T>(a) + r * S, *zr = P<T>(z) + r * np;
        std::vector<T> sum(S, T(0));
        T acc = 0;
        for (int64_t j = hi; j >= 0; --j)
          if (vis(qp, j)) sum[j] = acc += T(1) / (T(1) + std::exp(-ar[j]));
        T run = 0;
        for (int64_t j = 0; j <= hi; ++j) {
          if (!vis(qp, j)) continue;
          const T p = std::min(sum[j], T(np - 1)), w = p - std::floor(p);
          const int64_t f = (int64_t)std::floor(p), c = (int64_t)std::ceil(p);
          P<T>(ps)[r * S + j] = sum[j];
          P<T>(out)[r * S + j] += (zr[c] * w + zr[f] * (1 - w)) * T(scale);
          if (fwd) continue;
          const T de = P<T>(dout)[r * S + j] * T(scale);
          P<T>(dz)[r * np + c] += de * w;
          P<T>(dz)[r * np + f] += de * (1 - w);
          if (sum[j] <= T(np - 1)) run += de * (zr[c] - zr[f]);
          const T g = T(1) / (T(1) + std::exp(-ar[j]));
          P<T>(da)[r * S + j] += run * g * (1 - g);
        }
      }
      return fwd ? std::vector<Tensor>{out, ps} : std::vector<Tensor>{da, dz};
    };
    const std::string tag = str(tn<T>(), " S ", S, " q_pos0 ", p0, " window ", win, " sinks ", snk, " npos ", np);
    cs.push_back({"cope_forward " + tag, dt, false, S, kernels::cope_forward,
                  [=](const Dev& D) {
                    Tensor out = D.out(ts, dt), ps = D.out(ts, dt);
                    kernels::cope_forward(D.d, D.in(rnd(ts, dt, 161, -2, 2)), D.in(rnd(zs, dt, 162)), p0, win, snk,
                                          scale, out, ps);
                    return hosts({out, ps});
                  },
                  [=] { return ref(Tensor(), rnd(ts, dt, 161, -2, 2), rnd(zs, dt, 162), true); }});
    cs.push_back({"cope_backward " + tag, dt, false, S, kernels::cope_backward,
                  [=](const Dev& D) {
                    const Tensor a = rnd(ts, dt, 161, -2, 2), z = rnd(zs, dt, 162);
                    const Tensor ps = ref(Tensor(), a, z, true)[1];
                    Tensor da = D.out(ts, dt), dz = D.out(zs, dt);
                    kernels::cope_backward(D.d, D.in(rnd(ts, dt, 163)), D.in(a), D.in(z), D.in(ps), p0, win, snk,
                                           scale, da, dz);
                    return hosts({da, dz});
                  },
                  [=] { return ref(rnd(ts, dt, 163), rnd(ts, dt, 161, -2, 2), rnd(zs, dt, 162), false); }});
    // CoPE's attention rows: the logits above, then the softmax over the visible keys (forward;
    // with sinks, the gap between sinks and window at -inf under the causal rows); the softmax's
    // backward into dL/dlogits, then the scan's backward
    const CausalRows rows{Tq, p0, snk > 0 ? 0 : win};
    auto probs = [=](const Tensor& a, const Tensor& z) {
      std::vector<Tensor> r = ref(Tensor(), a, z, true);
      for (int64_t e = 0; e < r[0].numel(); ++e)  // row e / S, key e % S
        if (!vis(p0 + e / S % Tq, e % S)) P<T>(r[0])[e] = -INFINITY;
      ref::softmax<T>(P<T>(r[0]), P<T>(r[0]), B * H * Tq, S, false, rows);
      return r;  // {p, psum}
    };
    cs.push_back({"cope_softmax_forward " + tag, dt, false, S, kernels::cope_softmax_forward,
                  [=](const Dev& D) {
                    Tensor p = D.out(ts, dt), ps = D.out(ts, dt);
                    kernels::cope_softmax_forward(D.d, D.in(rnd(ts, dt, 161, -2, 2)), D.in(rnd(zs, dt, 162)), p0, win,
                                                  snk, scale, p, ps);
                    return hosts({p, ps});
                  },
                  [=] { return probs(rnd(ts, dt, 161, -2, 2), rnd(zs, dt, 162)); }});
    cs.push_back({"cope_softmax_backward " + tag, dt, false, S, kernels::cope_softmax_backward,
                  [=](const Dev& D) {
                    const Tensor a = rnd(ts, dt, 161, -2, 2), z = rnd(zs, dt, 162);
                    const std::vector<Tensor> pp = probs(a, z);
                    Tensor dp = D.in(rnd(ts, dt, 164)), da = D.out(ts, dt), dz = D.out(zs, dt);
                    kernels::cope_softmax_backward(D.d, dp, D.in(pp[0]), D.in(a), D.in(z), D.in(pp[1]), p0, win, snk,
                                                   scale, da, dz);
                    return hosts({da, dz});
                  },
                  [=] {
                    const Tensor a = rnd(ts, dt, 161, -2, 2), z = rnd(zs, dt, 162);
                    const std::vector<Tensor> pp = probs(a, z);
                    Tensor ds = Tensor::empty(ts, dt);
                    ref::softmax_backward<T>(P<T>(pp[0]), P<T>(rnd(ts, dt, 164)), P<T>(ds), B * H * Tq, S, false, rows);
                    return ref(ds, a, z, false);
                  }});
  }
}

// --- extension kernels (core/extension.h: an op's own kernels, registered per device by their
// owner), compared on every device that registers them (else they must refuse); references are
// short loops ---
template <class T>
void extension_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  // gru cell: xg, hg [B, 3H], bhn [H], hp [B, H] -> h, rzn, hn; backward -> d1, d2, dh
  for (auto [B, H] : {std::pair<int64_t, int64_t>{3, 5}, {1, 1}, {4, 40}}) {
    const Shape bh{B, H}, b3{B, 3 * H};
    auto sg = [](T x) { return T(0.5) * std::tanh(T(0.5) * x) + T(0.5); };
    cs.push_back({str("gru_cell_forward ", tn<T>(), " B ", B, " H ", H), dt, false, 2, kernels::gru_cell_forward,
                  [=](const Dev& D) {
                    Tensor xg = D.in(rnd(b3, dt, 141)), hg = D.in(rnd(b3, dt, 142)), bhn = D.in(rnd({H}, dt, 143)),
                           hp = D.in(rnd(bh, dt, 144));
                    Tensor h = D.out(bh, dt), rzn = D.out(b3, dt), hn = D.out(bh, dt);
                    kernels::gru_cell_forward(D.d, xg, hg, bhn, hp, h, rzn, hn);
                    return hosts({h, rzn, hn});
                  },
                  [=] {
                    Tensor xg = rnd(b3, dt, 141), hg = rnd(b3, dt, 142), bhn = rnd({H}, dt, 143), hp = rnd(bh, dt, 144);
                    Tensor h = Tensor::empty(bh, dt), rzn = Tensor::empty(b3, dt), hn = Tensor::empty(bh, dt);
                    const T *x = P<T>(xg), *g = P<T>(hg);
                    for (int64_t b = 0; b < B; ++b)
                      for (int64_t j = 0; j < H; ++j) {
                        const int64_t o = b * 3 * H;
                        const T r = sg(x[o + j] + g[o + j]), z = sg(x[o + H + j] + g[o + H + j]);
                        const T hv = g[o + 2 * H + j] + P<T>(bhn)[j], n = std::tanh(x[o + 2 * H + j] + r * hv);
                        P<T>(h)[b * H + j] = n + z * (P<T>(hp)[b * H + j] - n);
                        P<T>(rzn)[o + j] = r, P<T>(rzn)[o + H + j] = z, P<T>(rzn)[o + 2 * H + j] = n;
                        P<T>(hn)[b * H + j] = hv;
                      }
                    return std::vector<Tensor>{h, rzn, hn};
                  }});
    cs.push_back({str("gru_cell_backward ", tn<T>(), " B ", B, " H ", H), dt, false, 2, kernels::gru_cell_backward,
                  [=](const Dev& D) {
                    Tensor gy = D.in(rnd(bh, dt, 151)), dhc = D.in(rnd(bh, dt, 152)), hp = D.in(rnd(bh, dt, 153)),
                           rzn = D.in(rnd(b3, dt, 154, 0, 1)), hn = D.in(rnd(bh, dt, 155));
                    Tensor d1 = D.out(b3, dt), d2 = D.out(b3, dt), dh = D.out(bh, dt);
                    kernels::gru_cell_backward(D.d, gy, dhc, hp, rzn, hn, d1, d2, dh);
                    return hosts({d1, d2, dh});
                  },
                  [=] {
                    Tensor gy = rnd(bh, dt, 151), dhc = rnd(bh, dt, 152), hp = rnd(bh, dt, 153),
                           rzn = rnd(b3, dt, 154, 0, 1), hn = rnd(bh, dt, 155);
                    Tensor d1 = Tensor::empty(b3, dt), d2 = Tensor::empty(b3, dt), dh = Tensor::empty(bh, dt);
                    for (int64_t b = 0; b < B; ++b)
                      for (int64_t j = 0; j < H; ++j) {
                        const int64_t o = b * 3 * H, i = b * H + j;
                        const T g = P<T>(gy)[i] + P<T>(dhc)[i];
                        const T r = P<T>(rzn)[o + j], z = P<T>(rzn)[o + H + j], n = P<T>(rzn)[o + 2 * H + j];
                        const T dnp = g * (T(1) - z) * (T(1) - n * n);
                        const T dar = dnp * P<T>(hn)[i] * r * (T(1) - r), daz = g * (P<T>(hp)[i] - n) * z * (T(1) - z);
                        P<T>(d1)[o + j] = dar, P<T>(d1)[o + H + j] = daz, P<T>(d1)[o + 2 * H + j] = dnp;
                        P<T>(d2)[o + j] = dar, P<T>(d2)[o + H + j] = daz, P<T>(d2)[o + 2 * H + j] = dnp * r;
                        P<T>(dh)[i] = g * z;
                      }
                    return std::vector<Tensor>{d1, d2, dh};
                  }});
  }
  posenc2024_cases<T>(cs);
}

// --- causal attention (Fused::Attention), with the bias and the content-position terms of
// AttnRel: the reference materialises each row's logits. Query i sits at key position
// i + S - T; window > 0 keeps `window` keys. Per (b, h):
//   logit_ij = scale (q_i . k_j + qrel[i, qidx_ij] + krel[j, kidx_ij]) + bias[h, i, j]
//   o_i = sum_j p_ij z_ij (v_j + vrel[qidx_ij])   (z: AttnDims::dropout's factor, else 1) ---
template <class T>
struct AttnRefRel {
  int64_t Rq = 0, Rk = 0;
  const int32_t *qidx = nullptr, *kidx = nullptr;  // [T, S]
  const T *qrel = nullptr, *krel = nullptr, *vrel = nullptr;
  T *dqrel = nullptr, *dkrel = nullptr, *dvrel = nullptr;
};
template <class T>
void attention_reference(const AttnDims& d, const T* q, const T* k, const T* v, const T* bias, T* out, T* lse,
                         const T* dout, T* dq, T* dk, T* dv, T* dbias, const AttnRefRel<T>& r) {
  const int64_t H = d.H, Tn = d.T, Sn = d.S, Dh = d.Dh, off = Sn - Tn;
  const T sc = (T)d.scale;
  if (dout) {
    std::fill(dq, dq + d.B * H * Tn * Dh, T(0));
    std::fill(dk, dk + d.B * H * Sn * Dh, T(0));
    std::fill(dv, dv + d.B * H * Sn * Dh, T(0));
    if (dbias) std::fill(dbias, dbias + H * Tn * Sn, T(0));
    if (r.dqrel) std::fill(r.dqrel, r.dqrel + d.B * H * Tn * r.Rq, T(0));
    if (r.dkrel) std::fill(r.dkrel, r.dkrel + d.B * H * Sn * r.Rk, T(0));
    if (r.dvrel) std::fill(r.dvrel, r.dvrel + r.Rq * Dh, T(0));
  }
  std::vector<T> p((size_t)Sn), vj((size_t)Dh);
  // v_j + vrel[qidx_ij] (the value row query i reads at key j)
  auto value = [&](int64_t bh, int64_t i, int64_t j) {
    for (int64_t c = 0; c < Dh; ++c)
      vj[(size_t)c] = v[(bh * Sn + j) * Dh + c] + (r.vrel ? r.vrel[r.qidx[i * Sn + j] * Dh + c] : T(0));
    return vj.data();
  };
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t bh = b * H + h;
      for (int64_t i = 0; i < Tn; ++i) {
        const T* qi = q + (bh * Tn + i) * Dh;
        T mx = -INFINITY;
        for (int64_t j = 0; j < Sn; ++j) {
          const bool seen = j <= i + off && (d.window <= 0 || j > i + off - d.window);
          T s = -INFINITY;
          if (seen) {
            T dot = 0;
            for (int64_t c = 0; c < Dh; ++c) dot += qi[c] * k[(bh * Sn + j) * Dh + c];
            if (r.qrel) dot += r.qrel[(bh * Tn + i) * r.Rq + r.qidx[i * Sn + j]];
            if (r.krel) dot += r.krel[(bh * Sn + j) * r.Rk + r.kidx[i * Sn + j]];
            s = sc * dot + (bias ? bias[(h * Tn + i) * Sn + j] : T(0));
          }
          p[(size_t)j] = s;
          mx = std::max(mx, s);
        }
        T* oi = out + (bh * Tn + i) * Dh;
        if (mx == -INFINITY) {
          std::fill(oi, oi + Dh, T(0));
          lse[bh * Tn + i] = INFINITY;
          continue;
        }
        T sum = 0;
        for (int64_t j = 0; j < Sn; ++j) sum += std::exp(p[(size_t)j] - mx);
        const T l = mx + std::log(sum);
        lse[bh * Tn + i] = l;
        std::fill(oi, oi + Dh, T(0));
        auto z = [&](int64_t j) {  // the dropout factor of p[b, h, i, j]
          return d.dropout.active() ? d.dropout.factor<T>((uint64_t)((bh * Tn + i) * Sn + j)) : T(1);
        };
        for (int64_t j = 0; j < Sn; ++j) {
          p[(size_t)j] = std::exp(p[(size_t)j] - l);
          if (p[(size_t)j] == T(0)) continue;
          const T* vv = value(bh, i, j);
          const T pz = p[(size_t)j] * z(j);
          for (int64_t c = 0; c < Dh; ++c) oi[c] += pz * vv[c];
        }
        if (!dout) continue;
        const T* gi = dout + (bh * Tn + i) * Dh;
        T Di = 0;
        for (int64_t c = 0; c < Dh; ++c) Di += gi[c] * oi[c];
        for (int64_t j = 0; j < Sn; ++j) {
          if (p[(size_t)j] == T(0)) continue;
          const T* vv = value(bh, i, j);
          T dp = 0;
          for (int64_t c = 0; c < Dh; ++c) dp += gi[c] * vv[c];
          const T zj = z(j), pz = p[(size_t)j] * zj;
          const T ds = p[(size_t)j] * (zj * dp - Di);
          for (int64_t c = 0; c < Dh; ++c) {
            dq[(bh * Tn + i) * Dh + c] += sc * ds * k[(bh * Sn + j) * Dh + c];
            dk[(bh * Sn + j) * Dh + c] += sc * ds * qi[c];
            dv[(bh * Sn + j) * Dh + c] += pz * gi[c];
            if (r.dvrel) r.dvrel[r.qidx[i * Sn + j] * Dh + c] += pz * gi[c];
          }
          if (dbias) dbias[(h * Tn + i) * Sn + j] += ds;
          if (r.dqrel) r.dqrel[(bh * Tn + i) * r.Rq + r.qidx[i * Sn + j]] += sc * ds;
          if (r.dkrel) r.dkrel[(bh * Sn + j) * r.Rk + r.kidx[i * Sn + j]] += sc * ds;
        }
      }
    }
}

// Relative terms of a case: which of qrel / krel / vrel, and their index ranges.
enum : int { kQrel = 1, kKrel = 2, kVrel = 4 };

// The attention cases' bound (Case::rel_tol): each output (o, lse, dq, dk, dv, dbias and the
// relative terms' gradients) is a softmax-weighted sum, or a sum of such sums, whose terms are
// bounded by the output's own scale; the kernels' errors come from a few exp / log roundings and
// one rescale per key tile, not from the length of the sums. Measured over every case below, both
// dtypes, the CPU and the emulated CUDA kernels: at most 7.6 eps (|want| + max |want|), not
// growing with L (S up to 130, Dh up to 96). 32 eps is 4x that (per case 4-36x its worst error,
// median 11x), and a gradient that is small against its output's scale is held to that scale,
// not to 1 + |want| (the old bound, 8 eps (4 + L) (1 + |want|), was 70-22,000x per case, median
// 700x, and absolute for small gradients).
constexpr double kAttentionTol = 32;

template <class T>
void attention_cases(std::vector<Case>& cs) {
  const DType dt = dtype_of<T>::value;
  // bias: 0 none, 1 [H, T, S], 2 [1, H, T, S], 3 [H, T, S] with query row 0 of head 0 fully at
  // -inf (that row sees no finite logit: lse +inf, output 0, no gradient). T = 0: no queries
  // (dk, dv, dkrel, dvrel are zeros). Dh = 96 in f64: the CUDA kernels' tiles need more than
  // 48 KiB of shared memory (asked for with cudaFuncSetAttribute). KS > 0: k and v (and dk, dv)
  // hold KS rows per (b, h), the first Sn the keys (AttnDims::kv_rows, a decoding step reading the
  // KV cache in place): rows Sn.. are random and must change nothing, their gradient is 0.
  // T <= 4 (the CPU forward's direct scores, no K^T tiles): over several key tiles, windowed too.
  // drop > 0: dropout on the probabilities (AttnDims::dropout) with that rate.
  // bias 4: a distance table AttnRel::dist_bias [H, S + 2] instead (the reference: expanded to
  // [H, T, S] by hand, its gradient dbias summed by distance i + S - T - j).
  struct AC { int64_t B, H, Tn, Sn, Dh, window; int bias; int rel; int64_t Rq, Rk; int64_t KS = 0; double drop = 0; };
  for (const AC& a : {AC{1, 1, 1, 1, 1, 0, 0, 0, 0, 0}, AC{2, 3, 5, 5, 4, 0, 1, 0, 0, 0},
                      AC{1, 2, 3, 7, 8, 0, 0, 0, 0, 0}, AC{2, 1, 6, 6, 3, 2, 1, 0, 0, 0},
                      AC{1, 2, 33, 33, 5, 0, 1, 0, 0, 0}, AC{1, 1, 1, 1, 1, 0, 1, kQrel | kKrel | kVrel, 1, 1},
                      AC{2, 2, 7, 9, 37, 3, 1, kQrel | kKrel | kVrel, 5, 4}, AC{1, 1, 40, 45, 3, 0, 0, kQrel, 7, 0},
                      AC{2, 1, 5, 5, 6, 0, 0, kKrel, 0, 3}, AC{1, 3, 9, 9, 33, 0, 2, kVrel, 4, 0},
                      AC{3, 2, 35, 70, 16, 20, 1, kQrel | kKrel | kVrel, 11, 9}, AC{2, 2, 4, 6, 2, 0, 3, kQrel, 3, 0},
                      AC{1, 1, 37, 37, 64, 0, 2, 0, 0, 0}, AC{1, 2, 0, 3, 4, 0, 1, kQrel | kKrel | kVrel, 2, 2},
                      AC{1, 1, 5, 6, 96, 0, 1, kVrel, 3, 0}, AC{1, 2, 1, 5, 8, 0, 1, 0, 0, 0, 9},
                      AC{2, 1, 3, 7, 4, 2, 0, kQrel | kKrel | kVrel, 3, 2, 12}, AC{1, 3, 2, 40, 32, 0, 0, 0, 0, 0, 64},
                      AC{1, 2, 1, 130, 32, 50, 1, kQrel | kKrel | kVrel, 4, 3, 200}, AC{2, 1, 4, 100, 16, 0, 0, 0, 0, 0},
                      AC{2, 3, 5, 5, 4, 0, 1, 0, 0, 0, 0, 0.3}, AC{2, 2, 7, 9, 37, 3, 1, kQrel | kKrel | kVrel, 5, 4, 0, 0.5},
                      AC{3, 2, 35, 70, 16, 20, 1, kQrel | kKrel | kVrel, 11, 9, 0, 0.1},
                      AC{2, 1, 4, 100, 16, 0, 0, 0, 0, 0, 0, 0.2}, AC{1, 2, 70, 70, 8, 0, 0, kVrel, 4, 0, 0, 0.3},
                      AC{2, 2, 5, 9, 8, 3, 4, 0, 0, 0}, AC{1, 3, 33, 33, 16, 0, 4, 0, 0, 0},
                      AC{1, 2, 3, 7, 8, 0, 4, kQrel | kVrel, 3, 0}, AC{1, 2, 1, 40, 32, 0, 4, 0, 0, 0, 64},
                      AC{2, 1, 6, 6, 3, 0, 4, 0, 0, 0, 0, 0.3}}) {
    AttnDims d;
    d.B = a.B; d.H = a.H; d.T = a.Tn; d.S = a.Sn; d.Dh = a.Dh; d.window = a.window;
    d.scale = 1.0 / std::sqrt((double)a.Dh);
    d.kv_rows = a.KS;
    if (a.drop > 0) d.dropout = dropout_mask(a.drop, 0xA77E + (uint64_t)a.Sn);
    const int64_t KR = a.KS > 0 ? a.KS : a.Sn;  // rows per (b, h) of k, v as the device gets them
    const Shape qs{a.B, a.H, a.Tn, a.Dh}, ks{a.B, a.H, a.Sn, a.Dh}, kfs{a.B, a.H, KR, a.Dh}, ls{a.B, a.H, a.Tn};
    const bool table = a.bias == 4;
    const Shape bs = a.bias == 2 ? Shape{1, a.H, a.Tn, a.Sn} : table ? Shape{a.H, a.Sn + 2} : Shape{a.H, a.Tn, a.Sn};
    const Shape is{a.Tn, a.Sn}, qrs{a.B, a.H, a.Tn, a.Rq}, krs{a.B, a.H, a.Sn, a.Rk}, vrs{a.Rq, a.Dh};
    const bool hq = a.rel & kQrel, hk = a.rel & kKrel, hv = a.rel & kVrel;
    const std::string nm = str(tn<T>(), " B", a.B, " H", a.H, " T", a.Tn, " S", a.Sn, " Dh", a.Dh, " window ", a.window,
                               a.bias ? str(table ? " dist_bias" : " bias", S(bs), a.bias == 3 ? " (a row at -inf)" : "")
                                      : std::string(),
                               hq ? str(" qrel R", a.Rq) : std::string(), hk ? str(" krel R", a.Rk) : std::string(),
                               hv ? str(" vrel R", a.Rq) : std::string(),
                               a.KS ? str(" kv_rows ", a.KS) : std::string(),
                               a.drop > 0 ? str(" dropout ", a.drop) : std::string());
    // the inputs, on the host (the same for the device run and the reference)
    auto inputs = [=] {
      std::vector<Tensor> in = {rnd(qs, dt, 181, -2, 2), rnd(kfs, dt, 182, -2, 2), rnd(kfs, dt, 183), rnd(bs, dt, 184),
                                rnd(qs, dt, 185), rnd(is, DType::I32, 186, 0, (double)a.Rq),
                                rnd(is, DType::I32, 187, 0, (double)a.Rk), rnd(qrs, dt, 188, -2, 2),
                                rnd(krs, dt, 189, -2, 2), rnd(vrs, dt, 190)};
      if (a.bias == 3)
        for (int64_t j = 0; j < a.Sn; ++j) in[3].set(j, -INFINITY);
      return in;
    };
    const int64_t L = std::max<int64_t>(a.Sn * a.Dh + a.Sn, hv ? a.B * a.H * a.Tn * a.Sn : 0);
    // forward and backward in one case: out, lse, dq, dk, dv (, dbias, dqrel, dkrel, dvrel)
    cs.push_back({"attention " + nm, dt, false, L, Fused::Attention,
                  [=](const Dev& D) {
                    const std::vector<Tensor> h = inputs();
                    Tensor q = D.in(h[0]), k = D.in(h[1]), v = D.in(h[2]);
                    Tensor bias = a.bias && !table ? D.in(h[3]) : Tensor();
                    AttnRel rel;
                    rel.Rq = a.Rq, rel.Rk = a.Rk;
                    if (table) rel.dist_bias = D.in(h[3]);
                    if (hq || hv) rel.qidx = D.in(h[5]);
                    if (hk) rel.kidx = D.in(h[6]);
                    if (hq) rel.qrel = D.in(h[7]);
                    if (hk) rel.krel = D.in(h[8]);
                    if (hv) rel.vrel = D.in(h[9]);
                    Tensor out = D.out(qs, dt), lse = D.out(ls, dt);
                    D.be().attention_forward(d, q, k, v, bias, out, lse, rel);
                    Tensor dout = D.in(h[4]), dq = D.out(qs, dt), dk = D.out(kfs, dt), dv = D.out(kfs, dt);
                    Tensor dbias = a.bias && !table ? D.out(bs, dt) : Tensor();
                    AttnRelGrad g;
                    if (table) g.ddist_bias = D.out(bs, dt);
                    if (hq) g.dqrel = D.out(qrs, dt);
                    if (hk) g.dkrel = D.out(krs, dt);
                    if (hv) g.dvrel = D.out(vrs, dt);
                    D.be().attention_backward(d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, g);
                    std::vector<Tensor> r = hosts({out, lse, dq, dk, dv});
                    for (const Tensor* t : {&dbias, &g.ddist_bias, &g.dqrel, &g.dkrel, &g.dvrel})
                      if (t->defined()) r.push_back(host(*t));
                    return r;
                  },
                  [=] {
                    std::vector<Tensor> h = inputs();
                    // the reference on the keys alone: rows [0, Sn) of each (b, h) of k and v
                    auto keys_of = [&](const Tensor& full) {
                      Tensor c = Tensor::empty(ks, dt);
                      for (int64_t bh = 0; bh < a.B * a.H; ++bh)
                        for (int64_t e = 0; e < a.Sn * a.Dh; ++e) c.set(bh * a.Sn * a.Dh + e, full.at(bh * KR * a.Dh + e));
                      return c;
                    };
                    // and its key gradients back in KR rows, 0 in rows Sn..
                    auto rows_of = [&](const Tensor& c) {
                      Tensor full = Tensor::zeros(kfs, dt);
                      for (int64_t bh = 0; bh < a.B * a.H; ++bh)
                        for (int64_t e = 0; e < a.Sn * a.Dh; ++e) full.set(bh * KR * a.Dh + e, c.at(bh * a.Sn * a.Dh + e));
                      return full;
                    };
                    h[1] = keys_of(h[1]), h[2] = keys_of(h[2]);
                    AttnDims dr = d;
                    dr.kv_rows = 0;
                    Tensor out = Tensor::empty(qs, dt), lse = Tensor::empty(ls, dt);
                    // a distance table: bias[h, i, j] = table[h, max(i + S - T - j, 0)]
                    auto dist = [&](int64_t i, int64_t j) { return std::max<int64_t>(i + a.Sn - a.Tn - j, 0); };
                    const Shape es{a.H, a.Tn, a.Sn};
                    if (table) {
                      Tensor e = Tensor::empty(es, dt);
                      for (int64_t hh = 0; hh < a.H; ++hh)
                        for (int64_t i = 0; i < a.Tn; ++i)
                          for (int64_t j = 0; j < a.Sn; ++j) e.set((hh * a.Tn + i) * a.Sn + j, h[3].at(hh * (a.Sn + 2) + dist(i, j)));
                      h[3] = e;
                    }
                    Tensor dq = Tensor::empty(qs, dt), dk = Tensor::empty(ks, dt), dv = Tensor::empty(ks, dt),
                           dbias = Tensor::empty(table ? es : bs, dt), dqrel = Tensor::empty(qrs, dt),
                           dkrel = Tensor::empty(krs, dt), dvrel = Tensor::empty(vrs, dt);
                    AttnRefRel<T> r;
                    r.Rq = a.Rq, r.Rk = a.Rk;
                    r.qidx = P<int32_t>(h[5]), r.kidx = P<int32_t>(h[6]);
                    if (hq) r.qrel = P<T>(h[7]), r.dqrel = P<T>(dqrel);
                    if (hk) r.krel = P<T>(h[8]), r.dkrel = P<T>(dkrel);
                    if (hv) r.vrel = P<T>(h[9]), r.dvrel = P<T>(dvrel);
                    attention_reference<T>(dr, P<T>(h[0]), P<T>(h[1]), P<T>(h[2]), a.bias ? P<T>(h[3]) : nullptr,
                                           P<T>(out), P<T>(lse), P<T>(h[4]), P<T>(dq), P<T>(dk), P<T>(dv),
                                           a.bias ? P<T>(dbias) : nullptr, r);
                    std::vector<Tensor> res = {out, lse, dq, rows_of(dk), rows_of(dv)};
                    if (table) {  // dbias summed by distance (0 at distances >= S)
                      Tensor dt_ = Tensor::zeros(bs, dt);
                      for (int64_t hh = 0; hh < a.H; ++hh)
                        for (int64_t i = 0; i < a.Tn; ++i)
                          for (int64_t j = 0; j < a.Sn; ++j) {
                            const int64_t x = hh * (a.Sn + 2) + dist(i, j);
                            dt_.set(x, dt_.at(x) + dbias.at((hh * a.Tn + i) * a.Sn + j));
                          }
                      res.push_back(dt_);
                    } else if (a.bias) {
                      res.push_back(dbias);
                    }
                    if (hq) res.push_back(dqrel);
                    if (hk) res.push_back(dkrel);
                    if (hv) res.push_back(dvrel);
                    return res;
                  }});
    cs.back().rel_tol = kAttentionTol;
  }
}

const std::vector<Case>& table() {
  static const std::vector<Case> cs = [] {
    std::vector<Case> v;
    memory_cases(v);
    elementwise_cases<float>(v);
    elementwise_cases<double>(v);
    reduce_cases<float>(v);
    reduce_cases<double>(v);
    gemm_cases<float>(v);
    gemm_cases<double>(v);
    row_cases<float>(v);
    row_cases<double>(v);
    index_cases<float>(v);
    index_cases<double>(v);
    adamw_cases<float>(v);
    adamw_cases<double>(v);
    fused_cases<float>(v);
    fused_cases<double>(v);
    extension_cases<float>(v);
    extension_cases<double>(v);
    attention_cases<float>(v);
    attention_cases<double>(v);
    random_cases<float>(v);
    random_cases<double>(v);
    large_cases(v);
    return v;
  }();
  return cs;
}

// ---------------------------------------------------------------------------------------------
// comparison, digest

// Exact: the same value (NaN matches NaN). Else |got - want| <= tol (1 + |want|) with
// tol = 8 eps(dtype) (4 + L), or, for a case with rel_tol (attention), |got - want| <= rel_tol eps
// (|want| + m) with m the largest finite |want| of that output; infinities must match exactly.
void expect_match(const Case& c, const std::string& dev, const std::vector<Tensor>& got,
                  const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size()) << c.name;
  const double eps = c.dt == DType::F64 ? 2.220446049250313e-16 : 1.1920929e-07;
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(shape_str(got[k].shape()), shape_str(want[k].shape())) << c.name << " output " << k;
    double m = 0;
    for (int64_t i = 0; c.rel_tol > 0 && i < want[k].numel(); ++i)
      if (std::isfinite(want[k].at(i))) m = std::max(m, std::fabs(want[k].at(i)));
    const double tol = c.rel_tol > 0 ? c.rel_tol * eps : 8 * eps * (4 + (double)c.L);
    const double floor = c.rel_tol > 0 ? m : 1.0;
    int bad = 0;
    for (int64_t i = 0; i < got[k].numel(); ++i) {
      const double a = got[k].at(i), r = want[k].at(i);
      bool ok;
      if (std::isnan(r) || std::isnan(a)) ok = std::isnan(r) && std::isnan(a);
      else if (c.exact || std::isinf(r)) ok = a == r;
      else ok = std::fabs(a - r) <= tol * (floor + std::fabs(r));
      if (!ok && bad++ < 4)
        ADD_FAILURE() << c.name << " on " << dev << ": output " << k << " element " << i << " is " << a << ", want " << r
                      << (c.exact ? " (exact)" : str(" (tol ", tol, c.rel_tol > 0 ? " x (|want| + " : " x (1 + |want|), L ",
                                                     c.rel_tol > 0 ? m : (double)c.L, ")"));
    }
  }
}

uint64_t fnv1a(const std::vector<Tensor>& ts) {
  uint64_t h = 1469598103934665603ull;
  for (const Tensor& t : ts) {
    const unsigned char* p = static_cast<const unsigned char*>(t.raw());
    for (size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

bool supported(const Backend& be, const Case& c) {
  if (c.needs.fused) return be.has(*c.needs.fused);
  if (c.needs.ext_has) return c.needs.ext_has(be.device());
  return true;
}

// Device parameter: "cpu" or "cuda"; false where the probe finds no GPU (the caller skips).
bool device_available(const std::string& dev) {
  if (dev == "cpu") return true;
#ifdef CTXLAB_WITH_CUDA
  if (cuda::emulated() || cuda::device_count() > 0) return true;
#endif
  return false;
}
Device device_of(const std::string& dev) { return dev == "cpu" ? Device::CPU : Device::CUDA; }

class BackendOps : public ::testing::TestWithParam<std::string> {};

TEST_P(BackendOps, EveryMethodAgainstTheReference) {
  const std::string dev = GetParam();
  CTX_SKIP_WITHOUT_GPU(device_available(dev));
  const Dev D{device_of(dev)};
  Backend& be = D.be();
  const char* digest_path = std::getenv("CTXLAB_BACKEND_DIGEST");
  std::ofstream digest;
  if (digest_path && dev == "cuda") digest.open(digest_path, std::ios::app);
  // CTXLAB_BACKEND_CASES: only the cases it matches (a sanitizer over one family of kernels)
  const char* only = setting_env("CTXLAB_BACKEND_CASES");
  const std::optional<std::regex> pick = only ? std::optional<std::regex>(std::regex(only)) : std::nullopt;
  int compared = 0, unsupported = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const Case& c : table()) {
    if (pick && !std::regex_search(c.name, *pick)) continue;
    SCOPED_TRACE(c.name);
    if (!supported(be, c)) {  // a fused method / extension kernel the device lacks: it must refuse clearly
      try {
        c.run(D);
        ADD_FAILURE() << c.name << " on " << dev << ": has() is false but the call did not throw";
      } catch (const Error& e) {
        const char* want = c.needs.fused ? "not supported by backend" : "kernel registered for this extension kernel";
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
      }
      ++unsupported;
      continue;
    }
    std::vector<Tensor> got;
    try {
      got = c.run(D);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.name << " on " << dev << " threw: " << e.what();
      continue;
    }
    expect_match(c, dev, got, c.ref());
    if (digest.is_open()) digest << c.name << " " << std::hex << fnv1a(got) << std::dec << "\n";
    ++compared;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("backend_ops %s (%s): %d cases compared with the reference, %d fused / extension cases the device "
              "lacks (checked to throw), %.2f s\n",
              dev.c_str(), be.name().c_str(), compared, unsupported, s);
  EXPECT_GT(compared, pick ? 0 : 400) << (pick ? std::string("CTXLAB_BACKEND_CASES=") + only + " matches no case" : "");
  if (pick) std::printf("backend_ops: only the cases matching CTXLAB_BACKEND_CASES=%s\n", only);
  // Both backends implement every fused method, and both devices register every extension kernel,
  // the table has cases for (CUDA lacks only the ode_rk4 kernels, which have none here): a has()
  // that stopped reporting one would otherwise pass as "refused".
  EXPECT_EQ(unsupported, 0) << "fused methods / extension kernels the " << dev << " device no longer has";
}

// Bad indices throw before anything is written, with the CPU backend's message on every device.
TEST_P(BackendOps, BadIndicesThrowTheCpuMessage) {
  const std::string dev = GetParam();
  CTX_SKIP_WITHOUT_GPU(device_available(dev));
  const Dev D{device_of(dev)}, C{Device::CPU};
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  for (DType idt : {DType::I32, DType::I64}) {
    const Tensor xh = rnd({6, 4}, DType::F32, 1), ih = ints({1, 6, 2}, idt), th = ints({0, -2, 1}, idt);
    // each call also checks that nothing was written: the outputs (NaN-filled by E.out) stay NaN
    // and index_add's x stays as it was
    auto all_nan = [](const Tensor& t) {
      const Tensor h = host(t);
      for (int64_t k = 0; k < h.numel(); ++k)
        if (!std::isnan(h.at(k))) return false;
      return true;
    };
    auto select_on = [&](const Dev& E) {
      return message([&] {
        Tensor x = E.in(xh), i = E.in(ih), out = E.out({3, 4}, DType::F32);
        try {
          E.be().index_select(x, 0, i, out);
        } catch (const Error&) {
          EXPECT_TRUE(all_nan(out)) << "index_select wrote out before throwing";
          throw;
        }
      });
    };
    auto add_on = [&](const Dev& E) {
      return message([&] {
        Tensor x = E.in(xh), i = E.in(ih), src = E.in(rnd({3, 4}, DType::F32, 2));
        try {
          E.be().index_add(x, 0, i, src);
        } catch (const Error&) {
          const Tensor h = host(x);
          for (int64_t k = 0; k < h.numel(); ++k) EXPECT_EQ(h.at(k), xh.at(k)) << "index_add wrote x[" << k << "]";
          throw;
        }
      });
    };
    auto ce_on = [&](const Dev& E) {
      return message([&] {
        Tensor z = E.in(rnd({3, 5}, DType::F32, 3)), t = E.in(th), loss = E.out({3}, DType::F32),
               lse = E.out({3}, DType::F32);
        try {
          E.be().cross_entropy(z, t, loss, lse);
        } catch (const Error&) {
          EXPECT_TRUE(all_nan(loss) && all_nan(lse)) << "cross_entropy wrote loss / lse before throwing";
          throw;
        }
      });
    };
    EXPECT_NE(select_on(C).find("index_select: index 6 at position 1 out of range [0, 6)"), std::string::npos)
        << select_on(C);
    EXPECT_EQ(select_on(D), select_on(C));
    EXPECT_NE(add_on(C).find("index_add: index 6 at position 1"), std::string::npos) << add_on(C);
    EXPECT_EQ(add_on(D), add_on(C));
    EXPECT_NE(ce_on(C).find("cross_entropy: target -2 at row 1"), std::string::npos) << ce_on(C);
    EXPECT_EQ(ce_on(D), ce_on(C));
  }
}

// causal_softmax's argument errors (core/backend_checks.h causal_rows): one message on every device
TEST_P(BackendOps, CausalSoftmaxRefusesBadArgumentsWithTheCpuMessage) {
  const std::string dev = GetParam();
  CTX_SKIP_WITHOUT_GPU(device_available(dev));
  const Dev D{device_of(dev)}, C{Device::CPU};
  auto message = [](const Dev& E, const Shape& xs, const Shape& ys, int64_t window, bool backward) {
    try {
      Tensor x = E.in(rnd(xs, DType::F32, 5)), y = E.out(ys, DType::F32);
      if (backward) {
        Tensor dx = E.out(xs, DType::F32);
        E.be().causal_softmax_backward(x, y, dx, 0, window);
      } else {
        E.be().causal_softmax(x, y, 0, window);
      }
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  struct Bad { Shape xs, ys; int64_t window; bool backward; const char* expect; };
  for (const Bad& b : {Bad{{6}, {6}, 0, false, "causal_softmax: needs [..., T, S], got"},
                       Bad{{2, 3, 4}, {2, 3, 5}, 0, false, "causal_softmax"},
                       Bad{{3, 4}, {3, 4}, -1, false, "causal_softmax: window must be >= 0"},
                       Bad{{2, 3, 4}, {2, 4, 3}, 0, true, "causal_softmax_backward"}}) {
    const std::string want = message(C, b.xs, b.ys, b.window, b.backward);
    EXPECT_NE(want.find(b.expect), std::string::npos) << want;
    EXPECT_EQ(message(D, b.xs, b.ys, b.window, b.backward), want);
  }
}

// The residual add fused into the norm (Backend::add_layernorm / add_rmsnorm) gives the values of
// the composed twin on the same device: binary(Add) into h, then the norm of h. h bit for bit
// everywhere; y, mean and rstd bit for bit on CUDA (one kernel) and for CPU f64 and RMSNorm (the
// reference loop both ways), within a C-term sum's rounding for the CPU's f32 LayerNorm (the fused
// loop against oneDNN's norm). The backward's dres gives dres + the plain backward's dx: bit for bit on
// CUDA (the kernels' add is never contracted into an fma), within one rounding on the CPU (the host
// compiler may fuse the add with the last product). Rows of the warp kernels and of the
// one-block-a-row kernels (C = 1500).
double max_diff(const Tensor& a, const Tensor& b) {  // host tensors of one shape; NaN anywhere: inf
  EXPECT_EQ(a.shape(), b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel() && i < b.numel(); ++i) {
    const double d = std::fabs(a.at(i) - b.at(i));
    m = std::isnan(d) ? INFINITY : std::max(m, d);
  }
  return m;
}

TEST_P(BackendOps, AddNormIsTheAddThenTheNorm) {
  const std::string dev = GetParam();
  CTX_SKIP_WITHOUT_GPU(device_available(dev));
  const Dev D{device_of(dev)};
  const bool exact_bwd = D.d != Device::CPU;
  for (DType dt : {DType::F32, DType::F64})
    for (const Shape& s : {Shape{3, 7}, Shape{70, 200}, Shape{2, 5, 700}, Shape{4, 1500}})
      for (int kind : {0, 1, 2}) {  // layernorm with bias, without, rmsnorm
        SCOPED_TRACE(str(dtype_name(dt), S(s), " kind ", kind));
        const int64_t C = s.back(), N = shape_numel(s) / C;
        const bool rms = kind == 2;
        Tensor x = D.in(rnd(s, dt, 1, -2, 3)), a = D.in(rnd(s, dt, 2, -1, 1)), w = D.in(rnd({C}, dt, 3));
        Tensor b = kind == 0 ? D.in(rnd({C}, dt, 4)) : Tensor();
        auto norm = [&](const Tensor* ax, Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd) {
          if (ax && rms) D.be().add_rmsnorm(x, *ax, w, 1e-5, h, y, rstd);
          else if (ax) D.be().add_layernorm(x, *ax, w, b, 1e-5, h, y, mean, rstd);
          else if (rms) D.be().rmsnorm(h, w, 1e-5, y, rstd);
          else D.be().layernorm(h, w, b, 1e-5, y, mean, rstd);
        };
        Tensor hf = D.out(s, dt), yf = D.out(s, dt), mf = D.out({N}, dt), rf = D.out({N}, dt);
        norm(&a, hf, yf, mf, rf);
        Tensor hc = D.out(s, dt), yc = D.out(s, dt), mc = D.out({N}, dt), rc = D.out({N}, dt);
        D.be().binary(BinaryOp::Add, x, a, hc);
        norm(nullptr, hc, yc, mc, rc);
        EXPECT_EQ(max_diff(hf.to(Device::CPU), hc.to(Device::CPU)), 0.0);
        const bool exact_fwd = D.d != Device::CPU || dt == DType::F64 || rms;
        // (the rounding of a C-term sum in another order, at the values' scale here, <= 4)
        const double tol = exact_fwd ? 0.0 : 4.0 * (double)C * std::ldexp(1.0, -24) * 4;
        EXPECT_LE(max_diff(yf.to(Device::CPU), yc.to(Device::CPU)), tol);
        EXPECT_LE(max_diff(rf.to(Device::CPU), rc.to(Device::CPU)), tol);
        if (!rms) {
          EXPECT_LE(max_diff(mf.to(Device::CPU), mc.to(Device::CPU)), tol);
        }
        // backward: dx = dres + the gradient, into another tensor and in place
        Tensor dy = D.in(rnd(s, dt, 5)), dres_h = rnd(s, dt, 6, -3, 3);
        auto bwd = [&](Tensor& dx, const Tensor& dres) {
          Tensor dw = D.in(Tensor::zeros({C}, dt)), db = kind == 0 ? D.in(Tensor::zeros({C}, dt)) : Tensor();
          if (rms) D.be().rmsnorm_backward(dy, hc, w, rc, dx, dw, dres);
          else D.be().layernorm_backward(dy, hc, w, mc, rc, dx, dw, db, dres);
          return dw.to(Device::CPU);
        };
        Tensor plain = D.out(s, dt), sum = D.out(s, dt), dres = D.in(dres_h);
        const Tensor dw_plain = bwd(plain, Tensor());
        D.be().binary(BinaryOp::Add, dres, plain, sum);
        Tensor into = D.out(s, dt), in_place = D.in(dres_h);
        EXPECT_EQ(max_diff(bwd(into, dres), dw_plain), 0.0);  // dres leaves the weight gradients alone
        bwd(in_place, in_place);
        const Tensor want = sum.to(Device::CPU), ph = plain.to(Device::CPU);
        for (const Tensor& got : {into.to(Device::CPU), in_place.to(Device::CPU)}) {
          double worst = 0;  // in units of one rounding of the sum
          const double u = dt == DType::F32 ? std::ldexp(1.0, -24) : std::ldexp(1.0, -53);
          for (int64_t i = 0; i < got.numel(); ++i)
            worst = std::max(worst, std::fabs(got.at(i) - want.at(i)) /
                                        (u * (std::fabs(dres_h.at(i)) + std::fabs(ph.at(i))) + 1e-300));
          if (exact_bwd) EXPECT_EQ(max_diff(got, want), 0.0);
          else EXPECT_LE(worst, 2.0);
        }
      }
}

// The fused norm's arguments are checked before anything runs, with the CPU's messages: a of
// another shape, h sharing x's storage, a dres of another shape.
TEST_P(BackendOps, AddNormRefusesBadArgumentsWithTheCpuMessage) {
  const std::string dev = GetParam();
  CTX_SKIP_WITHOUT_GPU(device_available(dev));
  const Dev D{device_of(dev)}, Cpu{Device::CPU};
  auto message = [](const Dev& E, int which) {
    try {
      const DType dt = DType::F32;
      Tensor x = E.in(rnd({3, 8}, dt, 1)), w = E.in(rnd({8}, dt, 2)), b = E.in(rnd({8}, dt, 3));
      Tensor a = E.in(rnd(which == 0 ? Shape{3, 7} : Shape{3, 8}, dt, 4)), y = E.out({3, 8}, dt);
      Tensor mean = E.out({3}, dt), rstd = E.out({3}, dt), h = which == 1 ? x : E.out({3, 8}, dt);
      if (which <= 1) E.be().add_layernorm(x, a, w, b, 1e-5, h, y, mean, rstd);
      if (which == 2) E.be().add_rmsnorm(x, a, w, 1e-5, h, y, rstd);
      Tensor dres = E.in(rnd({3, 9}, dt, 5)), dx = E.out({3, 8}, dt), dw = E.out({8}, dt);
      if (which == 3) E.be().layernorm_backward(x, x, w, mean, rstd, dx, dw, b, dres);
      if (which == 4) E.be().rmsnorm_backward(x, x, w, rstd, dx, dw, dres);
      if (which == 2) return std::string("(no error)");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  const char* expect[] = {"add_layer_norm: shape mismatch", "add_layer_norm: h must have storage of its own",
                          "(no error)", "layer_norm_backward: shape mismatch", "rms_norm_backward: shape mismatch"};
  for (int which = 0; which < 5; ++which) {
    const std::string want = message(Cpu, which);
    EXPECT_NE(want.find(expect[which]), std::string::npos) << want;
    EXPECT_EQ(message(D, which), want);
  }
}

#ifdef CTXLAB_WITH_CUDA
INSTANTIATE_TEST_SUITE_P(Devices, BackendOps, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
#else
INSTANTIATE_TEST_SUITE_P(Devices, BackendOps, ::testing::Values("cpu"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });
#endif

#ifdef CTXLAB_WITH_CUDA
// A sequence of backend calls shaped like a training step (embedding, norm, linear, GELU, loss,
// their backwards, the optimizer) on fresh tensors each pass: the second pass must be served
// entirely by the caching allocator (no cudaMalloc). Counted by the allocator itself on any
// device and, in the emulated build, by the emulator's own cudaMalloc counter.
void training_step_like(Backend& be) {
  const Device d = Device::CUDA;
  const int64_t B = 3, V = 11, C = 8, N = 2 * B;
  Tensor wte = Tensor::empty({V, C}, DType::F32, d), tok = ints({1, 4, 4, 0, 10, 3}, DType::I32).to(d);
  be.fill(wte, 0.01);
  Tensor x = Tensor::empty({N, C}, DType::F32, d);
  be.index_select(wte, 0, tok, x);
  Tensor w = Tensor::full({C}, 1.0, DType::F32, d), b = Tensor::zeros({C}, DType::F32, d);
  Tensor y = Tensor::empty({N, C}, DType::F32, d), mean = Tensor::empty({N}, DType::F32, d),
         rstd = Tensor::empty({N}, DType::F32, d);
  be.layernorm(x, w, b, 1e-5, y, mean, rstd);
  Tensor h = Tensor::empty({N, C}, DType::F32, d);
  be.unary(UnaryOp::GeluTanh, y, h);
  Tensor logits = Tensor::empty({N, V}, DType::F32, d);
  GemmDesc g;
  g.trans_b = true;
  g.M = N;
  g.N = V;
  g.K = C;
  be.gemm(g, h, wte, logits);
  Tensor tgt = ints({4, 4, 0, 10, 3, -1}, DType::I64).to(d), loss = Tensor::empty({N}, DType::F32, d),
         lse = Tensor::empty({N}, DType::F32, d);
  be.cross_entropy(logits, tgt, loss, lse);
  Tensor dloss = Tensor::full({N}, 1.0 / N, DType::F32, d), dlogits = Tensor::empty({N, V}, DType::F32, d);
  be.cross_entropy_backward(logits, tgt, lse, dloss, dlogits);
  Tensor dh = Tensor::empty({N, C}, DType::F32, d), dwte = Tensor::zeros({V, C}, DType::F32, d);
  GemmDesc g2;
  g2.M = N;
  g2.N = C;
  g2.K = V;
  be.gemm(g2, dlogits, wte, dh);
  Tensor dy = Tensor::empty({N, C}, DType::F32, d), dx = Tensor::empty({N, C}, DType::F32, d);
  be.unary_backward(UnaryOp::GeluTanh, y, h, dh, dy);
  Tensor dw = Tensor::zeros({C}, DType::F32, d), db = Tensor::zeros({C}, DType::F32, d);
  be.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
  be.index_add(dwte, 0, tok, dx);
  Tensor sum = Tensor::empty({C}, DType::F32, d);
  be.reduce_sum(dy, sum);
  Tensor m = Tensor::zeros({V, C}, DType::F32, d), v = Tensor::zeros({V, C}, DType::F32, d);
  be.adamw(wte, dwte, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, 1);
  if (be.has(Fused::FlatAdamW)) {
    Tensor flat = wte.view({V * C}), gflat = dwte.view({V * C}), mf = m.view({V * C}), vf = v.view({V * C});
    Tensor ns = Tensor::empty({1}, DType::F64, d);
    const std::vector<FlatChunk> ch = {{0, V * C / 2, true}, {V * C / 2, V * C, false}};
    be.sum_squares(gflat, ch, ns);
    AdamWHyper hy;
    hy.max_norm = 1.0;
    be.adamw_flat(flat, gflat, mf, vf, ch, hy, ns);
  }
  EXPECT_TRUE(std::isfinite(loss.to(Device::CPU).at(0)));
}

TEST(BackendOpsCuda, WarmStepMakesNoCudaMalloc) {
  CTX_SKIP_WITHOUT_GPU(device_available("cuda"));
  Backend& be = backend(Device::CUDA);
  training_step_like(be);  // warms the caching allocator
  const uint64_t before = cuda::device_alloc_stats().device_mallocs;
  const uint64_t requests = cuda::device_alloc_stats().requests;
#ifdef CTXLAB_CUDA_EMULATOR
  cuemu::reset_stats();
#endif
  training_step_like(be);
  EXPECT_GT(cuda::device_alloc_stats().requests, requests + 20);  // the pass did allocate tensors
  EXPECT_EQ(cuda::device_alloc_stats().device_mallocs, before) << "a warm step reached cudaMalloc";
#ifdef CTXLAB_CUDA_EMULATOR
  EXPECT_EQ(cuemu::stats().mallocs, 0u) << "the emulator counted cudaMalloc calls in a warm step";
  EXPECT_GT(cuemu::stats().launches, 15u);
#endif
}

// index_add's plan built on the device (index_plan.cu) is the host's counting sort bit for bit:
// U, rows, starts and pos (positions within a row ascending), for i32 and i64 indices, with
// duplicates, m > n (several chunks of the placing block), m = 1, n = 1, all indices equal and a
// large sparse vocabulary.
TEST(BackendOpsCuda, DeviceIndexPlanEqualsTheHostPlanBitwise) {
  CTX_SKIP_WITHOUT_GPU(device_available("cuda"));
  struct P { int64_t n, m; const char* what; };
  const std::vector<P> ps = {{37, 300, "duplicates, m > n"}, {1000, 100, "m < n"},  {10, 1, "m = 1"},
                             {1, 50, "n = 1"},                {100, 700, "all equal"}, {50257, 2048, "sparse, n large"},
                             {4, 257, "a chunk and one"}};
  for (const P& p : ps)
    for (DType idt : {DType::I32, DType::I64}) {
      SCOPED_TRACE(str(p.what, ": n ", p.n, ", m ", p.m, ", ", dtype_name(idt)));
      Rng r(p.n * 31 + p.m);
      std::vector<int64_t> v((size_t)p.m);
      for (int64_t& x : v) x = std::string(p.what) == "all equal" ? 42 : (int64_t)r.below((uint64_t)p.n);
      const std::vector<int64_t> want = cuda::index_add_plan_host(v, p.n);
      const Tensor idx = ints(v, idt).to(Device::CUDA);
      const Tensor got = cuda::index_add_plan_device(idx, p.n).to(Device::CPU);
      ASSERT_EQ(got.numel(), cuda::plan_capacity(p.m));
      ASSERT_LE((int64_t)want.size(), got.numel());
      const int64_t* g = got.data<int64_t>();
      EXPECT_EQ(g[0], want[0]) << "U";
      int64_t mismatches = 0;
      for (size_t k = 0; k < want.size(); ++k) mismatches += g[k] != want[k];
      EXPECT_EQ(mismatches, 0);
    }
}

// A device index tensor without a host mirror whose writer proved its range (Tensor::checked_bound,
// as a batch staged into a device ring): index_select, index_add (the embedding forward and
// backward) and cross-entropy forward and backward read nothing on the host and upload nothing
// (index_add plans on the device), and give the bits of the mirrored path (the batch uploaded
// from the host, range checks and plan on the host). Unproven mirrorless indices still take their
// copy (and a bad index there still throws); a bound above n is no proof; a mutable access drops
// the promise and the copy comes back.
TEST(BackendOpsCuda, ProvenIndicesNeedNoHostCopy) {
  CTX_SKIP_WITHOUT_GPU(device_available("cuda"));
  Backend& be = backend(Device::CUDA);
  const Device d = Device::CUDA;
  const int64_t V = 53, C = 5, N = 40;
  std::vector<int64_t> tv((size_t)N);
  Rng r(3);
  for (int64_t& x : tv) x = (int64_t)r.below((uint64_t)V);
  tv[7] = tv[8] = tv[30] = 11;  // repeats
  const Tensor wte = rnd({V, C}, DType::F32, 5).to(d), dy = rnd({N, C}, DType::F32, 6).to(d);
  const Tensor logits = rnd({N, V}, DType::F32, 7, -3, 3).to(d), dloss = rnd({N}, DType::F32, 8).to(d);
  const Tensor dwte0 = rnd({V, C}, DType::F32, 9).to(d);
  struct Out { Tensor x, dwte, loss, lse, dlogits; };
  auto run = [&](const Tensor& tok) {  // (clone: a device -> device copy, not counted)
    Out o{Tensor::empty({N, C}, DType::F32, d), dwte0.clone(), Tensor::empty({N}, DType::F32, d),
          Tensor::empty({N}, DType::F32, d), Tensor::empty({N, V}, DType::F32, d)};
    be.index_select(wte, 0, tok, o.x);
    be.index_add(o.dwte, 0, tok, dy);
    be.cross_entropy(logits, tok, o.loss, o.lse);
    be.cross_entropy_backward(logits, tok, o.lse, dloss, o.dlogits);
    return o;
  };
  auto same_bits = [](const Tensor& a, const Tensor& b) {
    const Tensor ha = a.to(Device::CPU), hb = b.to(Device::CPU);
    return std::memcmp(ha.raw(), hb.raw(), ha.nbytes()) == 0;
  };
  for (DType idt : {DType::I32, DType::I64}) {
    SCOPED_TRACE(dtype_name(idt));
    const Tensor th = ints(tv, idt);
    const Out want = run(to_device_like(th, wte));  // the mirrored path
    be.synchronize();
    Tensor proven = th.to(d);
    proven.set_checked_bound(V);
    ASSERT_FALSE(proven.host_mirror().defined());
    const cuda::HostCopyStats c0 = cuda::host_copy_stats();
    const Out got = run(proven);
    const cuda::HostCopyStats c1 = cuda::host_copy_stats();
    EXPECT_EQ(c1.to_host, c0.to_host) << "a device -> host copy with proven indices";
    EXPECT_EQ(c1.to_device + c1.to_device_queued, c0.to_device + c0.to_device_queued)
        << "a host -> device copy with proven indices";
    EXPECT_TRUE(same_bits(got.x, want.x)) << "index_select";
    EXPECT_TRUE(same_bits(got.dwte, want.dwte)) << "index_add";
    EXPECT_TRUE(same_bits(got.loss, want.loss) && same_bits(got.lse, want.lse)) << "cross_entropy";
    EXPECT_TRUE(same_bits(got.dlogits, want.dlogits)) << "cross_entropy_backward";
    // unproven: no mirror, no bound (or a bound above the range: V + 1 > n = V) -> one copy per check
    for (int64_t bound : {int64_t(-1), V + 1}) {
      Tensor plain = th.to(d);
      plain.set_checked_bound(bound);
      const uint64_t h0 = cuda::host_copy_stats().to_host;
      const Out p = run(plain);
      EXPECT_EQ(cuda::host_copy_stats().to_host, h0 + 4) << "bound " << bound << ": the four checks' copies";
      EXPECT_TRUE(same_bits(p.dwte, want.dwte));
    }
    // a mutable access drops the promise: the check (and its copy) comes back
    Tensor written = th.to(d);
    written.set_checked_bound(V);
    (void)written.raw();
    EXPECT_EQ(written.checked_bound(), -1);
    const uint64_t h1 = cuda::host_copy_stats().to_host;
    Tensor x = Tensor::empty({N, C}, DType::F32, d);
    be.index_select(wte, 0, written, x);
    EXPECT_EQ(cuda::host_copy_stats().to_host, h1 + 1);
    // and a bad index in unproven mirrorless indices still throws the CPU's message
    std::vector<int64_t> bad = tv;
    bad[3] = V;
    try {
      Tensor dw = Tensor::zeros({V, C}, DType::F32, d);
      be.index_add(dw, 0, ints(bad, idt).to(d), dy);
      ADD_FAILURE() << "a bad index was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(str("index_add: index ", V, " at position 3")), std::string::npos)
          << e.what();
    }
  }
}

// A failing runtime or cuBLAS call is a ctx::Error naming the file, line and call (on a GPU, under
// the emulator, and without a GPU, where every call fails).
TEST(BackendOpsCuda, ErrorsNameTheCallSite) {
  float h[4] = {1, 2, 3, 4};
  void* not_device = reinterpret_cast<void*>(uintptr_t(64));  // no allocation lives there
  try {
    CTX_CUDA_CHECK(cudaMemcpy(not_device, h, sizeof(h), cudaMemcpyHostToDevice));
    ADD_FAILURE() << "a copy to an invalid device pointer succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("CUDA error at "), std::string::npos) << m;
    EXPECT_NE(m.find("test_backend_ops.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("cudaMemcpy(not_device, h"), std::string::npos) << m;
  }
  try {
    const float one = 1;
    CTX_CUBLAS_CHECK(cublasSgemm(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, h, 1, h, 1, &one, h, 1));
    ADD_FAILURE() << "cublasSgemm without a handle succeeded";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuBLAS error at "), std::string::npos) << m;
    EXPECT_NE(m.find("test_backend_ops.cpp:"), std::string::npos) << m;
    EXPECT_NE(m.find("cublasSgemm(nullptr"), std::string::npos) << m;
    EXPECT_NE(m.find("CUBLAS_STATUS_"), std::string::npos) << m;
  }
#ifdef CTXLAB_CUDA_EMULATOR
  cuemu::clear_faults();
#endif
}

// The real build on a machine without a GPU: a CUDA tensor is a one-line error; with a GPU (or
// the emulator) it works.
TEST(BackendOpsCuda, DeviceSelectionWithoutAGpu) {
  if (!cuda::emulated() && cuda::device_count() == 0) {
    try {
      Tensor::empty({4}, DType::F32, Device::CUDA);
      ADD_FAILURE() << "a CUDA tensor was created without a GPU";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("no CUDA GPU available"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
  } else {
    Tensor t = Tensor::full({4}, 2.0, DType::F32, Device::CUDA);
    EXPECT_EQ(t.to(Device::CPU).at(3), 2.0);
  }
}
#endif

#ifdef CTXLAB_CUDA_EMULATOR
// Under the emulator every case gives the same bits whatever order the threads of a block run in
// between barriers (forward, reversed, shuffled): no shared-memory races, no order-dependent
// reductions. (CI also compares whole runs, the large cases included, through
// CTXLAB_BACKEND_DIGEST.)
TEST(BackendOpsEmu, ThreadScheduleDoesNotChangeABit) {
  const Dev D{Device::CUDA};
  const cuemu::Schedule saved = cuemu::schedule();
  int checked = 0;
  for (const Case& c : table()) {
    if (!supported(D.be(), c) || c.large) continue;
    cuemu::set_schedule(cuemu::Schedule::Forward);
    const uint64_t f = fnv1a(c.run(D));
    cuemu::set_schedule(cuemu::Schedule::Reverse);
    const uint64_t r = fnv1a(c.run(D));
    cuemu::set_schedule(cuemu::Schedule::Shuffle, 7);
    const uint64_t s = fnv1a(c.run(D));
    EXPECT_EQ(f, r) << c.name << ": forward vs reverse schedule";
    EXPECT_EQ(f, s) << c.name << ": forward vs shuffled schedule";
    ++checked;
  }
  cuemu::set_schedule(saved);
  EXPECT_GT(checked, 400);
}
#endif

}  // namespace
