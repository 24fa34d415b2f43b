// core/backend_checks.h — the argument checks of every Backend method, written once: one function
// per op (ATen's meta functions) that checks the shapes, dtypes and devices of its tensors and the
// output's shape, run by the method's non-virtual wrapper in core/backend.cpp before the device's
// kernel (Backend::*_impl), so that every device throws the same message for the same mistake
// (tests/test_backend_ops.cpp BadIndicesThrowTheCpuMessage and the table's error cases). Each
// throws ctx::Error naming the op, the argument and what was expected; what a check derives for
// the kernel (strides, rows, the index split) it returns. The helpers below them are what the ops'
// checks are made of; *_in_range check index values where the device has read them.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/backend.h"
#include "core/causal_rows.h"
#include "core/error.h"

namespace ctx::checks {

// t is defined and on `dev` ("op: what <t> is on cpu, expected cuda")
void on(Device dev, const Tensor& t, const char* op, const char* what);
// the same shape and dtype / the same dtype
void same(const Tensor& a, const Tensor& b, const char* op);
void same_dtype(const Tensor& a, const Tensor& b, const char* op);
// (every defined tensor of a list on the device: check_on_device, core/extension.h)
// "op: expected a float tensor, got i32" / "op: index tensor must be i32 or i64, got f32"
void float_dtype(const char* op, DType dt);
void index_dtype(const char* op, DType dt);

// Strides of `s` (rank r) broadcast to `out` (rank R >= r): 0 where broadcast; `other` is the
// other operand, for the message.
std::vector<int64_t> broadcast_strides(const Shape& s, const Shape& out, const char* op, const Shape& other);

// ======== one check per Backend method (core/backend.h; same name and arguments, plus the
// device; every tensor on it) ========

// --- memory ---
void fill(Device dev, const Tensor& x);
void set_values(Device dev, const Tensor& dst, int64_t n);
// both tensors on dev, one dtype, strides of shape's rank, every offset the views reach inside
// their tensors. False when there is nothing to copy.
bool copy_strided(Device dev, const Tensor& src, const Strided& s, const Tensor& dst, const Strided& d,
                  const Shape& shape);
void convert(Device dev, const Tensor& src, const Tensor& dst);  // the same numel

// --- elementwise (float tensors) ---
void unary(Device dev, UnaryOp op, const Tensor& x, const Tensor& y);  // y: x's shape and dtype
// dx, and x / y where given, the shape and dtype of dy
void unary_backward(Device dev, UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx);
struct BinaryStrides {
  Shape a, b;  // over out's shape, 0 where broadcast
};
BinaryStrides binary(Device dev, BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out);
Shape reduce_sum(Device dev, const Tensor& x, const Tensor& out);  // out's strides over x's shape
// the mask's strides over a's shape
Shape where_scalar(Device dev, const Tensor& mask, const Tensor& a, const Tensor& y);
Shape where(Device dev, const Tensor& mask, const Tensor& a, const Tensor& b, const Tensor& y);
void causal_fill(Device dev, const Tensor& x);
void dropout(Device dev, const Tensor& x, const DropoutMask& m, const Tensor& y);

// --- linear algebra: one dtype, sizes >= 0, every batch item inside A, B and C; f32 / f64 when
// there is something to compute. False when there is not (M or N is 0: C has no element).
bool gemm(Device dev, const GemmDesc& g, const Tensor& A, const Tensor& B, const Tensor& C);

// --- normalisation / softmax ---
void softmax(Device dev, const Tensor& x, const Tensor& y);
void softmax_backward(Device dev, const Tensor& y, const Tensor& dy, const Tensor& dx);
// x / y [..., T, S], window >= 0; returns the mask's rows (core/causal_rows.h)
CausalRows causal_softmax(Device dev, const Tensor& x, const Tensor& y, int64_t diag, int64_t window);
CausalRows causal_softmax_backward(Device dev, const Tensor& y, const Tensor& dy, const Tensor& dx, int64_t diag,
                                   int64_t window);
void layernorm(Device dev, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y, const Tensor& mean,
               const Tensor& rstd);
void layernorm_backward(Device dev, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dx, const Tensor& dw, const Tensor& db);
void rmsnorm(Device dev, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& rstd);
void rmsnorm_backward(Device dev, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                      const Tensor& dx, const Tensor& dw);
// The residual add fused into a norm: a and h of x's shape and dtype on dev, h neither x, a nor y
// (add_layernorm / add_rmsnorm); a backward's dres (when defined) of dx's shape and dtype on dev.
void residual_add(Device dev, const char* op, const Tensor& x, const Tensor& a, const Tensor& h, const Tensor& y);
void residual_grad(Device dev, const char* op, const Tensor& dx, const Tensor& dres);

// --- losses (the target values: targets_in_range, by the kernel) ---
void cross_entropy(Device dev, const Tensor& logits, const Tensor& targets, const Tensor& loss, const Tensor& lse);
void cross_entropy_backward(Device dev, const Tensor& logits, const Tensor& targets, const Tensor& lse,
                            const Tensor& dloss, const Tensor& dlogits);

// --- indexing (the index values: indices_in_range, by the kernel); x / out split around dim ---
DimSplit index_select(Device dev, const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& out);
DimSplit index_add(Device dev, const Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src);

// --- optimizer: p, g, m, v of one shape and dtype; step >= 1 ---
void adamw(Device dev, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v, int64_t step);

// --- fused methods (core/attention_checks.h holds attention's) ---
void attention_forward(Device dev, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& bias, const Tensor& out, const Tensor& lse, const AttnRel& rel);
void attention_backward(Device dev, const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                        const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dbias, const AttnRel& rel,
                        const AttnRelGrad& drel);
void rope_rotate(Device dev, const Tensor& x, const Tensor& C, const Tensor& S, const Tensor& out);
void split_heads(Device dev, const Tensor& qkv, int64_t H, int64_t q_begin, const Tensor& q, const Tensor& k,
                 const Tensor& v);
void split_heads_backward(Device dev, const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H,
                          int64_t q_begin, const Tensor& dqkv);
void merge_heads(Device dev, const Tensor& o, const Tensor& out);
void merge_heads_backward(Device dev, const Tensor& dout, const Tensor& d_o);
void linear(Device dev, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y);
void sum_squares(Device dev, const Tensor& x, const std::vector<FlatChunk>& chunks, const Tensor& out);
void adamw_flat(Device dev, const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                const std::vector<FlatChunk>& chunks, const AdamWHyper& h, const Tensor& norm_sq);

// ======== helpers ========
// layer_norm / rms_norm: x [..., C] on dev, weight [C] (and bias [C] when defined) of x's dtype
void norm(Device dev, const char* op, const Tensor& x, const Tensor& w, const Tensor& b);
// causal_softmax (x, y) and its backward (y, dy, dx; c defined): a [..., T, S] on dev, b and c of
// its shape and dtype, window >= 0; returns the mask's rows
CausalRows causal_rows(Device dev, const char* op, const Tensor& a, const Tensor& b, const Tensor& c, int64_t diag,
                       int64_t window);
// cross_entropy: logits [N, V] and targets [N] on dev, targets i32 / i64
void targets(Device dev, const char* op, const Tensor& logits, const Tensor& targets);
// every target t[i] in [0, V) or -1 (ignored); t: the n target values as read on the host
template <class I>
void targets_in_range(const char* op, const I* t, int64_t n, const Tensor& logits, const Tensor& targets) {
  const int64_t V = logits.size(1);
  for (int64_t i = 0; i < n; ++i)
    CTX_CHECK(t[i] >= -1 && t[i] < V, op, ": target ", (int64_t)t[i], " at row ", i, " out of range [0, ", V,
              ") for logits ", logits.str(), " (targets ", targets.str(), ")");
}

// index_select / index_add: x viewed as [outer, n, inner] around dim (dim in range, else throws)
using ctx::DimSplit;
DimSplit split_at(const char* op, const Tensor& x, int64_t dim);
// every index ip[i] in [0, n); ip: the m index values as read on the host
template <class I>
void indices_in_range(const char* op, const I* ip, int64_t m, int64_t n, const Tensor& x, const Tensor& idx) {
  for (int64_t i = 0; i < m; ++i)
    CTX_CHECK(ip[i] >= 0 && ip[i] < n, op, ": index ", (int64_t)ip[i], " at position ", i, " out of range [0, ", n,
              ") for ", x.str(), " (indices ", idx.str(), ")");
}

// --- a whole decoding step ---
// every tensor of s defined, f32, on dev, with the shapes of core/decode_step.h
void decode_stack(Device dev, const DecodeStack& s);

}  // namespace ctx::checks
