// core/cuda/cuda_backend.cu — the CUDA kernels of core/backend.h (Backend::*_impl; the arguments
// are checked by Backend before they get here, core/backend_checks.h: the CPU backend's checks
// and messages): dispatches on dtype and calls the kernels of kernels.h.
// Index ranges (index_select / index_add indices, cross-entropy targets) are checked on the host:
// read from the indices' host mirror, or copied back (one synchronous copy of m integers) before
// any kernel reads them, so a bad index throws at the call with the CPU's message and nothing is
// written; index_add then plans its deterministic buckets on the host. Indices without a mirror
// whose writer proved their range (range_proven: Tensor::checked_bound) are not read on the host
// at all: no check, and index_add's plan is built on the device (index_plan.cu).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/backend_checks.h"
#include "core/cuda/attention.h"
#include "core/cuda/attention_tc.h"
#include "core/cuda/cuda_runtime.h"
#include "core/device_table.h"
#include "core/fast_paths.h"
#include "core/precision.h"
#include "core/cuda/dispatch.h"
#include "core/cuda/index_plan.h"
#include "core/cuda/kernels.h"

namespace ctx {
namespace cuda {
namespace {

// The index tensor's values on the host, as int64: from its host mirror when it was uploaded
// from a host table (token batches, relative-position tables: no copy, no wait), else one
// synchronous device -> host copy (indices computed on the device).
std::vector<int64_t> host_indices(const Tensor& idx, const char* op) {
  std::vector<int64_t> h((size_t)idx.numel());
  const Tensor mirror = idx.host_mirror();
  CTX_CUDA_DISPATCH_INDEX(idx.dtype(), op, {
    if (mirror.defined()) {
      const I* m = mirror.data<I>();
      std::copy(m, m + idx.numel(), h.begin());
    } else {
      std::vector<I> raw((size_t)idx.numel());
      if (!raw.empty()) copy_to_host(raw.data(), idx.raw(), raw.size() * sizeof(I));
      std::copy(raw.begin(), raw.end(), h.begin());
    }
  });
  return h;
}

template <class T>
T* ptr(Tensor& t) { return t.data<T>(); }
template <class T>
const T* ptr(const Tensor& t) { return t.data<T>(); }
template <class T>
const T* ptr_or_null(const Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }
template <class T>
T* ptr_or_null(Tensor& t) { return t.defined() ? t.data<T>() : nullptr; }

// Under --precision bf16, an f32 CUDA tensor's values rounded to bf16 and kept with its storage
// (Storage::bf16_copy, as the CPU keeps them: dropped by the storage's next mutable access), so
// that the GEMMs reading one tensor several times convert it once: a Linear's input (forward,
// then dw = dy^T x), its weight (forward, dx = dy w, every step until the optimizer writes it) and
// its output gradient (dx and dw; Backend::gemm_operand_reused), and the tensor-core attention's
// q, k, v (forward, then backward). A copy is the whole storage's: `make_up_to` is the largest
// storage, in elements, the caller lets it convert when there is no copy yet (kept_bf16_of_own: a
// tensor's numel, so only a tensor covering its storage); 0: only an existing copy is returned.
// Null where there is none to use.
std::mutex g_kept_mu;
std::atomic<uint64_t> g_kept_converted{0}, g_kept_written{0};  // kept_copy_stats
const uint16_t* kept_bf16(const Tensor& t, int64_t make_up_to) {
  if (gemm_precision() != Precision::BF16 || !t.defined() || t.dtype() != DType::F32 || t.device() != Device::CUDA ||
      t.numel() == 0)
    return nullptr;
  Storage& s = *t.storage();
  const int64_t n = (int64_t)(s.bytes / sizeof(float));
  if (!s.bf16_copy.load() && n <= make_up_to) {
    std::lock_guard<std::mutex> lock(g_kept_mu);
    if (!s.bf16_copy.load()) {
      auto* c = new Storage((size_t)n * sizeof(uint16_t), Device::CUDA);
      cuda::f32_to_bf16(static_cast<const float*>(s.data), static_cast<uint16_t*>(c->data), n);
      s.bf16_copy.store(c);
      ++g_kept_converted;
    }
  }
  const Storage* c = s.bf16_copy.load();
  return c ? static_cast<const uint16_t*>(c->data) + t.offset() : nullptr;
}
const uint16_t* kept_bf16_of_own(const Tensor& t) { return kept_bf16(t, t.defined() ? t.numel() : 0); }
// A kept copy for a kernel to fill while it writes its output (the cross-entropy's dlogits, which
// the LM head's two GEMMs read next; split_heads' q | k | v, which the tensor-core attention reads;
// merge_heads' backward dout): the copy's storage attached to the views' one storage, uninitialised,
// and its base (a view's elements at base + view.offset()), or null where none is kept (not bf16
// mode, not f32 on CUDA, views of different storages, or a storage with elements no view covers).
// Call after the views' mutable accesses (which drop an older copy) and before anything reads the
// copy. kept_copy_stats counts the copies made by conversion (kept_bf16) and by kernels (here).
uint16_t* kept_bf16_slot(std::initializer_list<const Tensor*> views) {
  const Tensor& t0 = **views.begin();
  if (gemm_precision() != Precision::BF16 || !t0.defined() || t0.dtype() != DType::F32 || t0.device() != Device::CUDA)
    return nullptr;
  int64_t covered = 0;
  for (const Tensor* v : views) {
    if (!v->defined() || v->storage() != t0.storage() || v->dtype() != DType::F32) return nullptr;
    covered += v->numel();
  }
  Storage& s = *t0.storage();
  const int64_t n = (int64_t)(s.bytes / sizeof(float));
  if (covered != n || n == 0) return nullptr;  // (the views do not overlap: each is a kernel's output)
  std::lock_guard<std::mutex> lock(g_kept_mu);
  s.drop_bf16_copy();
  auto* c = new Storage((size_t)n * sizeof(uint16_t), Device::CUDA);
  s.bf16_copy.store(c);
  ++g_kept_written;
  return static_cast<uint16_t*>(c->data);
}
uint16_t* kept_bf16_slot(Tensor& t) { return kept_bf16_slot({&t}); }
uint16_t* at_offset(uint16_t* base, const Tensor& t) { return base ? base + t.offset() : nullptr; }

class CudaBackend final : public Backend {
 public:
  CudaBackend() { ensure_allocator(); }
  Device device() const override { return Device::CUDA; }
  std::string name() const override { return "cuda"; }
  void synchronize() override { cuda::synchronize(); }
  bool can_capture() const override { return true; }
  void capture_begin() override { cuda::capture_begin(); }
  std::shared_ptr<CapturedWork> capture_end(bool keep) override {
    struct Work final : CapturedWork {
      std::shared_ptr<cuda::Graph> g;
      void replay() override { cuda::graph_replay(*g); }
    };
    std::shared_ptr<cuda::Graph> g = cuda::capture_end(keep);
    if (!g) return nullptr;
    auto w = std::make_shared<Work>();
    w->g = std::move(g);
    return w;
  }

