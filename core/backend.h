// core/backend.h — the typed backend interface: every kernel that autograd, nn, posenc and train
// run goes through these methods. One implementation per device (core/cpu/, core/cuda/).
// Two kinds of methods:
//   primitives                 every backend has them; everything can be composed from them;
//   fused methods (`Fused`)    one pass for what would otherwise be several primitives (attention,
//                              rotary rotation, head split / merge, linear with its bias, flat
//                              AdamW). A backend reports which it has with has(Fused); callers
//                              ask use_fused (core/fast_paths.h: the switch and has()) and
//                              otherwise run the composition of primitives. Called where has()
//                              is false they throw "<method>: not supported by backend X".
// Each method is written once here, non-virtual: it runs the op's argument checks (shapes,
// dtypes, devices, the output's shape: core/backend_checks.h, one function per op, the same
// message on every device), then the device's kernel, the protected virtual <method>_impl that a
// backend overrides. A new device adds only its kernels. What the checks derive for the kernel
// (broadcast strides, the causal rows, the index split) is passed on; index values, which only
// the device can read, are range-checked by the kernel with checks::*_in_range (same message).
// All tensors passed in are contiguous and on the backend's device; outputs are allocated by the
// caller with the right shape, dtype and device. Float methods accept f32 and f64 (the CUDA
// backend may accept f32 only and say so); index tensors are i32 or i64.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/causal_rows.h"
#include "core/decode_step.h"
#include "core/dropout_mask.h"
#include "core/tensor.h"

