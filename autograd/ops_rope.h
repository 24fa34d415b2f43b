// autograd/ops_rope.h — the rotary op: rotate each pair (a, b) of the last dim by a per-row
// angle whose (scaled) cos / sin are given, with the transpose rotation as its backward.
#pragma once
#include "autograd/ops.h"

namespace ctx {

enum class RopePairing { Half, Interleaved };  // pairs (k, k + d/2) | (2k, 2k + 1)

// x: [..., T, d] (d even); cos, sin: [T, d/2] (x's dtype and device; not differentiated).
//   a' = a * C - b * S,  b' = b * C + a * S     (C, S may carry a scale: YaRN m, XPOS zeta)
// backward (the transpose): da = ga * C + gb * S,  db = gb * C - ga * S.
Variable rope_rotate(const Variable& x, const Tensor& cos, const Tensor& sin, RopePairing pairing);
// The same rotation composed from slice / mul / concat (what rope_rotate runs where
// use_fused(FastPath::Rope) says no, core/fast_paths.h; exposed so that tests compare the two).
Variable rope_rotate_composed(const Variable& x, const Tensor& cos, const Tensor& sin, RopePairing pairing);

}  // namespace ctx
