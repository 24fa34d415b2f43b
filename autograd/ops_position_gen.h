// autograd/ops_position_gen.h — the single-node ops that generate positions for the survey's
// encodings (POSENC_SPEC §5): a GRU layer through time (ops_gru.cpp), FLOATER's RK4-integrated
// positions (ops_ode.cpp) and the complex-order rotation of token embeddings (ops_complex.cpp).
// Each is one graph node with a hand-written backward next to its forward; the inner loops use
// only Backend primitives.
// Each op that has a fused path asks use_fused (core/fast_paths.h: FastPath::GruCell, OdeRk4,
// Rope; tests set the switches with set_fast_path) and otherwise runs its composed twin.
#pragma once
#include "autograd/ops.h"
#include "core/fast_paths.h"

namespace ctx {

// One GRU layer (PyTorch's equations, gates r, z, n), h_0 = 0, over x [B, T, In]:
//   w_ih [3H, In], w_hh [3H, H], b_ih, b_hh [3H] (row blocks r, z, n) -> h [B, T, H].
// CTXLAB_FUSED_GRU (FastPath::GruCell): 0 = always the composed reference loop.
Variable gru_sequence(const Variable& x, const Variable& w_ih, const Variable& w_hh,
                      const Variable& b_ih, const Variable& b_hh);

// FLOATER positions: p(0) = p0 [D], dp/dt = W2 tanh(W1 p + b1 + t wt) + b2 (w1 [F, D], b1 [F],
// wt [F], w2 [D, F], b2 [D]), classic RK4 with step eta = dt / substeps from t = 0.
// Returns P [n, D], P[i] = p(i dt) (i * substeps steps).
struct OdeSpec {
  int64_t n = 1;          // positions 0..n-1
  double dt = 0.01;
  int64_t substeps = 1;
};
// CTXLAB_FUSED_ODE (FastPath::OdeRk4): 0 = always the composed reference loop.
Variable ode_positions(const Variable& p0, const Variable& w1, const Variable& b1,
                       const Variable& wt, const Variable& w2, const Variable& b2,
                       const OdeSpec& spec);

// Complex-order embedding: tokens [B, T] (i32/i64, on wte's device), wte [V, D] (D even), freq
// [V, D/2]. With (a, b) = wte[w, 2k], wte[w, 2k+1], phi = float(pos0 + t) * freq[w, k]:
//   x[b, t, 2k] = a cos(phi) - b sin(phi),  x[b, t, 2k+1] = a sin(phi) + b cos(phi).
// One node around Backend::rope_rotate where use_fused(FastPath::Rope) (CTXLAB_FUSED_ROPE), else
// complex_order_embed_composed.
Variable complex_order_embed(const Variable& wte, const Variable& freq, const Tensor& tokens,
                             int64_t pos0);
// The same from differentiable primitives (index_select, mul, cos, sin, slice, concat): the
// composed twin, exposed so that tests compare the two.
Variable complex_order_embed_composed(const Variable& wte, const Variable& freq, const Tensor& tokens,
                                      int64_t pos0);

}  // namespace ctx