namespace ctx {

// The unary ops, one line each: X(enum value, name, exact). `exact`: the result is correctly
// rounded (no transcendental function), so every device gives the same bits and the backend test
// table compares them exactly. What each computes, and its derivative, is written once in
// core/elementwise_formulas.h; the backend table (tests/test_backend_ops.cpp) runs every entry
// on every device. docs/architecture.md, "Recipe: add an elementwise op".
#define CTX_UNARY_OPS(X)                                                                   \
  X(Neg, "neg", true)             /* -x */                                               \
  X(Scale, "scale", true)         /* a * x */                                            \
  X(AddScalar, "add_scalar", true) /* x + a */                                           \
  X(Exp, "exp", false)                                                                   \
  X(Log, "log", false)                                                                   \
  X(Tanh, "tanh", false)                                                                 \
  X(Sin, "sin", false)                                                                   \
  X(Cos, "cos", false)                                                                   \
  X(Sqrt, "sqrt", false)                                                                 \
  X(Relu, "relu", true)                                                                  \
  X(GeluTanh, "gelu_tanh", false) /* 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) */   \
  X(Pow, "pow", false)            /* x^a */                                              \
  X(Clamp, "clamp", true)         /* min(max(x, a), b) */                                \
  X(Square, "square", true)       /* x^2 */

enum class UnaryOp {
#define CTX_UNARY_ENUM(op, name, exact) op,
  CTX_UNARY_OPS(CTX_UNARY_ENUM)
#undef CTX_UNARY_ENUM
};
// Every unary op, in enum order.
inline constexpr UnaryOp kUnaryOps[] = {
#define CTX_UNARY_VALUE(op, name, exact) UnaryOp::op,
    CTX_UNARY_OPS(CTX_UNARY_VALUE)
#undef CTX_UNARY_VALUE
};
const char* unary_name(UnaryOp op);
bool unary_exact(UnaryOp op);  // the list's `exact`

enum class BinaryOp { Add, Sub, Mul, Div };
const char* binary_name(BinaryOp op);

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b < batch; row-major matrices.
// op(A) is [M, K] (A stored [K, M] when trans_a), op(B) is [K, N] (B stored [N, K] when trans_b).
// stride_a / stride_b are element strides between batch items; 0 broadcasts one matrix.
struct GemmDesc {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  double alpha = 1.0, beta = 0.0;  // each backend rounds them to the GEMM's type (exact for f64)
};

// A strided view description for copy_strided (element units, relative to the tensor's data).
struct Strided {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

// A tensor viewed as [outer, n, inner] around one dim (index_select / index_add).
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

// ---- argument types of the fused methods ----

// The fused methods a backend may have (has(Fused)).
enum class Fused {
  Attention,  // attention_forward / attention_backward
  Rope,       // rope_rotate
  Heads,      // split_heads / split_heads_backward / merge_heads / merge_heads_backward
  Linear,     // linear (the backward is gemm + reduce_sum)
  FlatAdamW,  // sum_squares / adamw_flat
};
// "attention", "rope", "heads", "linear", "flat_adamw"
const char* fused_name(Fused f);

// What the attention layer knows of a call when it chooses between the fused and the composed
// path (Backend::prefers_fused_attention): the sizes, and whether the scores are q . k alone,
// masked (plain: no bias, no content-position terms, no dropout), so that kernels which take only
// the mask (CUDA's tensor-core attention) can be preferred where they apply.
// dist_table: the scores are q . k plus a distance-table bias alone (AttnRel::dist_bias: alibi,
// kerple, sandwich, t5 in their common case), no other term and no dropout.
struct AttnQuery {
  int64_t B = 0, H = 0, T = 0, S = 0, Dh = 0;
  bool plain = false;
  bool dist_table = false;
};

// Sizes of one causal attention call. Query i (0 <= i < T) sits at key position i + (S - T)
// (queries are the last T positions) and sees key j iff j <= i + (S - T) and, when window > 0,
// also j > i + (S - T) - window (at most `window` keys, its own included).
struct AttnDims {
  int64_t B = 0, H = 0, T = 0, S = 0, Dh = 0;
  int64_t window = 0;  // 0: full causal attention
  double scale = 1.0;  // multiplies q . k (and the relative terms), not the bias
  // Rows per (b, h) in k and v (and dk, dv): k, v are [B, H, kv_rows, Dh] of which the first S
  // rows are the keys (a decoding step reads the KV cache's buffers in place); 0: S.
  int64_t kv_rows = 0;
  int64_t kv_stride() const { return kv_rows > 0 ? kv_rows : S; }
  // Dropout on the probabilities (training; inactive by default): o_i = sum_j p_ij z_ij (v_j + ...)
  // with z_ij = dropout.factor(((b * H + h) * T + i) * S + j), the mask dropout() would draw for
  // p [B, H, T, S] with the same seed; the logsumexp is that of the undropped p.
  DropoutMask dropout;
};

// Content-position terms of attention (shaw, xl, deberta, tupe), each optional (undefined:
// absent). Per (b, h):
//   logit_ij = scale * (q_i . k_j + qrel[i, qidx[i, j]] + krel[j, kidx[i, j]]) + bias[i, j]
//   o_i      = sum_j p_ij (v_j + vrel[qidx[i, j]])
// qrel / krel hold one column per relative index (a small GEMM against a table, computed by the
// caller); the kernels gather from them inside their tiles, so no [T, S] term is built.
// Index values are in range (the caller checks them where they are built, on the host).
struct AttnRel {
  int64_t Rq = 0, Rk = 0;  // columns of qrel (= rows of vrel) and of krel; 0 when absent
  Tensor qidx;  // i32 [T, S], values in [0, Rq): needed by qrel and vrel
  Tensor qrel;  // [B, H, T, Rq], q's dtype
  Tensor vrel;  // [Rq, Dh], shared by the batch and the heads
  Tensor kidx;  // i32 [T, S], values in [0, Rk)
  Tensor krel;  // [B, H, S, Rk]
  // A bias by distance (alibi, kerple, sandwich, t5: posenc/bias.cpp), read from a per-head table
  // instead of an [H, T, S] tensor: dist_bias [H, n] (q's dtype, n >= S; the bias argument must
  // then be undefined). For every visible (i, j) of every batch row:
  //   logit_ij += dist_bias[h, i + (S - T) - j]
  // i + (S - T) is query i's key position (AttnDims: queries are the last T of S positions, as
  // bias.cpp's distances() has it with q_pos0 = S - T, k_pos0 = 0), so the distance is in
  // [0, S) for a visible key (within [0, window) under a window); entries from S on are unread.
  // Not multiplied by scale. A backend reads it in its tiles where reads_dist_bias() says so;
  // else Backend expands it into the bias [H, T, S] (and reduces dbias by diagonals).
  Tensor dist_bias;
  bool empty() const { return !qrel.defined() && !vrel.defined() && !krel.defined() && !dist_bias.defined(); }
};
// Per-query-row statistics of the attention probabilities: an optional output of
// attention_forward (ctxlab eval --attn-stats, docs/evaluation.md). rows [B, H, T, 3], q's dtype
// and device, per query i (at key position i + S - T) of the undropped probabilities p_ij:
//   [0] entropy        -sum_j p_ij log p_ij (nats)
//   [1] sink mass      sum of p_ij over the first `sink_keys` keys (j < sink_keys)
//   [2] mean distance  sum_j p_ij (i + S - T - j)
// (all 0 for a row that sees no key with a finite logit).
struct AttnRowStats {
  int64_t sink_keys = 4;
  Tensor rows;  // written by attention_forward
};

// The gradients of AttnRel's tensors that attention_backward writes (overwritten; undefined:
// not wanted). Shapes as the matching AttnRel fields.
struct AttnRelGrad {
  Tensor dqrel;  // [B, H, T, Rq]
  Tensor dkrel;  // [B, H, S, Rk]
  Tensor dvrel;  // [Rq, Dh]
  // [H, n] like dist_bias: entry (h, r) = the sum of dL/dlogit over the batch and every visible
  // (i, j) with i + (S - T) - j = r (0 for r >= S)
  Tensor ddist_bias;
};

// One piece of a flat parameter buffer for sum_squares / adamw_flat: elements [begin, end)
// updated with (decay) or without weight decay. Chunks do not overlap.
struct FlatChunk {
  int64_t begin = 0, end = 0;
  bool decay = false;
};

// Hyper-parameters of one AdamW step (PyTorch AdamW semantics, decoupled weight decay).
// The gradient is read as gs * g (rounded to the dtype), gs = grad_scale * clip, where
// clip = max_norm / (sqrt(norm_sq) + 1e-6) when norm_sq (adamw_flat's argument) is defined,
// max_norm > 0 and sqrt(norm_sq) > max_norm, else 1 (clip_grad_norm's factor).
struct AdamWHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 1e-2;
  int64_t step = 1;  // 1-based (bias corrections)
  double grad_scale = 1.0;
  double max_norm = 0.0;  // <= 0: no clipping
  // Optional f64 [3] on the parameters' device holding this step's adamw_step_terms (decay,
  // bc2_sqrt, step_size), written by the caller before the step: adamw_flat then reads them there
  // and ignores lr and step. A step captured into a CUDA Graph (core/step_graph.h) replays with
  // the constants of the step being replayed, not those baked in at the capture.
  Tensor terms;
};

// The step-dependent constants of an AdamW step, as every backend computes them (PyTorch's
// formulas): decay = 1 - lr wd (a chunk without decay multiplies by 1), bc2_sqrt = sqrt(1 -
// beta2^step), step_size = lr / (1 - beta1^step).
struct AdamWStepTerms {
  double decay = 1, bc2_sqrt = 1, step_size = 0;
};
AdamWStepTerms adamw_step_terms(const AdamWHyper& h);

// A device's queued work, recorded once (Backend::capture_end) and replayed (a CUDA Graph on
// CUDA): the same kernels with the same pointers and arguments each time. core/step_graph.h is
// the way to use it.
struct CapturedWork {
  virtual ~CapturedWork() = default;
  virtual void replay() = 0;  // queues the recorded work again (the host does not wait)
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;
  // Waits until every operation queued on this device has finished (timing; the CPU backend
  // runs synchronously and returns at once).
  virtual void synchronize() {}
  // Recording (core/step_graph.h): whether this device can record its queued work and replay it;
  // capture_begin starts recording (the work queued from then on is recorded, not run), and
  // capture_end stops it and returns the recording (keep = false: abandons it, after an error in
  // the recorded code). The defaults throw: the CPU runs its work as it is called.
  virtual bool can_capture() const { return false; }
  virtual void capture_begin();
  virtual std::shared_ptr<CapturedWork> capture_end(bool keep);