  // ======== fused methods (all of them; attention in attention.cu) ========
  bool has(Fused) const override { return true; }
  // Measured on an H200 (docs/results/gpu.md, 2026-11-26): these SIMT FlashAttention kernels lose
  // to the composed path (cuBLAS batched GEMMs, mask, softmax) at every training shape timed:
  // GPT-2 small (B 8, H 12, T 1024) 452 -> 207 ms a step in fp32, 343 -> 93 ms in bf16; `small`
  // (B 8, T 256) 8.9 -> 5.7 / 7.5 -> 4.7 ms. The fused kernels stay where the composed path's
  // [B, H, T, S] scores would be large (over 2^27 elements, 512 MiB each in fp32: it keeps several
  // per layer for the backward) and for decoding (T == 1: they read the KV cache in place).
  static constexpr int64_t kComposedAttentionMaxScores = int64_t(1) << 27;
  // The tensor-core kernels win at every shape timed: on an H200 a GPT-2 small bf16 step took
  // 34.0 ms with them, 49.7 ms composed (docs/results/gpu.md). They take the plain calls (no bias,
  // no content-position terms, no dropout; or a distance table alone: alibi, kerple, sandwich, t5,
  // read in the kernels' tiles) under --precision bf16, on by default here
  // (CTXLAB_BF16_ATTENTION=0 turns them off): the composed path's GEMMs round the same q, k, p
  // and v to bf16 under that precision. The other calls keep the policy above.
  bool prefers_fused_attention(const AttnQuery& a) const override {
    if ((a.plain || a.dist_table) && tensor_core_attention_on() && cuda::tc_attention_shape_fits(a.B * a.H, a.Dh)) return true;
    return a.T == 1 || a.B * a.H * a.T * a.S > kComposedAttentionMaxScores;
  }
  static bool tensor_core_attention_on() {
    return gemm_precision() == Precision::BF16 && fast_path_enabled_or(FastPath::Bf16Attention, true);
  }

 protected:
  void fill_impl(Tensor& x, double v) override {
    CTX_CUDA_DISPATCH_ALL(x.dtype(), cuda::fill<T>(ptr<T>(x), x.numel(), (T)v));
  }

