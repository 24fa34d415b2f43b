// autograd/ops_posenc2024.h — the single-node ops of the 2023-24 encodings (POSENC_SPEC §7):
// FIRE's MLP over normalised distances (ops_fire.cpp) and CoPE's gated positions (ops_cope.cpp).
// Each is one graph node with a hand-written backward, as each is one module in its paper's code;
// its per-element kernels are extension kernels (autograd/kernels/fire.h, cope.h) and the rest
// Backend primitives (GEMMs, reductions), so both run on every device.
#pragma once
#include "autograd/ops.h"

namespace ctx {

// FIRE (§7.1): B[b, h, i, j] = f(x_bij)_h, x = psi(pq[b,i] - pk[b,j]) / (psi(max(thr, pq[b,i])) + eps),
// psi(u) = ln(|c u| + 1), thr = |lm * init_L|, f(x) = w2 relu(w1 x + b1) + b2.
//   c, lm [1]; w1 [W, 1], b1 [W], w2 [H, W], b2 [H]; pq [Bp, T], pk [Bp, S] (constants, the
//   parameters' dtype and device) -> [Bp, H, T, S].
Variable fire_bias(const Variable& c, const Variable& lm, const Variable& w1, const Variable& b1,
                   const Variable& w2, const Variable& b2, const Tensor& pq, const Tensor& pk,
                   double init_L, double eps);

// CoPE (§7.2): the pre-mask logits S[b, h, i, j] = (q_i . k_j + e_ij) * scale, with
// g_ij = sigmoid(scale q_i . k_j) on visible keys, p_ij = min(sum_{k=j..i} g_ik, npos - 1),
// z_i = q_i E, e_ij = z_i[ceil p] w + z_i[floor p] (1 - w), w = p - floor p; e = 0 on invisible
// keys. One node for the logits (not a bias beside them): q k^T is computed once.
//   q [B, H, T, d], k [B, H, S, d], E [d, npos] -> [B, H, T, S]. Query i sits at q_pos0 + i; key
//   j is visible when j <= q_pos0 + i (and, with window > 0, j > q_pos0 + i - window or, with
//   attention sinks (POSENC_SPEC §6, sinks > 0 needs window > 0), j < sinks): the gates, and so
//   the positions, count the visible keys only; invisible logits are q . k scale (masked later).
Variable cope_logits(const Variable& q, const Variable& k, const Variable& E, double scale, int64_t q_pos0,
                     int64_t window, int64_t sinks = 0);

// CoPE's attention as one node: softmax over the visible keys of cope_logits(q, k, E, ...), then
// times v [B, H, S, dv] -> [B, H, T, dv] (the composed path's value, without [B, H, T, S] logits
// in memory: the kernels take each row's softmax right after its scan). Needs the
// cope_softmax_* kernels on the device: cope_attention_on(d) says whether it has them (CPU, and
// CUDA once libctxlab_cuda.so is loaded).
Variable cope_attention(const Variable& q, const Variable& k, const Variable& v, const Variable& E, double scale,
                        int64_t q_pos0, int64_t window, int64_t sinks = 0);
bool cope_attention_on(Device d);

}  // namespace ctx
