// core/cuda/kernels.h — the host-side entry points of the CUDA kernels, one group per file.
// Pointers are device pointers; sizes are element counts; every launcher checks its launch and
// queues the kernel on the default stream (the caller synchronises where it reads results).
// Shapes follow core/backend.h. Templates are instantiated for T in {float, double} (fill,
// copy, convert: also int32_t, int64_t) and index types I in {int32_t, int64_t}.
#pragma once
#include <cstdint>

#include "core/backend.h"       // UnaryOp, BinaryOp, GemmDesc
#include "core/causal_rows.h"
#include "core/cuda/nd_index.h"

namespace ctx::cuda {

// --- memory.cu ---
template <class T> void fill(T* x, int64_t n, T v);
// dst[i] = v[i], i < n: the values as kernel arguments (kSetValues a launch), no host copy
void set_values(int64_t* dst, const int64_t* v, int64_t n);
// dst[off_d(i)] (+)= src[off_s(i)] for every i of nd's shape; operand 0 = src, 1 = dst.
// `serial`: one thread walks everything in order (a destination that overlaps itself).
template <class T> void copy_strided(const T* src, T* dst, const NdStrides<2>& nd, int64_t n,
                                     bool accumulate, bool serial);
template <class S, class D> void convert(const S* src, D* dst, int64_t n);

// --- elementwise.cu ---
// y16 / dx16 (or null): the output's bf16 rounding as well (a kept copy: kept_bf16_slot)
template <class T> void unary(UnaryOp op, const T* x, T* y, int64_t n, T a, T b, uint16_t* y16 = nullptr);
template <class T> void unary_backward(UnaryOp op, const T* x, const T* y, const T* dy, T* dx,
                                       int64_t n, T a, T b, uint16_t* dx16 = nullptr);
// out[i] = a[off_a(i)] op b[off_b(i)], out contiguous; operand 0 = a, 1 = b.
template <class T> void binary(BinaryOp op, const T* a, const T* b, T* out, const NdStrides<2>& nd,
                               int64_t n);
// y[i] = mask[off_m(i)] != 0 ? t : f, where t / f is a tensor (non-null pointer, contiguous like
// y) or else the scalar ts / fs; operand 0 = mask.
template <class T, class M> void select(const M* mask, const T* t, T ts, const T* f, T fs, T* y,
                                        const NdStrides<1>& nd, int64_t n);
// x [N, Tq, S]: x[n, i, j] = v where j > i + diag, or (window > 0) j <= i + diag - window
template <class T> void causal_fill(T* x, int64_t N, int64_t Tq, int64_t S, T v, int64_t diag,
                                    int64_t window);
// y[i] = x[i] * m.factor(i) (core/dropout_mask.h: the mask computed in the kernel, never uploaded)
template <class T> void dropout(const T* x, T* y, int64_t n, const DropoutMask& m);

// --- reduce.cu ---
// out[o] = sum_r x[kept.off(o) + red.off(r)]: kept walks out's elements (no of them), red the
// summed dims (L elements); one block per output, a fixed tree per block.
template <class T> void reduce_sum(const T* x, T* out, const NdStrides<1>& kept, int64_t no,
                                   const NdStrides<1>& red, int64_t L);
// out[c] += sum_k part[k, c] in a fixed order (part [K, C]): the second pass of column sums
template <class T> void column_sum_add(const T* part, T* out, int64_t K, int64_t C);
// out[c] = sum over the rows of x [R, C] (part [column_chunks(R), C] scratch): two coalesced passes
template <class T> void column_sums(const T* x, T* part, T* out, int64_t R, int64_t C);
// rows per chunk for the first pass over [N, C] (depends only on N)
int64_t column_chunks(int64_t N);

// --- softmax_loss.cu ---
// x, y [N, C] over the last dim; with rows.Tq > 0 only over each row's visible columns (0 / -inf
// elsewhere: Backend::causal_softmax, core/causal_rows.h)
template <class T> void softmax(const T* x, T* y, int64_t N, int64_t C, bool log, CausalRows rows = {});
template <class T> void softmax_backward(const T* y, const T* dy, T* dx, int64_t N, int64_t C,
                                         bool log, CausalRows rows = {});
// logits [N, V], targets [N] (validated: -1 <= t < V), loss, lse [N]; dlogits16 (f32, or null):
// dlogits rounded to bf16 too, in the same pass (a kept copy for the LM head's bf16 GEMMs)
template <class T, class I> void cross_entropy(const T* logits, const I* tgt, T* loss, T* lse,
                                               int64_t N, int64_t V);
template <class T, class I> void cross_entropy_backward(const T* logits, const I* tgt,
                                                        const T* lse, const T* dloss, T* dlogits,
                                                        uint16_t* dlogits16, int64_t N, int64_t V);

// --- norm.cu ---  (x, y, dy, dx [N, C]; w, b, dw, db [C]; mean, rstd [N]; part [2, K, C] scratch
// (RMSNorm: [K, C]) with K = norm_part_chunks(N)). y16 (or null): y rounded to bf16 too. a, h
// [N, C] (or null): the norm of h = x + a, h written in the same pass (Backend::add_layernorm).
// dres [N, C] (or null): dx = dres + the gradient, dres may be dx.
int64_t norm_part_chunks(int64_t N);
template <class T> void layernorm(const T* x, const T* w, const T* b, T eps, T* y, T* mean,
                                  T* rstd, int64_t N, int64_t C,
                                  uint16_t* y16 = nullptr, const T* a = nullptr, T* h = nullptr);
template <class T> void layernorm_backward(const T* dy, const T* x, const T* w, const T* mean,
                                           const T* rstd, T* dx, T* dw, T* db, T* part,
                                           int64_t N, int64_t C, const T* dres = nullptr);
template <class T> void rmsnorm(const T* x, const T* w, T eps, T* y, T* rstd, int64_t N,
                                int64_t C, uint16_t* y16 = nullptr, const T* a = nullptr,
                                T* h = nullptr);
template <class T> void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd,
                                         T* dx, T* dw, T* part, int64_t N, int64_t C,
                                         const T* dres = nullptr);

