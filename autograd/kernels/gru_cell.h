// autograd/kernels/gru_cell.h — one GRU time step with its gates fused, the kernels of the `rnn`
// encoding's gru_sequence (autograd/ops_gru.cpp, their owner and only caller): extension kernels
// (core/extension.h), not Backend methods. Registered per device by gru_cell_cpu.cpp (the library)
// and gru_cell_cuda.cu (libctxlab_cuda.so); the argument checks every device runs first are in
// gru_cell.cpp. cmake/check_layers.py lets no library file but ops_gru.cpp include this header.
// tests/test_backend_ops.cpp holds every device's kernels to short loops, and
// tests/test_posenc_survey.cpp the fused op to the composed one (CTXLAB_FUSED_GRU=0).
#pragma once
#include "core/extension.h"
#include "core/tensor.h"

namespace ctx::kernels {

// Gate blocks r | z | n of 3H columns; rows b < B, columns j < H (all contiguous, no aliasing, all
// on the device called, of one float dtype):
//   xg, hg [B, 3H]: x W_ih^T + (b_ir + b_hr | b_iz + b_hz | b_in), and h_prev W_hh^T
//   r = s(xg_r + hg_r), z = s(xg_z + hg_z), hn = hg_n + bhn, n = tanh(xg_n + r hn),
//   h = n + z (hp - n), with s(x) = (1 + tanh(x / 2)) / 2
// writes h [B, H], rzn [B, 3H] = r | z | n and hn [B, H] (saved for the backward).
using GruCellForward = void(const Tensor& xg, const Tensor& hg, const Tensor& bhn, const Tensor& hp, Tensor& h,
                            Tensor& rzn, Tensor& hn);
extern ExtensionKernel<GruCellForward> gru_cell_forward;

// With g = gy + dhc (dL/dh of this step: the output's gradient plus what flows back from the
// next step): dn = g (1 - z), dNp = dn (1 - n^2), dAr = dNp hn r (1 - r),
// dAz = g (hp - n) z (1 - z); writes d1 [B, 3H] = dAr | dAz | dNp (input side),
// d2 [B, 3H] = dAr | dAz | dNp r (hidden side) and dh [B, H] = g z (the caller adds d2 W_hh).
using GruCellBackward = void(const Tensor& gy, const Tensor& dhc, const Tensor& hp, const Tensor& rzn,
                             const Tensor& hn, Tensor& d1, Tensor& d2, Tensor& dh);
extern ExtensionKernel<GruCellBackward> gru_cell_backward;

// The whole recurrence at once (what a loop of the two cell kernels and one [B, H] x [H, 3H] GEMM a
// step computes), for a device that can run it as one piece of work: on the CPU one parallel
// region per call (core/team.h), each thread a slice of the hidden units, a barrier per step.
// Devices without them (CUDA) run the per-step loop. Shapes (contiguous, one float dtype, one
// device; Hs[0] is the initial state, read):
//   forward:  xg [T, B, 3H], wh [3H, H], bhn [H] -> Hs[1..T] of Hs [T+1, B, H], rzn [T, B, 3H], hn [T, B, H],
//             per step hg = Hs[t] wh^T, then gru_cell_forward's formulas;
//   backward: gy [T, B, H] (dL/dh_t from the output), wh, Hs, rzn, hn (saved by the forward)
//             -> d1, d2 [T, B, 3H] (gru_cell_backward's, with dhc = what flows back from t + 1:
//             the previous step's dh + d2[t + 1] wh; zero at t = T - 1).
// Under --precision bf16 (core/precision.h) the products h wh^T and d2 wh take their factors
// rounded to bf16 and sum in fp32, as the GEMM they replace. Each sum runs in a fixed order
// whatever the slicing: the same bits for any thread count.
using GruSequenceForward = void(const Tensor& xg, const Tensor& wh, const Tensor& bhn, Tensor& Hs, Tensor& rzn,
                                Tensor& hn);
extern ExtensionKernel<GruSequenceForward> gru_sequence_forward;
using GruSequenceBackward = void(const Tensor& gy, const Tensor& wh, const Tensor& Hs, const Tensor& rzn,
                                 const Tensor& hn, Tensor& d1, Tensor& d2);
extern ExtensionKernel<GruSequenceBackward> gru_sequence_backward;

}  // namespace ctx::kernels
