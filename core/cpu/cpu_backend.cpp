// core/cpu/cpu_backend.cpp — the CPU kernels of core/backend.h (Backend::*_impl; the arguments
// are checked by Backend before they get here, core/backend_checks.h, except the index values,
// which are range-checked here before anything is written).
// Dispatches on dtype to the reference kernels (ref_kernels.h) and, for f32, to the fast paths
// (GEMM through oneDNN or OpenBLAS, see gemm.h; GELU: gelu_fast.h; softmax and layer norm:
// onednn_ops.h). The fused methods (has(Fused): all of them) forward to core/cpu/fused.h.
#include <cstring>

#include "core/backend.h"
#include "core/backend_checks.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/dropout_simd.h"
#include "core/cpu/fused.h"
#include "core/cpu/gelu_fast.h"
#include "core/cpu/gemm.h"
#include "core/precision.h"
#include "core/cpu/onednn_ops.h"
#include "core/cpu/ref_kernels.h"
#include "core/cpu/softmax_fast.h"
#include "core/threads.h"

namespace ctx {
namespace cpu {
namespace {

#define CTX_DISPATCH_FLOAT(DT, WHAT, ...)                                              \
  switch (DT) {                                                                        \
    case DType::F32: { using T = float; __VA_ARGS__; break; }                          \
    case DType::F64: { using T = double; __VA_ARGS__; break; }                         \
    default: throw Error(str(WHAT, ": expected a float tensor, got ", dtype_name(DT))); \
  }
// an optional argument's elements, or null where it is undefined
template <class T>
const T* ptr_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <class T>
T* ptr_or_null(Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

#define CTX_DISPATCH_INDEX(DT, WHAT, ...)                                                   \
  switch (DT) {                                                                             \
    case DType::I32: { using I = int32_t; __VA_ARGS__; break; }                             \
    case DType::I64: { using I = int64_t; __VA_ARGS__; break; }                             \
    default: throw Error(str(WHAT, ": index tensor must be i32 or i64, got ", dtype_name(DT))); \
  }
#define CTX_DISPATCH_ALL(DT, WHAT, ...)                        \
  switch (DT) {                                                \
    case DType::F32: { using T = float; __VA_ARGS__; break; }   \
    case DType::F64: { using T = double; __VA_ARGS__; break; }  \
    case DType::I32: { using T = int32_t; __VA_ARGS__; break; } \
    case DType::I64: { using T = int64_t; __VA_ARGS__; break; } \
  }

class CpuBackend final : public Backend {
 public:
  CpuBackend() {
    init_threading();
    pin_openblas_if_loaded();
  }
  Device device() const override { return Device::CPU; }
  std::string name() const override { return "cpu"; }

  void gemm_operand_reused(const Tensor& t) override {
    if (gemm_precision() == Precision::BF16) bf16_copy_whole(t);
  }
  bool has(Fused) const override { return true; }  // every fused method (core/cpu/fused.h)

 protected:
  void fill_impl(Tensor& x, double v) override {
    int64_t n = x.numel();
    CTX_DISPATCH_ALL(x.dtype(), "fill", {
      T* p = x.data<T>();
      T tv = (T)v;
      for (int64_t i = 0; i < n; ++i) p[i] = tv;
    });
  }

  void set_values_impl(Tensor& dst, const std::vector<int64_t>& values) override {
    std::memcpy(dst.data<int64_t>(), values.data(), values.size() * sizeof(int64_t));
  }

  void copy_strided_impl(const Tensor& src, const Strided& s, Tensor& dst, const Strided& d, const Shape& shape,
                         bool accumulate) override {
    CTX_DISPATCH_ALL(src.dtype(), "copy_strided", {
      const T* sp = src.data<T>();
      T* dp = dst.data<T>();
      if (accumulate)
        ref::for_each_strided(shape, s.strides, s.offset, d.strides, d.offset,
                              [&](int64_t a, int64_t b) { dp[b] += sp[a]; });
      else
        ref::for_each_strided(shape, s.strides, s.offset, d.strides, d.offset,
                              [&](int64_t a, int64_t b) { dp[b] = sp[a]; });
    });
  }

  void convert_impl(const Tensor& src, Tensor& dst) override {
    int64_t n = src.numel();
    CTX_DISPATCH_ALL(src.dtype(), "convert", {
      using S = T;
      const S* sp = src.data<S>();
      CTX_DISPATCH_ALL(dst.dtype(), "convert", {
        T* dp = dst.data<T>();
        for (int64_t i = 0; i < n; ++i) dp[i] = (T)sp[i];
      });
    });
  }

  void unary_impl(UnaryOp op, const Tensor& x, Tensor& y, double a, double b) override {
    if (op == UnaryOp::GeluTanh && x.dtype() == DType::F32)
      return gelu_tanh_f32(x.data<float>(), y.data<float>(), x.numel());
    CTX_DISPATCH_FLOAT(x.dtype(), unary_name(op),
                       ref::unary<T>(op, x.data<T>(), y.data<T>(), x.numel(), (T)a, (T)b));
  }

  void unary_backward_impl(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, double a,
                           double b) override {
    if (op == UnaryOp::GeluTanh && dy.dtype() == DType::F32 && x.defined()) {
      const GeluImpl gi = gelu_impl(true);
      if (gi == GeluImpl::OneDNN &&
          onednn_gelu_tanh_backward_f32(x.data<float>(), dy.data<float>(), dx.data<float>(), dy.numel()))
        return;
      if (gi != GeluImpl::Reference) {
        gelu_tanh_backward_fast_f32(x.data<float>(), dy.data<float>(), dx.data<float>(), dy.numel());
        return;
      }
    }
    CTX_DISPATCH_FLOAT(dy.dtype(), unary_name(op),
                       ref::unary_backward<T>(op, x.defined() ? x.data<T>() : nullptr,
                                              y.defined() ? y.data<T>() : nullptr, dy.data<T>(),
                                              dx.data<T>(), dy.numel(), (T)a, (T)b));
  }

  void binary_impl(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, const Shape& sa,
                   const Shape& sb) override {
    CTX_DISPATCH_FLOAT(a.dtype(), binary_name(op),
                       ref::binary<T>(op, a.data<T>(), sa, b.data<T>(), sb, out.data<T>(), out.shape(),
                                      a.numel(), b.numel()));
  }

  void reduce_sum_impl(const Tensor& x, Tensor& out, const Shape& so) override {
    CTX_DISPATCH_FLOAT(x.dtype(), "reduce_sum",
                       ref::reduce_sum<T>(x.data<T>(), x.shape(), so, out.data<T>(), out.numel()));
  }

  void where_scalar_impl(const Tensor& mask, const Tensor& a, double b, Tensor& y, const Shape& sm) override {
    Shape ca = contiguous_strides(a.shape());
    CTX_DISPATCH_FLOAT(a.dtype(), "masked_fill", {
      const T* ap = a.data<T>();
      T* yp = y.data<T>();
      T bv = (T)b;
      CTX_DISPATCH_ALL(mask.dtype(), "masked_fill", {
        using M = T;
        const M* mp = mask.data<M>();
        ref::for_each_strided(a.shape(), sm, 0, ca, 0, [&](int64_t mi, int64_t i) {
          yp[i] = mp[mi] != M(0) ? bv : ap[i];
        });
      });
    });
  }

  void where_impl(const Tensor& mask, const Tensor& a, const Tensor& b, Tensor& y, const Shape& sm) override {
    Shape ca = contiguous_strides(a.shape());
    CTX_DISPATCH_FLOAT(a.dtype(), "where", {
      const T* ap = a.data<T>();
      const T* bp = b.data<T>();
      T* yp = y.data<T>();
      CTX_DISPATCH_ALL(mask.dtype(), "where", {
        using M = T;
        const M* mp = mask.data<M>();
        ref::for_each_strided(a.shape(), sm, 0, ca, 0, [&](int64_t mi, int64_t i) {
          yp[i] = mp[mi] != M(0) ? ap[i] : bp[i];
        });
      });
    });
  }

  void causal_fill_impl(Tensor& x, double value, int64_t diag, int64_t window) override {
    const int64_t T_ = x.size(-2), S = x.size(-1);
    const int64_t N = (T_ > 0 && S > 0) ? x.numel() / (T_ * S) : 0;
    CTX_DISPATCH_FLOAT(x.dtype(), "causal_mask",
                       ref::causal_fill<T>(x.data<T>(), N, T_, S, (T)value, diag, window));
  }

  void dropout_impl(const Tensor& x, const DropoutMask& m, Tensor& y) override {
    CTX_DISPATCH_FLOAT(x.dtype(), "dropout", dropout_fast<T>(x.data<T>(), y.data<T>(), x.numel(), m));
  }

  void gemm_impl(const GemmDesc& g, const Tensor& A, const Tensor& B, Tensor& C) override {
    if (A.dtype() == DType::F64) {
      gemm_reference<double>(g, A.data<double>(), B.data<double>(), C.data<double>());
      return;
    }
    if (gemm_precision() == Precision::BF16) {  // bf16 inputs: oneDNN's bf16 kernels (precision.h)
      // a weight's kept bf16 copy (made by its Linear's forward) is not converted again
      gemm_onednn_bf16(g, A.data<float>(), B.data<float>(), C.data<float>(), bf16_copy_if_kept(A),
                       bf16_copy_if_kept(B));
      return;
    }
    switch (current_gemm_impl(g)) {
      case GemmImpl::Reference: gemm_reference<float>(g, A.data<float>(), B.data<float>(), C.data<float>()); break;
      case GemmImpl::OneDNN: gemm_onednn(g, A.data<float>(), B.data<float>(), C.data<float>()); break;
      case GemmImpl::OpenBLAS: gemm_openblas(g, A.data<float>(), B.data<float>(), C.data<float>()); break;
    }
  }

  void softmax_impl(const Tensor& x, Tensor& y, bool log) override {
    if (x.numel() == 0) return;
    const int64_t C = x.size(-1), N = x.numel() / C;
    if (x.dtype() == DType::F32 && onednn_op_enabled(log ? "log_softmax" : "softmax") &&
        onednn_softmax_f32(x.data<float>(), y.data<float>(), N, C, log))
      return;
    CTX_DISPATCH_FLOAT(x.dtype(), "softmax", ref::softmax<T>(x.data<T>(), y.data<T>(), N, C, log));
  }

  void softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override {
    if (y.numel() == 0) return;
    const int64_t C = y.size(-1), N = y.numel() / C;
    if (y.dtype() == DType::F32 && onednn_op_enabled(log ? "log_softmax_backward" : "softmax_backward") &&
        onednn_softmax_backward_f32(y.data<float>(), dy.data<float>(), dx.data<float>(), N, C, log))
      return;
    CTX_DISPATCH_FLOAT(y.dtype(), "softmax_backward",
                       ref::softmax_backward<T>(y.data<T>(), dy.data<T>(), dx.data<T>(), N, C, log));
  }

  // f32: the vectorised masked softmax (core/cpu/softmax_fast.h: only the visible columns, one pass
  // per stage; 3.2x oneDNN's over -inf-filled rows for [8, 8, 256, 256], backward equal); else the
  // reference, which also reads only the visible columns.
  void causal_softmax_impl(const Tensor& x, Tensor& y, const CausalRows& rows) override {
    if (x.numel() == 0) return;
    const int64_t C = x.size(-1), N = x.numel() / C;
    if (x.dtype() == DType::F32) return causal_softmax_fast_f32(x.data<float>(), y.data<float>(), N, C, rows);
    CTX_DISPATCH_FLOAT(x.dtype(), "causal_softmax", ref::softmax<T>(x.data<T>(), y.data<T>(), N, C, false, rows));
  }

  void causal_softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx, const CausalRows& rows) override {
    if (y.numel() == 0) return;
    const int64_t C = y.size(-1), N = y.numel() / C;
    if (y.dtype() == DType::F32)
      return causal_softmax_backward_fast_f32(y.data<float>(), dy.data<float>(), dx.data<float>(), N, C, rows);
    CTX_DISPATCH_FLOAT(y.dtype(), "causal_softmax_backward",
                       ref::softmax_backward<T>(y.data<T>(), dy.data<T>(), dx.data<T>(), N, C, false, rows));
  }

  // a defined: the norm of h = x + a (Backend::add_layernorm) by the reference loop, which adds each
  // row in front of its norm while the row is in cache: 2.2x the add then oneDNN's layer norm at
  // [2048, 256] f32 (bench_norm; docs/cuda.md and docs/performance.md), and oneDNN has no residual input.
  void layernorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, double eps, Tensor& h,
                      Tensor& y, Tensor& mean, Tensor& rstd) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    // One row (a decode step): oneDNN's per-call cost (a primitive-cache lookup under its lock,
    // memory objects) is several times the work, and two threads of a decoding team contend for
    // the lock (docs/sampling.md); the plain loop runs it.
    if (x.dtype() == DType::F32 && !a.defined() && N > 1 && onednn_op_enabled("layernorm") &&
        onednn_layernorm_f32(x.data<float>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr,
                             (float)eps, y.data<float>(), mean.data<float>(), rstd.data<float>(), N, C))
      return;
    CTX_DISPATCH_FLOAT(x.dtype(), "layer_norm",
                       ref::layernorm<T>(x.data<T>(), w.data<T>(), b.defined() ? b.data<T>() : nullptr,
                                         (T)eps, y.data<T>(), mean.data<T>(), rstd.data<T>(), N, C,
                                         ptr_or_null<T>(a), ptr_or_null<T>(h)));
  }

