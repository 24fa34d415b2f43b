// autograd/ops.h — every differentiable op. Each takes and returns Variables; forward and
// backward of an op sit side by side in autograd/ops_*.cpp. Errors (shape, dtype, device,
// index range) throw ctx::Error naming the op and both shapes.
#pragma once
#include <cstdint>
#include <vector>

#include "autograd/variable.h"
#include "core/backend.h"

namespace ctx {
class Rng;

// ---- elementwise binary, NumPy broadcasting (ops_elementwise.cpp) ----
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
inline Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
inline Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
inline Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
inline Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }

// ---- elementwise unary ----
Variable neg(const Variable& x);
Variable scale(const Variable& x, double s);
Variable add_scalar(const Variable& x, double s);
Variable exp(const Variable& x);
Variable log(const Variable& x);
Variable tanh(const Variable& x);
Variable sin(const Variable& x);
Variable cos(const Variable& x);
Variable sqrt(const Variable& x);
Variable relu(const Variable& x);
Variable gelu_tanh(const Variable& x);
Variable pow(const Variable& x, double p);
Variable square(const Variable& x);
Variable clamp(const Variable& x, double lo, double hi);  // gradient 0 outside [lo, hi]
// Inverted dropout: zero with probability p, scale kept ones by 1/(1-p); identity when
// !training or p == 0. Each call draws one seed from `rng`; the mask is a function of it
// (core/dropout_mask.h), the same on every device.
Variable dropout(const Variable& x, double p, bool training, Rng& rng);
// Dropout with a given mask (core/dropout_mask.h; element i of x, row-major, takes m.factor(i));
// the identity for an inactive mask. Fused attention applies the same mask to its probabilities.
Variable dropout(const Variable& x, const DropoutMask& m);

// ---- linear algebra (ops_linalg.cpp) ----
// a: [..., M, K] (or [..., K, M] if ta), b: [..., K, N] (or [..., N, K] if tb); batch dims of
// a and b must match, or b may be 2-D (shared across the batch). out: [..., M, N].
// alpha op(a) op(b); alpha is the GEMM's own scale (no separate pass), applied in the backward too.
Variable matmul(const Variable& a, const Variable& b, bool ta = false, bool tb = false, double alpha = 1.0);
// x @ w^T + bias (PyTorch Linear; w [out, in], bias [out] or undefined)
Variable linear(const Variable& x, const Variable& w, const Variable& bias = Variable());
// The transformer MLP, linear(gelu_tanh(linear(x, w1, b1)), w2, b2) (w1 [F, C], b1 [F], w2 [C, F],
// b2 [C]), as one node: the backend's linear_gelu forward and gemm_dgelu backward (CUDA: cuBLASLt's
// GELU epilogues; the GELU's input gradient never exists on its own). Composed where
// use_fused(FastPath::Linear) or use_fused(FastPath::MlpGelu) (CTXLAB_FUSED_MLP=0) says no.
Variable mlp_gelu(const Variable& x, const Variable& w1, const Variable& b1, const Variable& w2, const Variable& b2);

// ---- reductions (ops_reduce.cpp) ----
Variable sum(const Variable& x);  // all elements -> scalar
Variable sum(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);
Variable mean(const Variable& x);
Variable mean(const Variable& x, const std::vector<int64_t>& dims, bool keepdim = false);

// ---- shape (ops_shape.cpp) ----
Variable reshape(const Variable& x, const Shape& shape);  // view, -1 allowed
Variable permute(const Variable& x, const std::vector<int64_t>& perm);  // materialises
Variable transpose(const Variable& x, int64_t d0, int64_t d1);
Variable slice(const Variable& x, int64_t dim, int64_t begin, int64_t end);  // [begin, end)
Variable concat(const std::vector<Variable>& xs, int64_t dim);
Variable expand(const Variable& x, const Shape& shape);  // broadcast to shape

// ---- indexing (ops_index.cpp) ----
Variable embedding(const Variable& weight, const Tensor& ids);  // weight [V, D], ids [...] -> [..., D]
Variable index_select(const Variable& x, int64_t dim, const Tensor& idx);
// out = x with out[.., idx[i], ..] += src[.., i, ..] along dim (differentiable in x and src)
Variable scatter_add(const Variable& x, int64_t dim, const Tensor& idx, const Variable& src);
Variable where(const Tensor& mask, const Variable& a, const Variable& b);  // mask != 0 ? a : b
Variable masked_fill(const Variable& x, const Tensor& mask, double value);
// scores [..., T, S]: entries with j > i + diag become -inf (diag = S - T aligns the last query
// with the last key, as with a memory prefix). window > 0 also masks j <= i + diag - window:
// sliding-window (local) attention where each query sees its last `window` keys.
Variable causal_mask(const Variable& scores, int64_t diag = 0, int64_t window = 0);

// ---- neural-net ops (ops_nn.cpp), all over the last dim ----
Variable softmax(const Variable& x);
// softmax(causal_mask(scores, diag, window)) as one node: the same forward, and a backward that is
// softmax's alone (the masked probabilities are 0, so their gradient is 0 with no mask pass).
// Backend::causal_softmax runs mask and softmax in one pass each way unless
// CTXLAB_FUSED_CAUSAL_SOFTMAX=0 (FastPath::CausalSoftmax, core/fast_paths.h: then causal_fill +
// softmax, softmax_backward).
Variable causal_softmax(const Variable& scores, int64_t diag = 0, int64_t window = 0);
Variable log_softmax(const Variable& x);
// Over the last dim; b may be undefined (no bias). Their backward sums x's gradient into what x
// already holds (the residual stream's gradient from the later layers) as it writes it, unless
// CTXLAB_FUSED_ADD_NORM=0 (FastPath::AddNorm: then by a separate add).
Variable layer_norm(const Variable& x, const Variable& w, const Variable& b, double eps);
Variable rms_norm(const Variable& x, const Variable& w, double eps);
// The residual add fused into the norm after it: {h, norm(h)} with h = x + a (a of x's shape), one
// kernel that reads x and a and writes both; h's node (named add_layer_norm / add_rms_norm: the
// profiler gives it the kernel's time) has add's backward, the norm's is layer_norm's / rms_norm's.
// CTXLAB_FUSED_ADD_NORM=0: add(), then layer_norm() / rms_norm() (the same values).
std::pair<Variable, Variable> add_layer_norm(const Variable& x, const Variable& a, const Variable& w,
                                             const Variable& b, double eps);
std::pair<Variable, Variable> add_rms_norm(const Variable& x, const Variable& a, const Variable& w, double eps);
// Fused softmax + NLL, mean over the non-ignored rows. logits [N, V], targets [N] i32/i64
// (-1 = ignore). Returns a scalar.
Variable cross_entropy(const Variable& logits, const Tensor& targets);
// Weighted: sum over rows of weights[n] * (lse[n] - logits[n, targets[n]]), the ignored rows (-1)
// left out (their gradient is 0). weights [N], a float tensor on the host or the logits' device
// (converted to the logits' dtype); e.g. 1 / (rows * answer tokens of the row) for a mean over
// rows of each row's mean (GPT::masked_loss). Returns a scalar.
Variable cross_entropy(const Variable& logits, const Tensor& targets, const Tensor& weights);

}  // namespace ctx
