// core/cpu/onednn_ops.cpp — oneDNN primitives for softmax, layer norm and tanh-GELU (f32),
// created once per shape and run on the caller's buffers. See onednn_ops.h for the contract.
#include "core/cpu/onednn_ops.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu/onednn_util.h"
#include "core/cpu/ref_kernels.h"
#include "core/error.h"
#include "core/settings.h"

namespace ctx::cpu {

namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

enum OpTag : int64_t { kSoftmax = 1, kSoftmaxBwd, kLayerNorm, kLayerNormBwd, kGelu, kGeluBwd };

onednn::PrimitiveCache<onednn::Prim>& cache() {
  static onednn::PrimitiveCache<onednn::Prim> c;
  return c;
}

// A plain row-major f32 shape: [n] (c == 0) or [n, c]. No allocation to describe an argument.
struct Dims {
  int64_t n, c = 0;
};
memory::desc plain(Dims d) {
  return d.c == 0 ? memory::desc({d.n}, memory::data_type::f32, memory::format_tag::a)
                  : memory::desc({d.n, d.c}, memory::data_type::f32, memory::format_tag::ab);
}

constexpr int kNoArg = -1;  // an optional argument left out
struct Arg {
  int id;  // DNNL_ARG_*, or kNoArg
  Dims dims;
  const void* data;
};

// oneDNN's name for the implementation it chose, e.g. "jit:avx2" or "ref:any".
std::string impl_name(const dnnl::primitive& p) {
  const char* info = nullptr;
  dnnl_primitive_desc_query(p.get_primitive_desc(), dnnl_query_impl_info_str, 0, &info);
  return info ? info : "";
}

// Runs the primitive cached under `key` (made by `make` on first use) on the caller's buffers.
// False when oneDNN has no implementation for the case, or only its reference one ("ref:*",
// plain loops far slower than ours: softmax backward on AVX2 machines, measured 10x slower).
template <class Make>
bool run(const onednn::Key& key, Make make, std::initializer_list<Arg> args) {
  int64_t work = 0;  // the largest argument's elements, ~4 units each (core/cpu/parallel.h)
  for (const Arg& a : args) work = std::max(work, a.dims.n * std::max<int64_t>(a.dims.c, 1) * 4);
  const onednn::Prim& p = cache().get(key, work, [&] {
    onednn::Prim r;
    try {
      r.prim = make();
      for (const Arg& a : args)
        if (a.id != kNoArg) r.args.emplace_back(a.id, plain(a.dims));
      onednn::bind_scratchpad(r);
      r.ok = impl_name(r.prim).rfind("ref", 0) != 0;
    } catch (const dnnl::error&) {
    }
    return r;
  });
  if (!p.ok) return false;
  const void* ptrs[16];
  size_t n = 0;
  for (const Arg& a : args)
    if (a.id != kNoArg && n < 16) ptrs[n++] = a.data;
  onednn::execute(p, ptrs, n);
  return true;
}

onednn::Key key_of(std::initializer_list<int64_t> v) {
  onednn::Key k;
  std::copy(v.begin(), v.end(), k.v.begin());
  return k;
}

algorithm softmax_alg(bool log) {
  return log ? algorithm::softmax_log : algorithm::softmax_accurate;
}

dnnl::softmax_v2_forward::primitive_desc softmax_pd(const memory::desc& md, bool log) {
  return {{prop_kind::forward_training, softmax_alg(log), md, md, 1}, onednn::attr(), onednn::engine()};
}

dnnl::normalization_flags ln_flags(bool shift) {
  return shift ? dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift
               : dnnl::normalization_flags::use_scale;
}

dnnl::layer_normalization_forward::primitive_desc layernorm_pd(int64_t N, int64_t C, float eps,
                                                               bool shift) {
  return {{prop_kind::forward_training, plain({N, C}), plain({N}), eps, ln_flags(shift)},
          onednn::attr(), onednn::engine()};
}

dnnl::eltwise_forward::primitive_desc gelu_pd(int64_t n) {
  return {{prop_kind::forward_training, algorithm::eltwise_gelu_tanh, plain({n})}, onednn::attr(),
          onednn::engine()};
}

// Scratch owned by the calling thread, grown as needed.
float* scratch(std::vector<float>& v, int64_t n) {
  if ((int64_t)v.size() < n) v.resize((size_t)n);
  return v.data();
}

}  // namespace

