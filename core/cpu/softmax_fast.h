// core/cpu/softmax_fast.h — the masked (causal / sliding-window) softmax over rows for f32, forward
// and backward, on whole vectors (core/cpu/simd.h: its Cephes exp): each row reads and computes only
// its visible columns (core/causal_rows.h) and writes 0 in the others, with the meaning of
// ref::softmax / ref::softmax_backward with rows (core/cpu/ref_kernels.h; test_backend_ops holds the
// CPU backend to them). The composed attention's softmax (encodings whose logits are their own:
// CoPE, Transformer-XL, DeBERTa, ...) runs here: the mask costs nothing, where oneDNN's softmax
// needed the masked half filled with -inf and then exponentiated it.
#pragma once
#include <cstdint>

#include "core/causal_rows.h"

namespace ctx::cpu {

// x, y: [N, C] (y may be x); a row without a visible finite logit is all 0 (as the reference).
void causal_softmax_fast_f32(const float* x, float* y, int64_t N, int64_t C, CausalRows rows);
// y, dy, dx: [N, C]; dx = y (dy - sum(dy y)) over the visible columns, 0 elsewhere.
void causal_softmax_backward_fast_f32(const float* y, const float* dy, float* dx, int64_t N, int64_t C,
                                      CausalRows rows);

// One row (no threads: for kernels that already run rows in parallel): y = the softmax of x over
// the columns [lo, hi), 0 elsewhere; dx = y (dy - sum(dy y)) over [lo, hi), 0 elsewhere.
void softmax_row_f32(const float* x, float* y, int64_t C, int64_t lo, int64_t hi);
void softmax_backward_row_f32(const float* y, const float* dy, float* dx, int64_t C, int64_t lo, int64_t hi);

}  // namespace ctx::cpu