  // --- memory ---
  void fill(Tensor& x, double value);
  // dst[i] = values[i] for i < values.size() (dst: i64 with at least that many elements): a few
  // values written as kernel arguments, not copied from the host (a recorded step's dropout seeds
  // before each replay, core/step_graph.h).
  void set_values(Tensor& dst, const std::vector<int64_t>& values);
  // dst[idx] (+)= src[s.offset + sum idx_d * s.strides_d] over `shape`, dst through d (same
  // shape). Covers permute (permuted strides), broadcast (stride 0), slices and concat.
  void copy_strided(const Tensor& src, const Strided& s, Tensor& dst, const Strided& d,
                    const Shape& shape, bool accumulate);
  void convert(const Tensor& src, Tensor& dst);  // dtype conversion, same numel

  // --- elementwise ---
  void unary(UnaryOp op, const Tensor& x, Tensor& y, double a = 0, double b = 0);
  // dx = dy * f'(x) (y = f(x) is passed for ops whose derivative is cheaper from y)
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                      Tensor& dx, double a = 0, double b = 0);
  // out = a op b with NumPy broadcasting (shapes right-aligned; out has the broadcast shape).
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out);
  // out = sum of x over the dims where out's (keepdim) shape is 1 and x's is not.
  void reduce_sum(const Tensor& x, Tensor& out);
  // y = where(mask != 0, a, b_scalar)  (masked fill), mask broadcast like binary
  void where_scalar(const Tensor& mask, const Tensor& a, double b, Tensor& y);
  void where(const Tensor& mask, const Tensor& a, const Tensor& b, Tensor& y);
  // x[..., i, j] = value where j > i + diag, x viewed as [N, T, S]; window > 0 also fills
  // j <= i + diag - window (sliding-window attention of width `window`)
  void causal_fill(Tensor& x, double value, int64_t diag, int64_t window = 0);
  // y = x * m.factor(i): dropout with a mask recomputed from its seed (core/dropout_mask.h);
  // the backward is the same call on dy. y may be x.
  void dropout(const Tensor& x, const DropoutMask& m, Tensor& y);

  // --- linear algebra ---
  void gemm(const GemmDesc& g, const Tensor& A, const Tensor& B, Tensor& C);
  // A hint that `t` is about to be an input of several GEMMs (a Linear's output gradient: its dx
  // and dw). A backend whose GEMMs convert their inputs (the CPU under --precision bf16) converts
  // it once now and keeps the copy with t's storage until the storage is written. Base: nothing.
  virtual void gemm_operand_reused(const Tensor&) {}

  // --- normalisation / softmax (over the last dim; x viewed as [N, C]) ---
  void softmax(const Tensor& x, Tensor& y, bool log);
  void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log);
  // The attention probabilities of the composed path in one pass: x, y [..., T, S], y[..., i, :] =
  // softmax over the keys query i sees (j <= i + diag; window > 0: also j > i + diag - window,
  // core/causal_rows.h), 0 on the others; equal to causal_fill(-inf) then softmax. y may be x.
  void causal_softmax(const Tensor& x, Tensor& y, int64_t diag, int64_t window);
  // dx = y (dy - <dy, y>) over each row's visible keys, 0 on the others (y: causal_softmax's)
  void causal_softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, int64_t diag,
                               int64_t window);
  // y = (x - mean) * rstd * w + b; saves mean, rstd [N]. b may be undefined (no bias).
  void layernorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y,
                 Tensor& mean, Tensor& rstd);
  // dx = dres + the input's gradient (dres undefined: dx overwritten; dres may be dx itself: the
  // residual stream's gradient summed in place, FastPath::AddNorm); dw, db accumulated (+=); db
  // may be undefined.
  void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                          const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dw,
                          Tensor& db, const Tensor& dres = Tensor());
  void rmsnorm(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd);
  // dx = dres + the input's gradient, as layernorm_backward
  void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                        const Tensor& rstd, Tensor& dx, Tensor& dw, const Tensor& dres = Tensor());
  // The residual add fused into the norm after it (FastPath::AddNorm): h = x + a (a of x's shape),
  // then y = layernorm(h) / rmsnorm(h), in one pass that reads x and a and writes h and y; h, y,
  // mean and rstd equal add() then layernorm() / rmsnorm() (tests/test_backend_ops.cpp).
  void add_layernorm(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, double eps,
                     Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd);
  void add_rmsnorm(const Tensor& x, const Tensor& a, const Tensor& w, double eps, Tensor& h, Tensor& y,
                   Tensor& rstd);

  // --- losses ---
  // logits [N, V], targets [N] (i32/i64, < 0 = ignored): loss[n] = lse - logit[target], lse [N]
  void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& loss,
                     Tensor& lse);
  // dlogits[n] = dloss[n] * (softmax(logits[n]) - onehot(target[n]))
  void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                              const Tensor& lse, const Tensor& dloss, Tensor& dlogits);

  // --- indexing (x viewed as [outer, n, inner] around dim) ---
  // out[o, i, r] = x[o, idx[i], r]; indices are range-checked (error names op and value).
  void index_select(const Tensor& x, int64_t dim, const Tensor& idx, Tensor& out);
  // out[o, idx[i], r] += src[o, i, r]  (scatter-add)
  void index_add(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src);

  // --- optimizer ---
  // Decoupled-weight-decay Adam over flat buffers (PyTorch AdamW semantics).
  void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr,
             double beta1, double beta2, double eps, double weight_decay,
             int64_t step);

  // --- a whole decoding step (FastPath::DecodeStep; core/decode_step.h) ---
  // A step of the stack s for `threads` host threads, its buffers made now; s is checked here
  // (every tensor on this device, f32, the shapes above). Null where this backend has no
  // whole-step decoder for s (base: none; the CPU's needs its GEMV kernels): the caller then runs
  // the step op by op (nn/decode_engine.cpp), with the same results.
  std::unique_ptr<DecodeStep> make_decode_step(const DecodeStack& s, int threads);

  // ======== fused methods: call only when has() says so ========
  virtual bool has(Fused f) const;  // base: none
  // Whether the fused attention is also the faster choice for the call `a` (q [B, H, T, Dh]
  // against S keys; a.plain: no score bias, no content-position terms, no dropout): a measured
  // per-backend policy (base: whenever has(Fused::Attention)). nn/attention.cpp asks it unless the
  // fused path was asked for explicitly (CTXLAB_FUSED_ATTENTION=1).
  virtual bool prefers_fused_attention(const AttnQuery& a) const;
  // Whether attention_forward_impl / _backward_impl take rel.dist_bias themselves for this call
  // (base: no). Otherwise attention_forward / _backward expand it into the bias [H, T, S] by
  // index_select before the call and reduce dbias into ddist_bias by index_add after it
  // (core/attention_dist_bias.h), so every backend with a bias path accepts the contract.
  virtual bool reads_dist_bias(const AttnDims& d, const Tensor& q, const AttnRel& rel) const;

  // --- causal attention (Fused::Attention), FlashAttention-2 style: the [T, S] probabilities
  // are never stored ---
  // q [B, H, T, Dh]; k, v [B, H, S, Dh]; bias undefined or [H, T, S] / [1, H, T, S] (shared by
  // the batch).
  // Writes out [B, H, T, Dh] = softmax(scale * q k^T + rel terms + bias, masked) (v + rel.vrel)
  // and lse [B, H, T] (q's dtype): the logsumexp of each row's masked logits (+inf for a row
  // that sees no finite logit; its output is then 0).
  // stats: when given, also its rows (AttnRowStats, allocated here) from the same pass; only
  // where has_attention_stats() (the CPU kernels; elsewhere the caller composes, see
  // autograd/ops_attention.h attention_row_stats).
  void attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k,
                         const Tensor& v, const Tensor& bias, Tensor& out, Tensor& lse,
                         const AttnRel& rel, AttnRowStats* stats = nullptr);
  virtual bool has_attention_stats() const { return false; }
  // Given dout = dL/dout [B, H, T, Dh] and the forward's out and lse: overwrites dq
  // [B, H, T, Dh], dk, dv [B, H, S, Dh]; dbias [H, T, S] or [1, H, T, S] (summed over the batch)
  // when defined; and drel's defined fields.
  void attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& bias, const Tensor& out,
                          const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                          Tensor& dv, Tensor& dbias, const AttnRel& rel,
                          AttnRelGrad& drel);

  // --- rotary rotation (Fused::Rope) ---
  // x, out [..., T, d] (d even; out may not alias x); C, S [T, d/2] (x's dtype). Each pair
  // (a, b) of row t, pairs (k, k + d/2) or, when interleaved, (2k, 2k + 1):
  //   a' = a C[t, k] - b S[t, k],  b' = b C[t, k] + a S[t, k]
  // transpose: the inverse rotation (S negated), which is the backward of the forward.
  void rope_rotate(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out,
                   bool interleaved, bool transpose);

  // --- attention head split / merge (Fused::Heads); D = H * Dh ---
  // qkv [B, S, 3D] (q | k | v column blocks; head h = cols h*Dh.. of each) ->
  //   q [B, H, S - q_begin, Dh] (rows q_begin..S-1), k, v [B, H, S, Dh]  (each overwritten)
  void split_heads(const Tensor& qkv, int64_t H, int64_t q_begin, Tensor& q, Tensor& k,
                   Tensor& v);
  // The transpose: dqkv [B, S, 3D] overwritten from dq, dk, dv (shapes as above; an undefined
  // one reads as zeros, and so do the q columns of rows < q_begin).
  void split_heads_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            int64_t H, int64_t q_begin, Tensor& dqkv);
  // o [B, H, T, Dh] -> out [B, T, H * Dh] (head h in cols h*Dh..).
  void merge_heads(const Tensor& o, Tensor& out);
  // dout [B, T, H * Dh] -> do [B, H, T, Dh] (do's shape gives H).
  void merge_heads_backward(const Tensor& dout, Tensor& d_o);

  // --- Linear forward with the bias inside the GEMM (Fused::Linear) ---
  // x [R, K] (any leading shape, viewed as R rows), w [N, K], b [N] -> y [R, N] = x w^T + b.
  // (The backward needs only gemm and reduce_sum: dx = dy w, dw = dy^T x, db = sum of dy rows.)
  void linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  // The MLP's up-projection and its activation (the MLP node, autograd/ops_linear.cpp):
  // pre [R, N] = x w^T + b and h [R, N] = gelu_tanh(pre), pre kept for the backward. Base: linear,
  // then the GeluTanh unary (CUDA's speed modes: one cuBLASLt GEMM, GELU_AUX_BIAS epilogue).
  void linear_gelu(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& pre, Tensor& h);
  // The MLP's backward through the GELU: dpre [M, N] = (op(A) op(B)) * gelu_tanh'(pre) (g as gemm's,
  // one batch item, beta 0) and, when dbias is defined, dbias [N] = the column sums of dpre
  // (overwritten). Base: gemm, the GeluTanh unary backward, reduce_sum (CUDA's speed modes: one
  // cuBLASLt GEMM with the DGELU epilogue, then reduce_sum).
  void gemm_dgelu(const GemmDesc& g, const Tensor& A, const Tensor& B, const Tensor& pre, Tensor& dpre,
                  Tensor& dbias);

  // --- flat optimizer buffers (Fused::FlatAdamW) ---
  // out (one element, f64, x's device) = sum over chunks of x[i]^2, accumulated in f64 in a
  // fixed order (the same value for any thread count). The caller reads it only to log.
  void sum_squares(const Tensor& x, const std::vector<FlatChunk>& chunks, Tensor& out);
  // One AdamW step (see AdamWHyper) on the flat buffers p, g, m, v (same shape [n], float)
  // over `chunks`; elements outside them are not touched. weight_decay applies to chunks with
  // decay set. norm_sq: undefined, or sum_squares' output for g (same device) for clipping.
  void adamw_flat(Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                  const std::vector<FlatChunk>& chunks, const AdamWHyper& h,
                  const Tensor& norm_sq);

 protected:
  // ======== the device's kernels: what each public method above runs after its checks ========
  // Arguments as the public method's, checked (core/backend_checks.h), plus what the checks
  // derived. Primitives are pure; the fused kernels' base versions throw "not supported".
  virtual void fill_impl(Tensor& x, double value) = 0;
  virtual void set_values_impl(Tensor& dst, const std::vector<int64_t>& values) = 0;
  virtual void copy_strided_impl(const Tensor& src, const Strided& s, Tensor& dst, const Strided& d,
                                 const Shape& shape, bool accumulate) = 0;  // shape not empty
  virtual void convert_impl(const Tensor& src, Tensor& dst) = 0;
  virtual void unary_impl(UnaryOp op, const Tensor& x, Tensor& y, double a, double b) = 0;
  virtual void unary_backward_impl(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                                   double a, double b) = 0;
  // sa, sb: a's and b's element strides over out's shape (0 where broadcast)
  virtual void binary_impl(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out, const Shape& sa,
                           const Shape& sb) = 0;
  // so: out's strides over x's shape (0 on the summed dims)
  virtual void reduce_sum_impl(const Tensor& x, Tensor& out, const Shape& so) = 0;
  // sm: the mask's strides over a's shape
  virtual void where_scalar_impl(const Tensor& mask, const Tensor& a, double b, Tensor& y, const Shape& sm) = 0;
  virtual void where_impl(const Tensor& mask, const Tensor& a, const Tensor& b, Tensor& y, const Shape& sm) = 0;
  virtual void causal_fill_impl(Tensor& x, double value, int64_t diag, int64_t window) = 0;
  virtual void dropout_impl(const Tensor& x, const DropoutMask& m, Tensor& y) = 0;
  virtual void gemm_impl(const GemmDesc& g, const Tensor& A, const Tensor& B, Tensor& C) = 0;  // M, N > 0
  virtual void softmax_impl(const Tensor& x, Tensor& y, bool log) = 0;
  virtual void softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) = 0;
  virtual void causal_softmax_impl(const Tensor& x, Tensor& y, const CausalRows& rows) = 0;
  virtual void causal_softmax_backward_impl(const Tensor& y, const Tensor& dy, Tensor& dx,
                                            const CausalRows& rows) = 0;
  // The norms: a undefined, the norm of x (h undefined); else the norm of h = x + a, h written.
  // dres undefined: dx overwritten; else dx = dres + the gradient (dres may be dx).
  virtual void layernorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, const Tensor& b, double eps,
                              Tensor& h, Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  virtual void layernorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                                       const Tensor& rstd, const Tensor& dres, Tensor& dx, Tensor& dw,
                                       Tensor& db) = 0;
  virtual void rmsnorm_impl(const Tensor& x, const Tensor& a, const Tensor& w, double eps, Tensor& h, Tensor& y,
                            Tensor& rstd) = 0;
  virtual void rmsnorm_backward_impl(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                                     const Tensor& dres, Tensor& dx, Tensor& dw) = 0;
  // the target values are the kernel's to range-check (checks::targets_in_range)
  virtual void cross_entropy_impl(const Tensor& logits, const Tensor& targets, Tensor& loss, Tensor& lse) = 0;
  virtual void cross_entropy_backward_impl(const Tensor& logits, const Tensor& targets, const Tensor& lse,
                                           const Tensor& dloss, Tensor& dlogits) = 0;
  // s: x (out for index_add) viewed as [outer, n, inner] around dim; the index values are the
  // kernel's to range-check (checks::indices_in_range) before anything is written
  virtual void index_select_impl(const Tensor& x, int64_t dim, const Tensor& idx, Tensor& out,
                                 const DimSplit& s) = 0;
  virtual void index_add_impl(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src,
                              const DimSplit& s) = 0;
  virtual void adamw_impl(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr, double beta1,
                          double beta2, double eps, double weight_decay, int64_t step) = 0;

  // fused: called only where has() reports the method's Fused
  virtual void attention_forward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel);
  // attention_forward with its row statistics (called only where has_attention_stats())
  virtual void attention_forward_stats_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                            const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel,
                                            AttnRowStats& stats);
  virtual std::unique_ptr<DecodeStep> make_decode_step_impl(const DecodeStack& s, int threads);
  virtual void attention_backward_impl(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& bias, const Tensor& out, const Tensor& lse,
                                       const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias,
                                       const AttnRel& rel, AttnRelGrad& drel);
  virtual void rope_rotate_impl(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out, bool interleaved,
                                bool transpose);
  virtual void split_heads_impl(const Tensor& qkv, int64_t H, int64_t q_begin, Tensor& q, Tensor& k, Tensor& v);
  virtual void split_heads_backward_impl(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H,
                                         int64_t q_begin, Tensor& dqkv);
  virtual void merge_heads_impl(const Tensor& o, Tensor& out);
  virtual void merge_heads_backward_impl(const Tensor& dout, Tensor& d_o);
  virtual void linear_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  virtual void linear_gelu_impl(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& pre, Tensor& h);
  virtual void gemm_dgelu_impl(const GemmDesc& g, const Tensor& A, const Tensor& B, const Tensor& pre, Tensor& dpre,
                               Tensor& dbias);
  virtual void sum_squares_impl(const Tensor& x, const std::vector<FlatChunk>& chunks, Tensor& out);
  virtual void adamw_flat_impl(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, const std::vector<FlatChunk>& chunks,
                               const AdamWHyper& h, const Tensor& norm_sq);
};

Backend& backend(Device d);  // the backend for a device (throws if not compiled in)
void synchronize_devices();   // wait for the queued work of every device in use (none: returns)
inline Backend& backend_of(const Tensor& t) { return backend(t.device()); }
void register_backend(Device d, Backend* b);  // an override (tests); nullptr restores the default
// The default backend of a device, registered by its library as that library is loaded (the CPU
// backend by a static registrar in core/cpu/cpu_backend.cpp): core itself never names a
// backend, so the layers stay one-way (docs/architecture.md). The factory is called on first use.
void register_default_backend(Device d, Backend& (*factory)());

}  // namespace ctx
