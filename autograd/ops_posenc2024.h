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

}  // namespace ctx
