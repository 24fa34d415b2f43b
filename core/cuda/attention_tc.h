// core/cuda/attention_tc.h — tensor-core FlashAttention-2 on the CUDA backend (bf16 products, fp32
// accumulation; mma.sync m16n8k16 through core/cuda/mma.cuh), forward and backward, for the
// causal / windowed attention with no bias tensor, no content-position terms, no dropout, keys not
// read in place from a KV cache, head dim 32, 64 or 128, f32 tensors, a device of compute
// capability 8.0 or newer; plain, or with a distance table (AttnRel::dist_bias: alibi, kerple,
// sandwich, t5) read in the tile loop, its gradient reduced per tile (deterministic). CudaBackend takes it under --precision bf16 when
// FastPath::Bf16Attention is on and tc_attention_fits; else the SIMT kernels (attention.h).
#pragma once
#include <cstdint>

#include "core/backend.h"

namespace ctx::cuda {

// The dims and operands this kernel computes (the switch and the precision are the caller's):
// rel may hold only dist_bias.
bool tc_attention_fits(const AttnDims& d, const Tensor& q, const Tensor& bias, const AttnRel& rel);
// The part of it a caller knows before it has the tensors: B H blocks, the head dim, the device.
bool tc_attention_shape_fits(int64_t BH, int64_t Dh);

// q, k, v rounded to bf16 (the caller's kept copies: CudaBackend keeps them with their storages
// from the forward to the backward), or null: converted here for this call.
struct TcBf16Inputs {
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
};

// q [B, H, T, Dh], k, v [B, H, S, Dh] f32; dist_bias [H, n] f32 (n >= S) or undefined; out
// [B, H, T, Dh], lse [B, H, T] overwritten (lse +inf and out 0 for a query that sees no key).
// Semantics as attention_forward with rel.dist_bias, q, k, v and the probabilities rounded to bf16
// for the products (the bias added in fp32).
void tc_attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                          const Tensor& dist_bias, Tensor& out, Tensor& lse, TcBf16Inputs kept = {});
// dq [B, H, T, Dh], dk, dv [B, H, S, Dh] overwritten; ddist_bias [H, n] too when defined (with
// dist_bias: AttnRelGrad::ddist_bias, from dS in fp32, not rounded).
void tc_attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                           const Tensor& dist_bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                           Tensor& dq, Tensor& dk, Tensor& dv, Tensor& ddist_bias, TcBf16Inputs kept = {},
                           const uint16_t* kept_dout = nullptr);

// Query rows a forward block takes for head dims up to 64: 64 (4 warps x 16 rows, the default, as
// D = 128 always has) or 128 (4 x 32; not yet timed on a GPU): CTXLAB_TC_FORWARD_ROWS, read once, unless set_tc_forward_rows
// (tests, A/B benchmarks; 0 returns to the setting) overrides it. Same results either way.
int tc_forward_rows();
void set_tc_forward_rows(int rows);
// Rows (keys in the dK/dV pass, queries in the dQ pass) a backward block takes: 64 (4 warps x 16,
// the default, timed on an H200) or 128 (4 x 32; the dK/dV pass for head dims up to 64, the dQ pass
// for every head dim; not yet timed on a GPU): CTXLAB_TC_BACKWARD_ROWS, read
// once, unless set_tc_backward_rows (0 returns to the setting) overrides it. The same results.
int tc_backward_rows();
void set_tc_backward_rows(int rows);

// Calls of the tensor-core forward and backward since start (tests check with it which kernels a
// model's attention took), and their bf16 inputs: read from a kept copy, or converted for the call;
// dist_forward: the forwards that read a distance table; wide_dkdv, wide_dq: the backward passes
// that took 32 rows a warp (tc_backward_rows 128).
struct TcAttentionCalls {
  uint64_t forward = 0, backward = 0;
  uint64_t kept_inputs = 0, converted_inputs = 0;
  uint64_t dist_forward = 0;
  uint64_t wide_dkdv = 0, wide_dq = 0;
};
TcAttentionCalls tc_attention_calls();

}  // namespace ctx::cuda
