// autograd/kernels/fire.h — FIRE's normalised distances (POSENC_SPEC §7.1), the extension kernel
// of the fire_bias op (autograd/ops_fire.cpp, its owner and only caller; core/extension.h).
// Registered per device by fire_cpu.cpp (the library) and fire_cuda.cu (libctxlab_cuda.so); the
// argument checks every device runs first are in fire.cpp. tests/test_backend_ops.cpp holds every
// device's kernel to a short loop; the op's float64 gradcheck is in tests/test_ops_gradcheck.cpp.
#pragma once
#include "core/extension.h"
#include "core/tensor.h"

namespace ctx::kernels {

// Query positions pq [Bp, T], key positions pk [Bp, S], c [1], lm [1] (L_multiplier), all of one
// float dtype on the device called; init_L > 0 and eps > 0 constants. For every (b, i, j), with
// u = pq[b,i] - pk[b,j], thr = |lm * init_L|, m = max(thr, pq[b,i]):
//   num = ln(|c u| + 1), den = ln(|c m| + 1) + eps, x = num / den       (x [Bp, T, S])
//   dxdc = d x / d c, dxdl = d x / d lm                                   ([Bp, T, S] each)
// with d|v|/dv = sign(v) (0 at 0) and the max's gradient split 1/2 : 1/2 at thr == pq[b,i]
// (torch.maximum). Masked entries (u < 0) are computed the same way (finite).
using FireDistances = void(const Tensor& pq, const Tensor& pk, const Tensor& c, const Tensor& lm,
                           double init_L, double eps, Tensor& x, Tensor& dxdc, Tensor& dxdl);
extern ExtensionKernel<FireDistances> fire_distances;

}  // namespace ctx::kernels
