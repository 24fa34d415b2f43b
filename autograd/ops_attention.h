// autograd/ops_attention.h — fused causal attention as one autograd op around
// Backend::attention_forward / _backward (core/backend.h; on the CPU the tiled online-softmax
// kernels of core/cpu/flash_attention.h, f32 / f64), and the same attention composed from unfused
// ops (the reference of the tests, and what runs on a backend without Fused::Attention).
#pragma once
#include "autograd/ops.h"

namespace ctx {

// Content-position terms of attention (shaw, xl, deberta, tupe), each optional. Per (b, h):
//   logits_ij = scale * (q_i . k_j + qrel[i, qidx[i, j]] + krel[j, kidx[i, j]]) + bias_ij
//   o_i       = sum_j p_ij (v_j + vrel[qidx[i, j]])
// qrel / krel hold one column per relative index (a small GEMM against a table), gathered per
// (i, j) by the index tables; the fused kernel gathers inside its tiles, the composed version
// through index_select / scatter_add.
struct RelTerms {
  // Index tables: on the CPU (values checked here) or already on q's device (checked where built).
  Tensor qidx;    // i32 [T, S], values in [0, Rq): indexes qrel and vrel
  Variable qrel;  // [B, H, T, Rq] or undefined
  Variable vrel;  // [Rq, Dh] (shared by the batch and the heads) or undefined
  Tensor kidx;    // i32 [T, S], values in [0, Rk)
  Variable krel;  // [B, H, S, Rk] or undefined
  // A bias by distance read from a per-head table (AttnRel::dist_bias, core/backend.h), or
  // undefined: [H, n], n >= S, logits_ij += dist_bias[h, i + (S - T) - j] (query i at key
  // position i + S - T). Excludes the bias argument. Trainable tables (kerple, t5) get their
  // gradient summed by distance; the composed version gathers it into [1, H, T, S].
  Variable dist_bias;
  // The table never changes (a fixed encoding's kept table: ALiBi, Sandwich): where the attention
  // gathers it into [1, H, T, S] (a backend that does not read the table), the gathered bias is
  // kept and reused for the same (table, T, S), every layer and step.
  bool dist_bias_constant = false;
  bool empty() const { return !qrel.defined() && !vrel.defined() && !krel.defined() && !dist_bias.defined(); }
};

// q: [B, H, T, Dh]; k, v: [B, H, S, Dh] with S >= T. Queries are the last T positions: query i
// sees key j iff j <= i + (S - T) (causal_mask(s, S - T)) and, when window > 0, also
// j > i + (S - T) - window (sliding window: at most `window` keys, the query's own included).
// bias: undefined, or [H, T, S] / [1, H, T, S] additive logits shared over the batch (it may
// require grad; its gradient is summed over the batch).
// Returns o = softmax(scale * q k^T + bias, masked) v: [B, H, T, Dh]. The [T, S] probabilities
// are never stored: backward recomputes them from o and the per-row logsumexp.
// rel: content-position terms (see RelTerms); their gradients flow to qrel, krel and vrel.
// keys > 0: only the first `keys` rows of k and v (dim 2) are the keys (S = keys; the bias and
// rel are sized by it): a decoding step passes the KV cache's buffers without copying its rows
// out (AttnDims::kv_rows); the gradient of the other rows is 0. 0: every row.
// dropout: an active mask drops probabilities as dropout(p, mask) would on p [B, H, T, S]
// (training; AttnDims::dropout): the same mask as the composed version's, so the two agree.
// stats: when given, its rows [B, H, T, 3] (AttnRowStats, core/backend.h: entropy, sink mass,
// mean distance per query row) from the kernel's own pass where the backend has them
// (Backend::has_attention_stats), else from the composed probabilities (attention_row_stats).
Variable fused_causal_attention(const Variable& q, const Variable& k, const Variable& v,
                                const Variable& bias, double scale, int64_t window = 0,
                                const RelTerms& rel = {}, int64_t keys = 0,
                                const DropoutMask& dropout = {}, AttnRowStats* stats = nullptr);

// The same attention from matmul / scale / add / causal_mask / masked_fill / softmax / matmul
// (same arguments, same checks).
Variable causal_attention_composed(const Variable& q, const Variable& k, const Variable& v,
                                   const Variable& bias, double scale, int64_t window = 0,
                                   const RelTerms& rel = {}, const DropoutMask& dropout = {},
                                   AttnRowStats* stats = nullptr);

// The row statistics of AttnRowStats from materialised probabilities p [B, H, T, S] (the last T
// of S positions query; masked entries 0): the reference the fused kernels' statistics are held
// to, and what the composed attention path reports. Returns [B, H, T, 3] f64 on the host.
Tensor attention_row_stats(const Tensor& p, int64_t sink_keys);

// The two halves of the composed version, for the general path (nn/attention.cpp runs the mask,
// softmax and dropout between them). relative_logits: the unmasked logits [B, H, T, S] of
// RelTerms (bias may be [B or 1, H, T, S] or [H, T, S]); relative_output: p v plus the value
// term. Both check rel against q / k / p (errors name the field and the expected shape).
Variable relative_logits(const Variable& q, const Variable& k, const Variable& bias, double scale,
                         const RelTerms& rel);
Variable relative_output(const Variable& p, const Variable& v, const RelTerms& rel);

// [T, S] mask (like's dtype and device) of the keys a sliding window hides from the last T of S
// queries beyond the causal mask: 1 where j <= i + (S - T) - window and j >= sinks (attention
// sinks, POSENC_SPEC §6: the first `sinks` keys stay visible). All 0 when window is 0.
Tensor hidden_keys_mask(int64_t T, int64_t S, int64_t window, int64_t sinks, const Tensor& like);
// Gathers of a constant distance table (RelTerms::dist_bias_constant) served from the kept ones on
// this thread so far (for the tests).
uint64_t kept_dist_bias_gathers();

}  // namespace ctx