  void set_values_impl(Tensor& dst, const std::vector<int64_t>& values) override {
    cuda::set_values(dst.data<int64_t>(), values.data(), (int64_t)values.size());
  }

  void copy_strided_impl(const Tensor& src, const Strided& s, Tensor& dst, const Strided& d, const Shape& shape,
                         bool accumulate) override {
    const int64_t n = shape_numel(shape);
    // A destination that revisits an element (stride 0 over a dim > 1) is walked by one thread in
    // index order: the CPU's result, deterministic.
    bool overlap = false;
    for (size_t i = 0; i < shape.size(); ++i) overlap = overlap || (shape[i] > 1 && d.strides[i] == 0);
    const NdStrides<2> nd = make_nd<2>("copy_strided", shape, {&s.strides, &d.strides}, {s.offset, d.offset});
    CTX_CUDA_DISPATCH_ALL(src.dtype(),
                          cuda::copy_strided<T>(ptr<T>(src), ptr<T>(dst), nd, n, accumulate, overlap));
  }

  void convert_impl(const Tensor& src, Tensor& dst) override {
    CTX_CUDA_DISPATCH_ALL(src.dtype(), {
      using S = T;
      CTX_CUDA_DISPATCH_ALL(dst.dtype(), cuda::convert<S, T>(ptr<S>(src), ptr<T>(dst), src.numel()));
    });
  }

  // (bf16: the tanh GELU's output and its input gradient write their bf16 copies too: the MLP's
  // second Linear's input and its first Linear's output gradient, each read by two GEMMs)
  void unary_impl(UnaryOp op, const Tensor& x, Tensor& y, double a, double b) override {
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), unary_name(op), {
      T* yp = ptr<T>(y);
      cuda::unary<T>(op, ptr<T>(x), yp, x.numel(), (T)a, (T)b, op == UnaryOp::GeluTanh ? kept_bf16_slot(y) : nullptr);
    });
  }

  void unary_backward_impl(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx, double a,
                           double b) override {
    CTX_CUDA_DISPATCH_FLOAT(dy.dtype(), unary_name(op), {
      T* dxp = ptr<T>(dx);
      cuda::unary_backward<T>(op, ptr_or_null<T>(x), ptr_or_null<T>(y), ptr<T>(dy), dxp, dy.numel(), (T)a, (T)b,
                              op == UnaryOp::GeluTanh ? kept_bf16_slot(dx) : nullptr);
    });
  }

  void binary_impl(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, const Shape& sa,
                   const Shape& sb) override {
    const char* nm = binary_name(op);
    const NdStrides<2> nd = make_nd<2>(nm, out.shape(), {&sa, &sb}, {0, 0});
    CTX_CUDA_DISPATCH_FLOAT(a.dtype(), nm,
                            cuda::binary<T>(op, ptr<T>(a), ptr<T>(b), ptr<T>(out), nd, out.numel()));
  }