// --- index.cu ---  (x viewed as [outer, n, inner]; m indices, already range-checked)
template <class T, class I> void index_select(const T* x, const I* idx, T* out, int64_t outer,
                                              int64_t n, int64_t m, int64_t inner);
// Scatter-add through a bucket plan (index_plan.h: [U | rows U | starts U + 1 | pos m], int64,
// built on the host or by index_plan): each output element adds its sources in index order, the
// CPU's bits. The kernel reads U from plan[0]; the grid is sized for `rows_bound` >= U rows (the
// host plan: U; a device plan: m, so that the launch does not depend on U).
template <class T> void index_add(T* out, const int64_t* plan, int64_t rows_bound, const T* src,
                                  int64_t outer, int64_t n, int64_t m, int64_t inner);

// --- index_plan.cu ---  (idx [m] with values in [0, n), proven by the caller; plan: plan_capacity(m)
// int64, cur: n int64 scratch) index_add's plan built on the device: launch sizes depend only on
// m and n, no host round trip, the host plan's bits.
template <class I> void index_plan(const I* idx, int64_t m, int64_t n, int64_t* plan, int64_t* cur);

// --- optim.cu ---
template <class T> void adamw(T* p, const T* g, T* m, T* v, int64_t n, T decay, T b1, T b2,
                              T eps, T step_size, T bc2_sqrt);

// --- rope.cu, heads.cu --- (x, out [R, Tn, d]; C, S [Tn, d/2]; qkv [B, S, 3 H Dh]; q [B, H, S - q0, Dh];
// k, v [B, H, S, Dh]; merged [B, Tn, H Dh], o [B, H, Tn, Dh])
template <class T> void rope_rotate(const T* x, const T* C, const T* S, T* out, int64_t R, int64_t Tn, int64_t d,
                                    bool interleaved, bool transpose);
