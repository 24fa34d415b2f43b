// autograd/ops_heads.h — the head split and merge of multi-head attention as fused ops: one
// pass over memory each way instead of reshape + permute (a copy) + slices (copies in backward
// into zero-filled [3, B, H, S, Dh] gradients), through Backend::split_heads / merge_heads
// (Fused::Heads). Where use_fused(FastPath::Heads) says no (core/fast_paths.h: a backend without
// them, or CTXLAB_FUSED_HEADS=0 / set_fast_path(Heads, false)) they run the reshape / permute /
// slice composition they replace.
#pragma once
#include <array>

#include "autograd/ops.h"

namespace ctx {

// qkv: [B, S, 3D] (D = H * Dh; q = cols 0..D-1, k = D..2D-1, v = 2D..3D-1; head h of each
// = cols h*Dh..(h+1)*Dh-1 within it). Returns
//   q [B, H, S - q_begin, Dh]  (rows q_begin..S-1: the queries when a memory prefix precedes them)
//   k [B, H, S, Dh], v [B, H, S, Dh]
// all contiguous views of one buffer. Backward writes the gradients that arrive straight into
// one dqkv [B, S, 3D] (zeros where an output got none, and in the q columns of rows < q_begin).
std::array<Variable, 3> split_heads(const Variable& qkv, int64_t H, int64_t q_begin = 0);

// o: [B, H, T, Dh] -> [B, T, H * Dh] (head h in cols h*Dh..); backward the inverse.
Variable merge_heads(const Variable& o);

}  // namespace ctx
