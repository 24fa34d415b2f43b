// autograd/ops_attention.h — fused causal attention as one autograd op: the CPU kernels of
// core/cpu/flash_attention.h (tiled online softmax forward, recomputing backward) for f32 / f64,
// and the same attention composed from unfused ops (the reference of the tests, and what runs on
// other devices).
#pragma once
#include "autograd/ops.h"

namespace ctx {

// q: [B, H, T, Dh]; k, v: [B, H, S, Dh] with S >= T. Queries are the last T positions: query i
// sees key j iff j <= i + (S - T) (causal_mask(s, S - T)) and, when window > 0, also
// j > i + (S - T) - window (sliding window: at most `window` keys, the query's own included).
// bias: undefined, or [H, T, S] / [1, H, T, S] additive logits shared over the batch (it may
// require grad; its gradient is summed over the batch).
// Returns o = softmax(scale * q k^T + bias, masked) v: [B, H, T, Dh]. The [T, S] probabilities
// are never stored: backward recomputes them from o and the per-row logsumexp.
Variable fused_causal_attention(const Variable& q, const Variable& k, const Variable& v,
                                const Variable& bias, double scale, int64_t window = 0);

// The same attention from matmul / scale / add / causal_mask / masked_fill / softmax / matmul
// (same arguments, same checks).
Variable causal_attention_composed(const Variable& q, const Variable& k, const Variable& v,
                                   const Variable& bias, double scale, int64_t window = 0);

}  // namespace ctx