  void reduce_sum_impl(const Tensor& x, Tensor& out, const Shape& so) override {
    const Shape& xs = x.shape();
    // x's dims split into kept (walked by the output index, in out's order) and summed ones
    const Shape xst = contiguous_strides(xs);
    Shape kshape, rshape;
    std::vector<int64_t> kst, rst;
    int64_t no = 1, L = 1;
    for (size_t d = 0; d < xs.size(); ++d) {
      if (so[d] != 0 || xs[d] == 1) {
        kshape.push_back(xs[d]);
        kst.push_back(xst[d]);
        no *= xs[d];
      } else {
        rshape.push_back(xs[d]);
        rst.push_back(xst[d]);
        L *= xs[d];
      }
    }
    CTX_CHECK(no == out.numel(), "reduce_sum: out ", out.str(), " does not match x ", x.str());
    const NdStrides<1> kept = make_nd<1>("reduce_sum", kshape, {&kst}, {0});
    const NdStrides<1> red = make_nd<1>("reduce_sum", rshape, {&rst}, {0});
    if (kept.nd == 1 && kept.stride[0][0] == 1 && red.nd == 1 && red.stride[0][0] == no) {
      // x is [L, no] with the rows summed (a bias gradient): column sums, coalesced
      Tensor part = Tensor::empty({column_chunks(L), no}, x.dtype(), Device::CUDA);
      CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "reduce_sum",
                              cuda::column_sums<T>(ptr<T>(x), ptr<T>(part), ptr<T>(out), L, no));
      return;
    }
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "reduce_sum", cuda::reduce_sum<T>(ptr<T>(x), ptr<T>(out), kept, no, red, L));
  }

  // y = mask ? t : f over a's shape (mask broadcast with strides sm); t / f tensors or scalars
  void select(const char* op, const Tensor& mask, const Tensor& a, const Tensor* t, double ts, const Tensor* f,
              double fs, Tensor& y, const Shape& sm) {
    const NdStrides<1> nd = make_nd<1>(op, a.shape(), {&sm}, {0});
    CTX_CUDA_DISPATCH_FLOAT(a.dtype(), op, {
      using V = T;
      const V* tp = t ? ptr<V>(*t) : nullptr;
      const V* fp = f ? ptr<V>(*f) : nullptr;
      V* yp = ptr<V>(y);
      CTX_CUDA_DISPATCH_ALL(mask.dtype(),
                            cuda::select<V, T>(ptr<T>(mask), tp, (V)ts, fp, (V)fs, yp, nd, a.numel()));
    });
  }

  void where_scalar_impl(const Tensor& mask, const Tensor& a, double b, Tensor& y, const Shape& sm) override {
    select("masked_fill", mask, a, nullptr, b, &a, 0.0, y, sm);
  }

  void where_impl(const Tensor& mask, const Tensor& a, const Tensor& b, Tensor& y, const Shape& sm) override {
    select("where", mask, a, &a, 0.0, &b, 0.0, y, sm);
  }

  void causal_fill_impl(Tensor& x, double value, int64_t diag, int64_t window) override {
    const int64_t T_ = x.size(-2), S = x.size(-1);
    const int64_t N = (T_ > 0 && S > 0) ? x.numel() / (T_ * S) : 0;
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "causal_mask",
                            cuda::causal_fill<T>(ptr<T>(x), N, T_, S, (T)value, diag, window));
  }

  void dropout_impl(const Tensor& x, const DropoutMask& m, Tensor& y) override {
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "dropout", cuda::dropout<T>(ptr<T>(x), ptr<T>(y), x.numel(), m));
  }

  void gemm_impl(const GemmDesc& g, const Tensor& A, const Tensor& B, Tensor& C) override {
    const cuda::Bf16Operands kept{kept_bf16(A, 0), kept_bf16(B, 0)};  // before C's write access
    CTX_CUDA_DISPATCH_FLOAT(A.dtype(), "gemm", cuda::gemm<T>(g, ptr<T>(A), ptr<T>(B), ptr<T>(C), kept));
  }
  void gemm_operand_reused(const Tensor& t) override { kept_bf16_of_own(t); }

  void softmax_impl(const Tensor& x, Tensor& y, bool log) override {
    if (x.numel() == 0) return;
    const int64_t C = x.size(-1), N = x.numel() / C;
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "softmax", cuda::softmax<T>(ptr<T>(x), ptr<T>(y), N, C, log));
  }

  void softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) override {
    if (y.numel() == 0) return;
    const int64_t C = y.size(-1), N = y.numel() / C;
    CTX_CUDA_DISPATCH_FLOAT(y.dtype(), "softmax_backward",
                            cuda::softmax_backward<T>(ptr<T>(y), ptr<T>(dy), ptr<T>(dx), N, C, log));
  }

  void causal_softmax_impl(const Tensor& x, Tensor& y, const CausalRows& rows) override {
    if (x.numel() == 0) return;
    const int64_t C = x.size(-1), N = x.numel() / C;
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "causal_softmax",
                            cuda::softmax<T>(ptr<T>(x), ptr<T>(y), N, C, false, rows));
  }

  void causal_softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx, const CausalRows& rows) override {
    if (y.numel() == 0) return;
    const int64_t C = y.size(-1), N = y.numel() / C;
    CTX_CUDA_DISPATCH_FLOAT(y.dtype(), "causal_softmax_backward",
                            cuda::softmax_backward<T>(ptr<T>(y), ptr<T>(dy), ptr<T>(dx), N, C, false, rows));
  }

  // a defined: the norm of h = x + a, h written by the same kernel (Backend::add_layernorm)
  void layernorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, double eps, Tensor& h,
                      Tensor& y, Tensor& mean, Tensor& rstd) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "layer_norm", {
      T* yp = ptr<T>(y);  // (bf16: y's copy written too, the next Linear's input)
      cuda::layernorm<T>(ptr<T>(x), ptr<T>(w), ptr_or_null<T>(b), (T)eps, yp, ptr<T>(mean), ptr<T>(rstd), N, C,
                         kept_bf16_slot(y), ptr_or_null<T>(a), ptr_or_null<T>(h));
    });
  }

  void layernorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                               const Tensor& rstd, const Tensor& dres, Tensor& dx, Tensor& dw, Tensor& db) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    Tensor part = Tensor::empty({2, norm_part_chunks(N), C}, x.dtype(), Device::CUDA);
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward",
                            cuda::layernorm_backward<T>(ptr<T>(dy), ptr<T>(x), ptr<T>(w), ptr<T>(mean),
                                                        ptr<T>(rstd), ptr<T>(dx), ptr<T>(dw), ptr_or_null<T>(db),
                                                        ptr<T>(part), N, C, ptr_or_null<T>(dres)));
  }

  void rmsnorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, double eps, Tensor& h, Tensor& y,
                    Tensor& rstd) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "rms_norm", {
      T* yp = ptr<T>(y);  // (bf16: y's copy written too, the next Linear's input)
      cuda::rmsnorm<T>(ptr<T>(x), ptr<T>(w), (T)eps, yp, ptr<T>(rstd), N, C, kept_bf16_slot(y), ptr_or_null<T>(a),
                       ptr_or_null<T>(h));
    });
  }

  void rmsnorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const Tensor& dres, Tensor& dx, Tensor& dw) override {
    const int64_t C = x.size(-1), N = C ? x.numel() / C : 0;
    Tensor part = Tensor::empty({norm_part_chunks(N), C}, x.dtype(), Device::CUDA);
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "rms_norm_backward",
                            cuda::rmsnorm_backward<T>(ptr<T>(dy), ptr<T>(x), ptr<T>(w), ptr<T>(rstd), ptr<T>(dx),
                                                      ptr<T>(dw), ptr<T>(part), N, C, ptr_or_null<T>(dres)));
  }

  // the target values in range (checks::targets_in_range), read on the host; nothing to read where
  // the targets' writer proved them classes (range_proven to V: in range and none ignored)
  static void check_target_values(const char* op, const Tensor& logits, const Tensor& targets) {
    if (range_proven(targets, logits.size(1))) return;
    const std::vector<int64_t> t = host_indices(targets, op);
    checks::targets_in_range(op, t.data(), (int64_t)t.size(), logits, targets);
  }

  void cross_entropy_impl(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) override {
    check_target_values("cross_entropy", logits, targets);
    const int64_t N = logits.size(0), V = logits.size(1);
    CTX_CUDA_DISPATCH_FLOAT(logits.dtype(), "cross_entropy", {
      using F = T;
      CTX_CUDA_DISPATCH_INDEX(targets.dtype(), "cross_entropy",
                              cuda::cross_entropy<F, I>(ptr<F>(logits), ptr<I>(targets), ptr<F>(loss), ptr<F>(lse),
                                                        N, V));
    });
  }

  void cross_entropy_backward_impl(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                   const Tensor& dloss, Tensor& dlogits) override {
    check_target_values("cross_entropy_backward", logits, targets);
    const int64_t N = logits.size(0), V = logits.size(1);
    CTX_CUDA_DISPATCH_FLOAT(logits.dtype(), "cross_entropy_backward", {
      using F = T;
      F* dz = ptr<F>(dlogits);  // (its mutable access first: it drops any older kept copy)
      uint16_t* dz16 = kept_bf16_slot(dlogits);  // (dlogits spans its storage, or none is kept)
      CTX_CUDA_DISPATCH_INDEX(targets.dtype(), "cross_entropy_backward",
                              cuda::cross_entropy_backward<F, I>(ptr<F>(logits), ptr<I>(targets), ptr<F>(lse),
                                                                 ptr<F>(dloss), dz, dz16, N, V));
    });
  }

  // the index values on the host, checked to be in [0, n) (checks::indices_in_range)
  static std::vector<int64_t> checked_indices(const char* op, const Tensor& idx, int64_t n, const Tensor& x) {
    std::vector<int64_t> h = host_indices(idx, op);
    checks::indices_in_range(op, h.data(), (int64_t)h.size(), n, x, idx);
    return h;
  }

  void index_select_impl(const Tensor& x, int64_t, const Tensor& idx, Tensor& out, const DimSplit& s) override {
    if (!range_proven(idx, s.n)) checked_indices("index_select", idx, s.n, x);
    const int64_t m = idx.numel();
    CTX_CUDA_DISPATCH_ALL(x.dtype(), {
      using X = T;
      CTX_CUDA_DISPATCH_INDEX(idx.dtype(), "index_select",
                              cuda::index_select<X, I>(ptr<X>(x), ptr<I>(idx), ptr<X>(out), s.outer, s.n, m,
                                                       s.inner));
    });
  }

  // Buckets (index_plan.h): distinct target rows ascending, each with its source positions in index
  // order. Proven indices (no mirror, range_proven): planned on the device, no host round trip.
  // Otherwise planned on the host from the checked values: a kept index table (device_table:
  // positions, relative indices) has a kept plan; a batch's indices get theirs uploaded, capacity
  // plan_capacity(m) whatever U is (the same pool size class every step).
  void index_add_impl(Tensor& out, int64_t, const Tensor& idx, const Tensor& src, const DimSplit& s) override {
    const int64_t m = idx.numel(), outer = s.outer, n = s.n, inner = s.inner;
    const bool on_device = range_proven(idx, n);
    const std::vector<int64_t> h = on_device ? std::vector<int64_t>() : checked_indices("index_add", idx, n, out);
    if (m == 0 || outer * inner == 0) return;
    Tensor dplan;
    int64_t rows_bound = m;  // the grid's rows: m for a device plan (independent of U)
    if (on_device) {
      dplan = index_add_plan_device(idx, n);
    } else {
      const std::vector<int64_t> plan = index_add_plan_host(h, n);
      rows_bound = plan[0];
      if (idx.storage()->arena == Arena::Table) {
        dplan = device_table(Tensor::from_vector(plan, {(int64_t)plan.size()}), out);
      } else {
        dplan = Tensor::empty({plan_capacity(m)}, DType::I64, Device::CUDA);
        copy_to_device(dplan.raw(), plan.data(), plan.size() * sizeof(int64_t));
      }
    }
    const Tensor& plan_d = dplan;  // read-only from here (a kept table must not be written)
    CTX_CUDA_DISPATCH_FLOAT(out.dtype(), "index_add",
                            cuda::index_add<T>(ptr<T>(out), plan_d.data<int64_t>(), rows_bound, ptr<T>(src), outer, n,
                                               m, inner));
  }

  void adamw_impl(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, double lr, double b1, double b2, double eps,
                  double wd, int64_t step) override {
    AdamWHyper h;  // the step's constants as the flat AdamW's (adamw_step_terms)
    h.lr = lr, h.beta1 = b1, h.beta2 = b2, h.weight_decay = wd, h.step = step;
    const AdamWStepTerms st = adamw_step_terms(h);
    CTX_CUDA_DISPATCH_FLOAT(p.dtype(), "adamw",
                            cuda::adamw<T>(ptr<T>(p), ptr<T>(g), ptr<T>(m), ptr<T>(v), p.numel(), (T)st.decay,
                                           (T)b1, (T)b2, (T)eps, (T)st.step_size, (T)st.bc2_sqrt));
  }

  // ---- fused methods ----
  // The tensor-core kernels (bf16 products) under --precision bf16 unless CTXLAB_BF16_ATTENTION=0,
  // where they fit the call (attention_tc.h); the SIMT kernels otherwise. q, k, v's bf16 copies:
  // split_heads' (written with q | k | v), or, for a q or k of its own (rotated), converted by the
  // forward and kept; the backward reads the same copies.
  bool tensor_core_attention(const AttnDims& d, const Tensor& q, const Tensor& bias, const AttnRel& rel) const {
    return tensor_core_attention_on() && cuda::tc_attention_fits(d, q, bias, rel);
  }
  static cuda::TcBf16Inputs kept_qkv(const Tensor& q, const Tensor& k, const Tensor& v, bool make) {
    auto kept = [make](const Tensor& t) { return make ? kept_bf16_of_own(t) : kept_bf16(t, 0); };
    return {kept(q), kept(k), kept(v)};
  }
  // The distance table (AttnRel::dist_bias) is read in the tensor-core kernels' tiles; for the
  // SIMT kernels Backend expands it into a bias [H, T, S] (core/attention_dist_bias.h).
  bool reads_dist_bias(const AttnDims& d, const Tensor& q, const AttnRel& rel) const override {
    return tensor_core_attention(d, q, Tensor(), rel);
  }
  void attention_forward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel) override {
    if (tensor_core_attention(d, q, bias, rel))
      return cuda::tc_attention_forward(d, q, k, v, rel.dist_bias, out, lse, kept_qkv(q, k, v, true));
    cuda::attention_forward(d, q, k, v, bias, out, lse, rel);
  }
  void attention_backward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                               Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias, const AttnRel& rel,
                               AttnRelGrad& drel) override {
    if (tensor_core_attention(d, q, bias, rel))
      return cuda::tc_attention_backward(d, q, k, v, rel.dist_bias, out, lse, dout, dq, dk, dv, drel.ddist_bias,
                                         kept_qkv(q, k, v, false), kept_bf16(dout, 0));
    cuda::attention_backward(d, q, k, v, bias, out, lse, dout, dq, dk, dv, dbias, rel, drel);
  }

  void rope_rotate_impl(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out, bool interleaved,
                        bool transpose) override {
    if (x.numel() == 0) return;
    const int64_t d = x.size(-1), T_ = x.size(-2), R = x.numel() / (T_ * d);
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "rope_rotate",
                            cuda::rope_rotate<T>(ptr<T>(x), ptr<T>(C), ptr<T>(S), ptr<T>(out), R, T_, d, interleaved,
                                                 transpose));
  }

  // Under --precision bf16 the forward also writes q | k | v's bf16 copy (their one storage, as
  // autograd's split_heads makes them): the attention's GEMMs or tensor-core kernels read it.
  void split_heads_impl(const Tensor& qkv, int64_t H, int64_t q_begin, Tensor& q, Tensor& k, Tensor& v) override {
    const int64_t B = qkv.size(0), S = qkv.size(1), Dh = qkv.size(2) / (3 * H);
    CTX_CUDA_DISPATCH_FLOAT(qkv.dtype(), "split_heads", {
      T *pq = ptr<T>(q), *pk = ptr<T>(k), *pv = ptr<T>(v);  // (mutable accesses first: they drop older copies)
      uint16_t* c = kept_bf16_slot({&q, &k, &v});
      cuda::split_heads<T>(ptr<T>(qkv), pq, pk, pv, B, S, H, Dh, q_begin,
                           {at_offset(c, q), at_offset(c, k), at_offset(c, v)});
    });
  }

  // (bf16: dqkv's copy written too, the QKV Linear's output gradient)
  void split_heads_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H, int64_t q_begin,
                                 Tensor& dqkv) override {
    const int64_t B = dqkv.size(0), S = dqkv.size(1), Dh = dqkv.size(2) / (3 * H);
    CTX_CUDA_DISPATCH_FLOAT(dqkv.dtype(), "split_heads_backward", {
      T* dst = ptr<T>(dqkv);
      cuda::split_heads_backward<T>(ptr_or_null<T>(dq), ptr_or_null<T>(dk), ptr_or_null<T>(dv), dst, B, S, H, Dh,
                                    q_begin, kept_bf16_slot(dqkv));
    });
  }

  // (bf16: out's copy written too, the attention's output projection's input)
  void merge_heads_impl(const Tensor& o, Tensor& out) override {
    const int64_t B = o.size(0), H = o.size(1), Tn = o.size(2), Dh = o.size(3);
    CTX_CUDA_DISPATCH_FLOAT(o.dtype(), "merge_heads", {
      T* dst = ptr<T>(out);
      cuda::merge_heads<T>(ptr<T>(o), dst, B, H, Tn, Dh, true, kept_bf16_slot(out));
    });
  }

  // (bf16: d_o's copy written too, the attention backward's dout)
  void merge_heads_backward_impl(const Tensor& dout, Tensor& d_o) override {
    const int64_t B = d_o.size(0), H = d_o.size(1), Tn = d_o.size(2), Dh = d_o.size(3);
    CTX_CUDA_DISPATCH_FLOAT(d_o.dtype(), "merge_heads_backward", {
      T* dst = ptr<T>(d_o);
      cuda::merge_heads<T>(ptr<T>(dout), dst, B, H, Tn, Dh, false, kept_bf16_slot(d_o));
    });
  }

  // y = x w^T + b. The speed modes (bf16, tf32: cuBLASLt) add b in the GEMM's epilogue (one write
  // of y); exact fp32 (and f64) broadcast b into y, then y += x w^T (gemm with beta = 1; cuBLAS
  // adds the bias in the same rounding).
  void linear_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const int64_t N = w.size(0), K = w.size(1);
    const int64_t R = K ? x.numel() / K : shape_numel(Shape(x.shape().begin(), x.shape().end() - 1));
    GemmDesc g;
    g.trans_b = true;
    g.M = R;
    g.N = N;
    g.K = K;
    // x and w keep their bf16 copies (bf16 mode): the backward's dw and dx read them again
    const cuda::Bf16Operands kept{kept_bf16_of_own(x), kept_bf16_of_own(w)};
    if (x.dtype() == DType::F32 &&
        cuda::gemm_bias_epilogue(g, ptr<float>(x), ptr<float>(w), ptr<float>(b), ptr<float>(y), kept))
      return;
    Strided s, d;
    s.strides = {0, 1};
    d.strides = {N, 1};
    copy_strided(b, s, y, d, {R, N}, false);
    g.beta = 1.f;
    gemm(g, x, w, y);
  }

  // The MLP's GELU in the speed modes' GEMM epilogues (GELU_AUX_BIAS forward, DGELU backward, then
  // the bias gradient by reduce_sum's column sums: no separate GELU pass either way); the base
  // composition elsewhere (exact fp32, f64, and where cuBLASLt has no algorithm for the epilogue).
  void linear_gelu_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& pre, Tensor& h) override {
    const int64_t N = w.size(0), K = w.size(1);
    GemmDesc g;
    g.trans_b = true;
    g.M = K ? x.numel() / K : 0;
    g.N = N;
    g.K = K;
    if (x.dtype() == DType::F32) {
      const cuda::Bf16Operands kept{kept_bf16_of_own(x), kept_bf16_of_own(w)};
      if (cuda::gemm_gelu_aux_bias(g, ptr<float>(x), ptr<float>(w), ptr<float>(b), ptr<float>(pre), ptr<float>(h),
                                   kept))
        return;
    }
    Backend::linear_gelu_impl(x, w, b, pre, h);
  }
  void gemm_dgelu_impl(const GemmDesc& g, const Tensor& A, const Tensor& B, const Tensor& pre, Tensor& dpre,
                       Tensor& dbias) override {
    if (A.dtype() == DType::F32) {
      const cuda::Bf16Operands kept{kept_bf16(A, 0), kept_bf16_of_own(B)};  // B: a weight, read again by dx
      if (cuda::gemm_dgelu(g, ptr<float>(A), ptr<float>(B), ptr<float>(pre), ptr<float>(dpre), kept)) {
        if (dbias.defined()) reduce_sum(dpre.view({g.M, g.N}), dbias);
        return;
      }
    }
    Backend::gemm_dgelu_impl(g, A, B, pre, dpre, dbias);
  }

  // The tiles of kernels.h (begin, end, decay), at most kFlatTile elements each, in chunk order,
  // as one i64 tensor kept on the device (device_table: the chunks are the same every step).
  static Tensor upload_tiles(const std::vector<FlatChunk>& chunks, const Tensor& x, int64_t& ntiles) {
    std::vector<int64_t> t;
    for (const FlatChunk& c : chunks) {
      for (int64_t b = c.begin; b < c.end; b += kFlatTile) {
        t.push_back(b);
        t.push_back(std::min(c.end, b + kFlatTile));
        t.push_back(c.decay ? 1 : 0);
      }
    }
    ntiles = (int64_t)t.size() / 3;
    if (t.empty()) t.push_back(0);
    return device_table(Tensor::from_vector(t, {(int64_t)t.size()}), x);
  }

  void sum_squares_impl(const Tensor& x, const std::vector<FlatChunk>& chunks, Tensor& out) override {
    int64_t ntiles = 0;
    const Tensor tiles = upload_tiles(chunks, x, ntiles);
    Tensor part = Tensor::empty({std::max<int64_t>(1, ntiles)}, DType::F64, Device::CUDA);
    CTX_CUDA_DISPATCH_FLOAT(x.dtype(), "sum_squares",
                            cuda::sum_squares_tiles<T>(ptr<T>(x), tiles.data<int64_t>(), ntiles, part.data<double>(),
                                                       out.data<double>()));
  }

  void adamw_flat_impl(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const std::vector<FlatChunk>& chunks,
                       const AdamWHyper& h, const Tensor& norm_sq) override {
    const bool clip = norm_sq.defined() && h.max_norm > 0;
    int64_t ntiles = 0;
    const Tensor tiles = upload_tiles(chunks, p, ntiles);
    const double* ns = clip ? norm_sq.data<double>() : nullptr;
    // bf16: the flat parameters' copy written with the update when the chunks cover p's whole
    // storage (every element then gets its rounding), so that each weight (a view of p) is read by
    // its GEMMs from this copy instead of converted twice a step (kept_bf16 serves a view of it)
    int64_t covered = 0;
    for (const FlatChunk& c : chunks) covered += c.end - c.begin;
    const bool whole = p.spans_storage() && covered == p.numel();
    CTX_CUDA_DISPATCH_FLOAT(p.dtype(), "adamw_flat", {
      T* pp = ptr<T>(p);  // (the mutable access first: it drops the copy of the old values)
      cuda::adamw_tiles<T>(pp, ptr<T>(g), ptr<T>(m), ptr<T>(v), tiles.data<int64_t>(), ntiles, ns, h,
                           whole ? kept_bf16_slot(p) : nullptr);
    });
  }
};

}  // namespace

KeptCopyStats kept_copy_stats() { return {g_kept_converted.load(), g_kept_written.load()}; }

}  // namespace cuda

Backend& cuda_backend_instance() {
  static cuda::CudaBackend* b = new cuda::CudaBackend();
  return *b;
}

}  // namespace ctx