bool onednn_softmax_f32(const float* x, float* y, int64_t N, int64_t C, bool log) {
  if (N <= 0 || C <= 0) return false;
  // oneDNN gives NaN for a fully masked row (all -inf); the reference defines it as 0 (log: -inf).
  // Those rows are found before the call, which overwrites x when it runs in place (y == x): only
  // a row whose first element is -inf can be one, so any other row costs one compare.
  thread_local std::vector<int64_t> masked;  // keeps its capacity: no allocation once warm
  masked.clear();
  for (int64_t n = 0; n < N; ++n) {
    const float* r = x + n * C;
    int64_t c = 0;
    while (c < C && r[c] == -INFINITY) ++c;
    if (c == C) masked.push_back(n);
  }
  if (!run(key_of({kSoftmax, N, C, log}),
           [&] { return dnnl::softmax_v2_forward(softmax_pd(plain({N, C}), log)); },
           {{DNNL_ARG_SRC, {N, C}, x}, {DNNL_ARG_DST, {N, C}, y}}))
    return false;
  for (int64_t n : masked) std::fill(y + n * C, y + (n + 1) * C, log ? -INFINITY : 0.f);
  return true;
}

bool onednn_softmax_backward_f32(const float* y, const float* dy, float* dx, int64_t N, int64_t C,
                                 bool log) {
  if (N <= 0 || C <= 0) return false;
  return run(key_of({kSoftmaxBwd, N, C, log}),
             [&] {
               const memory::desc md = plain({N, C});
               return dnnl::softmax_v2_backward(
                   {{softmax_alg(log), md, md, md, 1}, onednn::attr(), onednn::engine(), softmax_pd(md, log)});
             },
             {{DNNL_ARG_DST, {N, C}, y},
              {DNNL_ARG_DIFF_DST, {N, C}, dy},
              {DNNL_ARG_DIFF_SRC, {N, C}, dx}});
}

bool onednn_layernorm_f32(const float* x, const float* w, const float* b, float eps, float* y,
                          float* mean, float* rstd, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return false;
  const bool shift = b != nullptr;
  // oneDNN writes the variance; it goes into rstd and becomes 1 / sqrt(var + eps) below.
  const bool ok = run(
      key_of({kLayerNorm, N, C, shift, onednn::float_bits(eps)}),
      [&] { return dnnl::layer_normalization_forward(layernorm_pd(N, C, eps, shift)); },
      {{DNNL_ARG_SRC, {N, C}, x},
       {DNNL_ARG_SCALE, {C}, w},
       {shift ? DNNL_ARG_SHIFT : kNoArg, {C}, b},
       {DNNL_ARG_DST, {N, C}, y},
       {DNNL_ARG_MEAN, {N}, mean},
       {DNNL_ARG_VARIANCE, {N}, rstd}});
  if (!ok) return false;
  for (int64_t i = 0; i < N; ++i) rstd[i] = 1.f / std::sqrt(rstd[i] + eps);
  return true;
}

