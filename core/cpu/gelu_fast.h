// core/cpu/gelu_fast.h — a vectorised tanh-GELU (f32), forward and backward, with the meaning of
// the reference kernel (ref_kernels.h, UnaryOp::GeluTanh). AVX2 + FMA when compiled in (8 floats
// per instruction), a scalar loop of the same formula otherwise; OpenMP over the elements.
// Which GELU runs (this one, oneDNN's, the reference) is gelu_impl(): docs/threading.md.
#pragma once
#include <cstdint>

namespace ctx::cpu {

// y = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), computed as y = x / (1 + e^(-2u))
// (relative error ~1e-7 where |u| is small, a few |u| ulp in the tails; NaN passes through).
void gelu_tanh_fast_f32(const float* x, float* y, int64_t n);
// dx = dy * gelu'(x), overwritten.
void gelu_tanh_backward_fast_f32(const float* x, const float* dy, float* dx, int64_t n);
// "avx2" or "scalar": which of the two this build compiled.
const char* gelu_fast_isa();

enum class GeluImpl { Reference, Fast, OneDNN };
// The GELU for f32: CTXLAB_GELU=reference|fast|onednn (read once), else the measured choice
// (onednn_op_enabled("gelu_tanh"[_backward]) ? oneDNN : fast). Throws on an unknown value.
GeluImpl gelu_impl(bool backward);
// The f32 GELU as the backend's unary op runs it (Backend::unary(GeluTanh)): gelu_impl(false)'s
// choice, oneDNN falling back to the fast loop where it declines. y may be x.
void gelu_tanh_f32(const float* x, float* y, int64_t n);

}  // namespace ctx::cpu