// Destinations for an output's bf16 rounding, written by the kernel in the same pass (kept copies,
// cuda_backend.cu's kept_bf16_slot); null: none. f32 only.
struct Bf16Outs {
  uint16_t *q = nullptr, *k = nullptr, *v = nullptr;
};
template <class T> void split_heads(const T* qkv, T* q, T* k, T* v, int64_t B, int64_t S, int64_t H, int64_t Dh,
                                    int64_t q0, Bf16Outs c16 = {});
// dq / dk / dv may be null (zeros); dqkv16 (or null): dqkv's bf16 rounding as well
template <class T> void split_heads_backward(const T* dq, const T* dk, const T* dv, T* dqkv, int64_t B, int64_t S,
                                             int64_t H, int64_t Dh, int64_t q0, uint16_t* dqkv16 = nullptr);
// to_merged: src = o, dst = merged; else src = merged, dst = o; dst16 (or null): dst's bf16 rounding
template <class T> void merge_heads(const T* src, T* dst, int64_t B, int64_t H, int64_t Tn, int64_t Dh,
                                    bool to_merged, uint16_t* dst16 = nullptr);

// --- flat_adamw.cu --- tiles [ntiles, 3] = (begin, end, decay) of the flat buffers, each at most
// kFlatTile elements of one chunk, in chunk order (built on the host by the backend)
constexpr int64_t kFlatTile = 16384;
// part [ntiles] f64 scratch; out [1] f64 = sum of x^2 over the tiles (fixed order)
template <class T> void sum_squares_tiles(const T* x, const int64_t* tiles, int64_t ntiles, double* part,
                                          double* out);
// norm_sq: null or [1] f64 on the device (sum_squares' output) for clipping; p16 (or null): the
// updated p's bf16 rounding written as well (every element of the tiles)
template <class T> void adamw_tiles(T* p, const T* g, T* m, T* v, const int64_t* tiles, int64_t ntiles,
                                    const double* norm_sq, const AdamWHyper& h, uint16_t* p16 = nullptr);

// --- gemm.cu --- (row-major, see GemmDesc; the one row-major -> column-major translation)
// Operands already rounded to bf16 (bf16 bits, the same layout as A / B: a tensor's kept copy,
// cuda_backend.cu's kept_bf16): under --precision bf16 gemm_lt reads them instead of converting
// A / B; null: converted as usual. Ignored in the other modes.
struct Bf16Operands {
  const uint16_t* a = nullptr;
  const uint16_t* b = nullptr;
};
template <class T> void gemm(const GemmDesc& g, const T* A, const T* B, T* C, Bf16Operands kept = {});
// Row-major C[M, N] = alpha op(A) op(B) + bias[N] (broadcast over the M rows), the bias added in
// cuBLASLt's epilogue (CUBLASLT_EPILOGUE_BIAS), where the speed modes (bf16, tf32) take the GEMM
// and g.beta == 0. Returns false, doing nothing, where they do not (exact fp32, K == 0, a bias
// not 16-byte aligned): the caller broadcasts the bias into C and runs gemm with beta = 1.
bool gemm_bias_epilogue(const GemmDesc& g, const float* A, const float* B, const float* bias, float* C,
                        Bf16Operands kept = {});
// The MLP's GELU epilogues, under the same conditions (one batch item, N a multiple of 8, aux
// 16-byte aligned) and also false where cuBLASLt has no algorithm for them (the caller composes):
//   gemm_gelu_aux_bias  aux = op(A) op(B) + bias[N], C = gelu_tanh(aux)   (GELU_AUX_BIAS)
//   gemm_dgelu          C = op(A) op(B) * gelu_tanh'(aux)                  (DGELU)
bool gemm_gelu_aux_bias(const GemmDesc& g, const float* A, const float* B, const float* bias, float* aux, float* C,
                        Bf16Operands kept = {});
bool gemm_dgelu(const GemmDesc& g, const float* A, const float* B, const float* aux, float* C,
                Bf16Operands kept = {});

}  // namespace ctx::cuda