  // dres defined: dx = dres + the gradient, in the reference loop (oneDNN's backward overwrites)
  void layernorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dres, Tensor& dx, Tensor& dw, Tensor& db) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    if (x.dtype() == DType::F32 && !dres.defined() && onednn_op_enabled("layernorm_backward") &&
        onednn_layernorm_backward_f32(dy.data<float>(), x.data<float>(), w.data<float>(), mean.data<float>(),
                                      rstd.data<float>(), dx.data<float>(), dw.data<float>(),
                                      db.defined() ? db.data<float>() : nullptr, N, C))
      return;
    CTX_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward",
                       ref::layernorm_backward<T>(dy.data<T>(), x.data<T>(), w.data<T>(), mean.data<T>(),
                                                  rstd.data<T>(), dx.data<T>(), dw.data<T>(),
                                                  db.defined() ? db.data<T>() : nullptr, N, C,
                                                  ptr_or_null<T>(dres)));
  }

  void rmsnorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, double eps, Tensor& h, Tensor& y,
                    Tensor& rstd) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    CTX_DISPATCH_FLOAT(x.dtype(), "rms_norm",
                       ref::rmsnorm<T>(x.data<T>(), w.data<T>(), (T)eps, y.data<T>(), rstd.data<T>(), N, C,
                                       ptr_or_null<T>(a), ptr_or_null<T>(h)));
  }

  void rmsnorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const Tensor& dres, Tensor& dx, Tensor& dw) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    CTX_DISPATCH_FLOAT(x.dtype(), "rms_norm_backward",
                       ref::rmsnorm_backward<T>(dy.data<T>(), x.data<T>(), w.data<T>(), rstd.data<T>(),
                                                dx.data<T>(), dw.data<T>(), N, C, ptr_or_null<T>(dres)));
  }

  // the target values in range (checks::targets_in_range), read where they are
  static void check_target_values(const char* op, const Tensor& logits, const Tensor& targets) {
    CTX_DISPATCH_INDEX(targets.dtype(), op,
                       checks::targets_in_range(op, targets.data<I>(), targets.numel(), logits, targets));
  }

  void cross_entropy_impl(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) override {
    check_target_values("cross_entropy", logits, targets);
    const int64_t N = logits.size(0), V = logits.size(1);
    CTX_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", {
      CTX_DISPATCH_INDEX(targets.dtype(), "cross_entropy",
                         ref::cross_entropy<T, I>(logits.data<T>(), targets.data<I>(), loss.data<T>(),
                                                  lse.data<T>(), N, V));
    });
  }

  void cross_entropy_backward_impl(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                   const Tensor& dloss, Tensor& dlogits) override {
    check_target_values("cross_entropy_backward", logits, targets);
    const int64_t N = logits.size(0), V = logits.size(1);
    CTX_DISPATCH_FLOAT(logits.dtype(), "cross_entropy_backward", {
      CTX_DISPATCH_INDEX(targets.dtype(), "cross_entropy_backward",
                         ref::cross_entropy_backward<T, I>(logits.data<T>(), targets.data<I>(),
                                                           lse.data<T>(), dloss.data<T>(),
                                                           dlogits.data<T>(), N, V));
    });
  }

  // the index values in [0, n) (checks::indices_in_range), read where they are
  static void check_index_values(const char* op, const Tensor& idx, int64_t n, const Tensor& x) {
    CTX_DISPATCH_INDEX(idx.dtype(), op, checks::indices_in_range(op, idx.data<I>(), idx.numel(), n, x, idx));
  }

  void index_select_impl(const Tensor& x, int64_t, const Tensor& idx, Tensor& out, const DimSplit& s) override {
    check_index_values("index_select", idx, s.n, x);
    const int64_t m = idx.numel();
    CTX_DISPATCH_ALL(x.dtype(), "index_select", {
      using X = T;
      CTX_DISPATCH_INDEX(idx.dtype(), "index_select",
                         ref::index_select<X, I>(x.data<X>(), idx.data<I>(), out.data<X>(), s.outer, s.n, m,
                                                 s.inner));
    });
  }

  void index_add_impl(Tensor& out, int64_t, const Tensor& idx, const Tensor& src, const DimSplit& s) override {
    check_index_values("index_add", idx, s.n, out);
    const int64_t m = idx.numel();
    CTX_DISPATCH_FLOAT(out.dtype(), "index_add", {
      using X = T;
      CTX_DISPATCH_INDEX(idx.dtype(), "index_add",
                         ref::index_add<X, I>(out.data<X>(), idx.data<I>(), src.data<X>(), s.outer, s.n, m,
                                              s.inner));
    });
  }

  void adamw_impl(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double b1, double b2, double eps,
                  double wd, int64_t step) override {
    CTX_DISPATCH_FLOAT(p.dtype(), "adamw",
                       ref::adamw<T>(p.data<T>(), g.data<T>(), m.data<T>(), v.data<T>(), p.numel(),
                                     lr, b1, b2, eps, wd, step));
  }

  // ---- fused methods (core/cpu/fused.h) ----
  void attention_forward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel) override {
    cpu::attention_forward(d, q, k, v, bias, out, lse, rel);
  }
  bool has_attention_stats() const override { return true; }
  std::unique_ptr<DecodeStep> make_decode_step_impl(const DecodeStack& s, int threads) override {
    return cpu::make_decode_step(s, threads);
  }
  void attention_forward_stats_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel,
                                    AttnRowStats& stats) override {
    cpu::attention_forward(d, q, k, v, bias, out, lse, rel, &stats);
  }
  void attention_backward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                               Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias, const AttnRel& rel,
                               AttnRelGrad& drel) override {
    cpu::attention_backward(d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, drel);
  }
  void rope_rotate_impl(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out, bool interleaved,
                        bool transpose) override {
    cpu::rope_rotate(x, C, S, out, interleaved, transpose);
  }
  void split_heads_impl(const Tensor& qkv, int64_t H, int64_t q_begin, Tensor& q, Tensor& k, Tensor& v) override {
    cpu::split_heads(qkv, H, q_begin, q, k, v);
  }
  void split_heads_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H, int64_t q_begin,
                                 Tensor& dqkv) override {
    cpu::split_heads_backward(dq, dk, dv, H, q_begin, dqkv);
  }
  void merge_heads_impl(const Tensor& o, Tensor& out) override { cpu::merge_heads(o, out); }
  void merge_heads_backward_impl(const Tensor& dout, Tensor& d_o) override { cpu::merge_heads_backward(dout, d_o); }
  void linear_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override { cpu::linear(x, w, b, y); }
  void sum_squares_impl(const Tensor& x, const std::vector<FlatChunk>& chunks, Tensor& out) override {
    cpu::sum_squares(x, chunks, out);
  }
  void adamw_flat_impl(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const std::vector<FlatChunk>& chunks,
                       const AdamWHyper& h, const Tensor& norm_sq) override {
    cpu::adamw_flat(p, g, m, v, chunks, h, norm_sq);
  }
};

}  // namespace
}  // namespace cpu

Backend& cpu_backend_instance() {
  static cpu::CpuBackend* b = new cpu::CpuBackend();
  return *b;
}

namespace {
// core's backend(Device::CPU) finds this backend through the registration (core names no backend)
[[maybe_unused]] const bool g_cpu_backend_registered = (register_default_backend(Device::CPU, &cpu_backend_instance), true);
}  // namespace

}  // namespace ctx
