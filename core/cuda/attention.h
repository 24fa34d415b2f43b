// core/cuda/attention.h — fused causal attention on the CUDA backend (Fused::Attention):
// CudaBackend::attention_forward_impl / _backward_impl forward here, the arguments checked by
// Backend (core/attention_checks.h, the same for every device); every tensor on the CUDA device.
#pragma once
#include <cstdint>

#include "core/backend.h"

namespace ctx::cuda {

// q [B, H, T, Dh]; k, v [B, H, S, Dh]; bias undefined or [H, T, S] / [1, H, T, S];
// out [B, H, T, Dh], lse [B, H, T] (overwritten).
void attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                       Tensor& out, Tensor& lse, const AttnRel& rel);
// dq [B, H, T, Dh], dk, dv [B, H, S, Dh], dbias (when defined) and drel's defined fields overwritten.
void attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk,
                        Tensor& dv, Tensor& dbias, const AttnRel& rel, AttnRelGrad& drel);

// D[n] = dout[n] . out[n] for the N rows [N, Dh] (f32): the backward's first pass, shared with the
// tensor-core kernels (attention_tc.cu).
void attention_row_dot(const float* dout, const float* out, float* D, int64_t N, int64_t Dh);

// Calls of the two entry points that reached the kernels since start (tests check with it that
// a model took the fused path on this device).
struct AttentionCalls {
  uint64_t forward = 0, backward = 0;
};
AttentionCalls attention_calls();

}  // namespace ctx::cuda
