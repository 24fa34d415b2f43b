// core/cpu/onednn_ops.h — oneDNN fast paths (f32) for softmax, layer norm and tanh-GELU,
// forward and backward, with the same meaning as the reference kernels (core/cpu/ref_kernels.h).
// Each returns false (and does nothing) when oneDNN cannot take the case, or would only run its
// slow reference implementation on this CPU ("ref:any"; e.g. softmax backward without
// AVX-512), so the caller falls back to its own kernel. Primitives are cached by shape and
// thread count. Whether a fast path is worth calling here is onednn_op_enabled(op), measured by
// bench/onednn_ops (docs/threading.md).
#pragma once
#include <cstddef>
#include <cstdint>

namespace ctx::cpu {

// x, y: [N, C]; y = softmax(x) (log: log_softmax(x)) over C.
bool onednn_softmax_f32(const float* x, float* y, int64_t N, int64_t C, bool log);
// y, dy, dx: [N, C]; y is the forward's output (softmax or log_softmax); dx overwritten.
bool onednn_softmax_backward_f32(const float* y, const float* dy, float* dx, int64_t N, int64_t C,
                                 bool log);

// x, y: [N, C]; w, b: [C] (b may be null: no bias); mean, rstd: [N] written.
// y = (x - mean) * rstd * w + b with rstd = 1 / sqrt(var + eps) (biased variance).
bool onednn_layernorm_f32(const float* x, const float* w, const float* b, float eps, float* y,
                          float* mean, float* rstd, int64_t N, int64_t C);
// dy, x, dx: [N, C]; w, dw, db: [C]; mean, rstd: [N] as saved by the forward.
// dx overwritten; dw and db accumulated (+=); db may be null (no bias).
bool onednn_layernorm_backward_f32(const float* dy, const float* x, const float* w,
                                   const float* mean, const float* rstd, float* dx, float* dw,
                                   float* db, int64_t N, int64_t C);

// x, y: [n]; y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
bool onednn_gelu_tanh_f32(const float* x, float* y, int64_t n);
// x, dy, dx: [n]; dx = dy * gelu_tanh'(x), overwritten.
bool onednn_gelu_tanh_backward_f32(const float* x, const float* dy, float* dx, int64_t n);

// Whether the fast path for `op` should be used (measured policy; CTXLAB_ONEDNN_OPS=all|none
// overrides). Ops: softmax, softmax_backward, log_softmax, log_softmax_backward, layernorm,
// layernorm_backward, gelu_tanh, gelu_tanh_backward. Unknown names throw ctx::Error.
bool onednn_op_enabled(const char* op);

// Primitives created so far by the functions above (tests: a shape seen before creates none).
size_t onednn_ops_cache_size();

}  // namespace ctx::cpu
