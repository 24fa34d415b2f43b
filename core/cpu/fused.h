// core/cpu/fused.h — the CPU fused kernels at the tensor level: what CpuBackend's fused methods
// (core/backend.h, `Fused`) call, once Backend has checked the arguments (core/backend_checks.h).
// Each dispatches on dtype (f32 / f64) and runs the pointer kernel of its file:
//   attention_*        core/cpu/attention.cpp  -> flash_attention.h (tiled online softmax)
//   rope_rotate        core/cpu/rope.cpp
//   split/merge heads  core/cpu/heads.cpp
//   linear             core/cpu/linear.cpp     -> gemm.h (oneDNN bias epilogue, else beta = 1)
//   sum_squares, adamw_flat  core/cpu/flat_adamw.cpp
// Shapes and semantics: the matching Backend method in core/backend.h.
#pragma once
#include <memory>
#include <vector>

#include "core/backend.h"

namespace ctx::cpu {

void attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& bias, Tensor& out, Tensor& lse, const AttnRel& rel,
                       AttnRowStats* stats = nullptr);
void attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& bias, const Tensor& out, const Tensor& lse,
                        const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv, Tensor& dbias,
                        const AttnRel& rel, AttnRelGrad& drel);

void rope_rotate(const Tensor& x, const Tensor& C, const Tensor& S, Tensor& out, bool interleaved,
                 bool transpose);

// The same rotation on pointers (x, out [R, T, d]; C, S [T, d / 2]): the decoder's whole step.
void rope_rotate_rows_f32(const float* x, const float* C, const float* S, float* out, int64_t R, int64_t T, int64_t d,
                          bool interleaved);

void split_heads(const Tensor& qkv, int64_t H, int64_t q_begin, Tensor& q, Tensor& k, Tensor& v);
void split_heads_backward(const Tensor& dq, const Tensor& dk, const Tensor& dv, int64_t H,
                          int64_t q_begin, Tensor& dqkv);
void merge_heads(const Tensor& o, Tensor& out);
void merge_heads_backward(const Tensor& dout, Tensor& d_o);

void linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// Backend::make_decode_step on the CPU (core/cpu/decode_step.cpp): null where the GEMV kernels
// are missing for the precision in force (core/cpu/gemv.h) or a GEMM implementation was chosen.
std::unique_ptr<DecodeStep> make_decode_step(const DecodeStack& s, int threads);
// How many packs of a stack's weights the CPU's decode steps have made (process-wide): a step made
// over weights the model's DecodeKeep already packed, unchanged, makes none (for the tests).
int64_t decode_packs_made();

void sum_squares(const Tensor& x, const std::vector<FlatChunk>& chunks, Tensor& out);
void adamw_flat(Tensor& p, const Tensor& g, Tensor& m, Tensor& v,
                const std::vector<FlatChunk>& chunks, const AdamWHyper& h, const Tensor& norm_sq);

}  // namespace ctx::cpu
