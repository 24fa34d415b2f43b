// autograd/kernels/cope.h — CoPE's gated positions (POSENC_SPEC §7.2), the extension kernels of
// the cope_logits and cope_attention ops (autograd/ops_cope.cpp, their owner and only caller;
// core/extension.h): one scan per query row (and, for the attention, its softmax). Registered per device by cope_cpu.cpp (the library) and cope_cuda.cu
// (libctxlab_cuda.so); the argument checks every device runs first are in cope.cpp; the row
// formulas both compile are cope_formula.h. tests/test_backend_ops.cpp holds every device's
// kernels to short loops; the op's float64 gradcheck is in tests/test_posenc_2024.cpp.
#pragma once
#include "core/extension.h"
#include "core/tensor.h"

namespace ctx::kernels {

// a [B, H, T, S]: the scaled logits q_i . k_j / sqrt(d); z [B, H, T, npos]: q_i . E[:, n].
// Query row i sits at position q_pos0 + i; key j is visible when j <= q_pos0 + i and, with
// window W > 0, j > q_pos0 + i - W or (attention sinks, POSENC_SPEC §6; sinks 0 = none) j < sinks.
// For visible j, g = sigmoid(a), psum_ij = sum of g_ik over the visible k in [j, i] (from i down:
// the window's keys, then the sinks'), p = min(psum, npos - 1), w = p - floor(p), the logits
//   out_ij = a_ij + (z_i[ceil p] w + z_i[floor p] (1 - w)) * scale   (out [B, H, T, S])
// and a_ij for invisible keys (psum 0). psum [B, H, T, S] is kept for the backward.
using CopeForward = void(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, int64_t sinks,
                         double scale, Tensor& out, Tensor& psum);
extern ExtensionKernel<CopeForward> cope_forward;

// From dout = dL/dout [B, H, T, S]: dz [B, H, T, npos] (the interpolation's weights) and
// da [B, H, T, S] = dL/da: dout itself plus, on visible keys, the path through the positions
// (the clamp passes where psum <= npos - 1, the reverse cumulative sum becomes a forward one over
// the keys, then sigmoid').
using CopeBackward = void(const Tensor& dout, const Tensor& a, const Tensor& z, const Tensor& psum, int64_t q_pos0,
                          int64_t window, int64_t sinks, double scale, Tensor& da, Tensor& dz);
extern ExtensionKernel<CopeBackward> cope_backward;

// CoPE's own attention (cope_attention, ops_cope.cpp): cope_forward's logits, then the softmax over
// each row's visible keys in place: p [B, H, T, S] holds the probabilities (0 on invisible keys),
// psum as cope_forward. The logits never leave the row.
using CopeSoftmaxForward = void(const Tensor& a, const Tensor& z, int64_t q_pos0, int64_t window, int64_t sinks,
                                double scale, Tensor& p, Tensor& psum);
extern ExtensionKernel<CopeSoftmaxForward> cope_softmax_forward;

// From dp = dL/dp [B, H, T, S] (overwritten: it becomes dL/dlogits = p (dp - sum(dp p)) on visible
// keys, 0 elsewhere), then cope_backward's da and dz from it.
using CopeSoftmaxBackward = void(Tensor& dp, const Tensor& p, const Tensor& a, const Tensor& z, const Tensor& psum,
                                 int64_t q_pos0, int64_t window, int64_t sinks, double scale, Tensor& da, Tensor& dz);
extern ExtensionKernel<CopeSoftmaxBackward> cope_softmax_backward;

}  // namespace ctx::kernels
