// autograd/ops_linear.h — the switch of the fused Linear op (linear() itself is in ops.h).
// linear(x, w, b) is one autograd node: y = x w^T + b with the bias added inside the GEMM, and a
// backward doing dx = dy w, dw = dy^T x, db = column sums of dy. On unless the environment sets
// CTXLAB_FUSED_LINEAR=0 (read once); then linear is matmul + add (two nodes), as before.
// set_fused_linear() overrides the environment (tests, benchmarks) until reset_fused_linear().
#pragma once

namespace ctx {

bool fused_linear_enabled();
void set_fused_linear(bool on);
void reset_fused_linear();

}  // namespace ctx