bool onednn_layernorm_backward_f32(const float* dy, const float* x, const float* w,
                                   const float* mean, const float* rstd, float* dx, float* dw,
                                   float* db, int64_t N, int64_t C) {
  if (N <= 0 || C <= 0) return false;
  // oneDNN takes the variance: give it var' = 1 / rstd^2 with epsilon 0, so that it computes
  // exactly our rstd (the forward's eps is folded into var'). Its weight-gradient sums (oneDNN
  // 2.6 has no dx-only layer-norm backward with a scale) run in an order that depends on the
  // thread count: they go to scratch and are dropped; dw / db are summed in the canonical row
  // order instead (ref_kernels.h colsum_tree: the same run whatever the thread count or the
  // number of ranks), and accumulated. The shift values are unused but must be passed.
  const bool shift = db != nullptr;
  thread_local std::vector<float> var_s, dscale_s, dshift_s, zeros_s;
  float* var = scratch(var_s, N);
  float* dscale = scratch(dscale_s, C);
  float* dshift = scratch(dshift_s, C);
  float* zeros = scratch(zeros_s, C);
  std::memset(zeros, 0, sizeof(float) * (size_t)C);
  for (int64_t i = 0; i < N; ++i) var[i] = 1.f / (rstd[i] * rstd[i]);
  const bool ok = run(
      key_of({kLayerNormBwd, N, C, shift}),
      [&] {
        const memory::desc md = plain({N, C});
        return dnnl::layer_normalization_backward(
            {{prop_kind::backward, md, md, plain({N}), 0.f, ln_flags(shift)}, onednn::attr(),
             onednn::engine(), layernorm_pd(N, C, 0.f, shift)});
      },
      {{DNNL_ARG_SRC, {N, C}, x},
       {DNNL_ARG_MEAN, {N}, mean},
       {DNNL_ARG_VARIANCE, {N}, var},
       {DNNL_ARG_DIFF_DST, {N, C}, dy},
       {DNNL_ARG_SCALE, {C}, w},
       {shift ? DNNL_ARG_SHIFT : kNoArg, {C}, zeros},
       {DNNL_ARG_DIFF_SRC, {N, C}, dx},
       {DNNL_ARG_DIFF_SCALE, {C}, dscale},
       {shift ? DNNL_ARG_DIFF_SHIFT : kNoArg, {C}, dshift}});
  if (!ok) return false;
  ref::norm_param_grads<float>(dy, x, mean, rstd, dw, db, N, C);
  return true;
}

bool onednn_gelu_tanh_f32(const float* x, float* y, int64_t n) {
  if (n <= 0) return false;
  return run(key_of({kGelu, n}), [&] { return dnnl::eltwise_forward(gelu_pd(n)); },
             {{DNNL_ARG_SRC, {n}, x}, {DNNL_ARG_DST, {n}, y}});
}

bool onednn_gelu_tanh_backward_f32(const float* x, const float* dy, float* dx, int64_t n) {
  if (n <= 0) return false;
  return run(key_of({kGeluBwd, n}),
             [&] {
               const memory::desc md = plain({n});
               return dnnl::eltwise_backward(
                   {{algorithm::eltwise_gelu_tanh, md, md}, onednn::attr(), onednn::engine(), gelu_pd(n)});
             },
             {{DNNL_ARG_SRC, {n}, x}, {DNNL_ARG_DIFF_DST, {n}, dy}, {DNNL_ARG_DIFF_SRC, {n}, dx}});
}

size_t onednn_ops_cache_size() { return cache().size(); }

namespace {
// The measured policy (bench/onednn_ops, docs/threading.md): oneDNN where it beat plain OpenMP
// loops on the model's shapes. Softmax backward: oneDNN 2.6 has no AVX2 kernel for it (its
// "ref:any" ran 10x slower than loops; the functions decline it anyway). Layer-norm backward:
// oneDNN's kernel is not JIT and lost to SIMD-reduction loops (0.7x). GELU: the AVX2 kernel of
// gelu_fast.h is 3.5-5.5x faster than oneDNN's (bench/gelu), so oneDNN is off for both.
struct OpPolicy {
  const char* op;
  bool use_onednn;
};
constexpr OpPolicy kPolicy[] = {
    {"softmax", true},    {"softmax_backward", false},   {"log_softmax", true},
    {"log_softmax_backward", false}, {"layernorm", true}, {"layernorm_backward", false},
    {"gelu_tanh", false}, {"gelu_tanh_backward", false},
};

enum class Override { Measured, All, None };
Override env_override() {
  static const Override o = [] {
    const char* e = setting_env("CTXLAB_ONEDNN_OPS");
    if (!e) return Override::Measured;
    const std::string s = e;
    if (s == "all") return Override::All;
    if (s == "none") return Override::None;
    throw Error(str("CTXLAB_ONEDNN_OPS='", s, "': expected all or none"));
  }();
  return o;
}
}  // namespace

bool onednn_op_enabled(const char* op) {
  for (const OpPolicy& p : kPolicy) {
    if (std::strcmp(op, p.op) == 0) {
      const Override o = env_override();
      return o == Override::Measured ? p.use_onednn : o == Override::All;
    }
  }
  std::string valid;  // (only on the error path: the policy is asked on every call of its ops)
  for (const OpPolicy& p : kPolicy) valid += str(valid.empty() ? "" : ", ", p.op);
  throw Error(str("onednn_op_enabled: unknown op '", op, "' (valid: ", valid, ")"));
}

}  // namespace ctx::cpu
