// core/cpu/flash_attention.h — fused causal attention on the CPU (FlashAttention-2 style), f32
// and f64: o = softmax(scale * q k^T + bias, causal [+ window] mask) v without materialising the
// [T, S] probabilities. The forward tiles over keys with an online softmax and keeps only o and
// the per-row logsumexp; the backward recomputes the probabilities tile by tile from it.
// Backend::attention_forward / _backward reach them through core/cpu/attention.cpp.
#pragma once
#include <cstdint>

#include "core/backend.h"

namespace ctx::cpu {

// Sizes of one call (core/backend.h): query i (0 <= i < T) is at key position i + (S - T) and
// sees key j iff j <= i + (S - T) and, when window > 0, j > i + (S - T) - window.
using FlashAttnDims = AttnDims;

// Content-position terms (shaw, xl, deberta, tupe), each optional (null: absent). Per (b, h):
//   logit_ij = scale * (q_i . k_j + qrel[i, qidx[i, j]] + krel[j, kidx[i, j]]) + bias[i, j]
//   o_i      = sum_j p_ij (v_j + vrel[qidx[i, j]])
// The relative scores are small per-row tables (one column per relative index, computed by a
// GEMM outside) that the kernels gather from inside their tiles, so no [T, S] term is built.
template <class F>
struct FlashRel {
  int64_t Rq = 0, Rk = 0;         // columns of qrel (= rows of vrel) and of krel
  const int32_t* qidx = nullptr;  // [T, S], values in [0, Rq): needed by qrel and vrel
  const F* qrel = nullptr;        // [B, H, T, Rq]
  const F* vrel = nullptr;        // [Rq, Dh], shared by the batch and the heads
  const int32_t* kidx = nullptr;  // [T, S], values in [0, Rk)
  const F* krel = nullptr;        // [B, H, S, Rk]
  // backward outputs, overwritten when not null (only for the terms present)
  F* dqrel = nullptr;  // [B, H, T, Rq]
  F* dkrel = nullptr;  // [B, H, S, Rk]
  F* dvrel = nullptr;  // [Rq, Dh]
  bool logit_terms() const { return qrel || krel; }
};

// Optional row statistics of the forward (AttnRowStats, core/backend.h): rows [B, H, T, 3] =
// entropy, mass on the first sink_keys keys, mean distance, per query row; null: not wanted.
// One more accumulation per visible logit (e log e, e * distance, e on a sink key, rescaled with
// the running max like the normaliser): no [T, S] matrix.
template <class F>
struct FlashStats {
  F* rows = nullptr;
  int64_t sink_keys = 0;
};

// q: [B, H, T, Dh]; k, v: [B, H, S, Dh] ([B, H, kv_rows, Dh] when d.kv_rows > 0, the keys the
// first S rows of each (b, h)); bias: [H, T, S] shared over the batch, or null.
// Writes o: [B, H, T, Dh] and lse: [B, H, T] (logsumexp of each row's masked logits; +inf for
// a row that sees no key with a finite logit, whose output is then 0).
template <class F>
void flash_attention_forward(const FlashAttnDims& d, const F* q, const F* k, const F* v,
                             const F* bias, F* o, F* lse, const FlashRel<F>& rel = {},
                             const FlashStats<F>& stats = {});

// Given do = dL/do: dq [B, H, T, Dh], dk, dv [B, H, S, Dh] are overwritten; dbias [H, T, S]
// (summed over the batch) is overwritten when not null, and so are rel's gradients. o and lse
// are the forward's outputs (o including the vrel term).
template <class F>
void flash_attention_backward(const FlashAttnDims& d, const F* q, const F* k, const F* v,
                              const F* bias, const F* o, const F* lse, const F* dout, F* dq, F* dk,
                              F* dv, F* dbias, const FlashRel<F>& rel = {});

// The opt-in bf16 tile products under --precision bf16 (CTXLAB_BF16_ATTENTION=1; off by default:
// docs/performance.md, "Attention") are FastPath::Bf16Attention (core/fast_paths.h).

}  // namespace ctx::cpu
