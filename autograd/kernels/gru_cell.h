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

}  // namespace ctx::kernels
