// core/cuda/heads.cu — the head split / merge around attention and their backwards (Backend fused
// method Heads; the CPU twin is core/cpu/heads.cpp): one thread per element, exact, no reductions.
#include <cstdint>

#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// qkv is (B, S, 3D), D = H Dh; q (B, H, S - q0, Dh), k, v (B, H, S, Dh): one thread per qkv element
template <class T>
__global__ void split_heads_kernel(const T* qkv, T* q, T* k, T* v, int64_t B, int64_t S, int64_t H, int64_t Dh,
                                   int64_t q0) {
  const int64_t D = H * Dh, Tq = S - q0;
  CTX_GRID_STRIDE(e, B * S * 3 * D) {
    const int64_t col = e % (3 * D), s = (e / (3 * D)) % S, b = e / (3 * D * S);
    const int64_t part = col / D, h = (col % D) / Dh, j = col % Dh;
    if (part == 0) {
      if (s >= q0) q[((b * H + h) * Tq + (s - q0)) * Dh + j] = qkv[e];
    } else {
      (part == 1 ? k : v)[((b * H + h) * S + s) * Dh + j] = qkv[e];
    }
  }
}

// the transpose: dqkv (B, S, 3D) from dq, dk, dv (null: zeros; q columns of rows < q0: zeros)
template <class T>
__global__ void split_heads_backward_kernel(const T* dq, const T* dk, const T* dv, T* dqkv, int64_t B, int64_t S,
                                            int64_t H, int64_t Dh, int64_t q0) {
  const int64_t D = H * Dh, Tq = S - q0;
  CTX_GRID_STRIDE(e, B * S * 3 * D) {
    const int64_t col = e % (3 * D), s = (e / (3 * D)) % S, b = e / (3 * D * S);
    const int64_t part = col / D, h = (col % D) / Dh, j = col % Dh;
    T val = T(0);
    if (part == 0) {
      if (dq && s >= q0) val = dq[((b * H + h) * Tq + (s - q0)) * Dh + j];
    } else {
      const T* src = part == 1 ? dk : dv;
      if (src) val = src[((b * H + h) * S + s) * Dh + j];
    }
    dqkv[e] = val;
  }
}

// to_merged: o (B, H, Tn, Dh) -> merged (B, Tn, H Dh); else the reverse. One thread per element
// of the merged layout.
template <class T>
__global__ void merge_heads_kernel(const T* src, T* dst, int64_t B, int64_t H, int64_t Tn, int64_t Dh,
                                   bool to_merged) {
  const int64_t D = H * Dh;
  CTX_GRID_STRIDE(e, B * Tn * D) {
    const int64_t j = e % Dh, h = (e / Dh) % H, t = (e / D) % Tn, b = e / (D * Tn);
    const int64_t a = ((b * H + h) * Tn + t) * Dh + j;
    if (to_merged) dst[e] = src[a];
    else dst[a] = src[e];
  }
}

}  // namespace

template <class T>
void split_heads(const T* qkv, T* q, T* k, T* v, int64_t B, int64_t S, int64_t H, int64_t Dh, int64_t q0) {
  const int64_t n = B * S * 3 * H * Dh;
  if (n == 0) return;
  CTX_LAUNCH(split_heads_kernel<T>, grid_for(n), kThreads, 0, 0, qkv, q, k, v, B, S, H, Dh, q0);
  CTX_CUDA_LAUNCH_CHECK("split_heads_kernel");
}

template <class T>
void split_heads_backward(const T* dq, const T* dk, const T* dv, T* dqkv, int64_t B, int64_t S, int64_t H,
                          int64_t Dh, int64_t q0) {
  const int64_t n = B * S * 3 * H * Dh;
  if (n == 0) return;
  CTX_LAUNCH(split_heads_backward_kernel<T>, grid_for(n), kThreads, 0, 0, dq, dk, dv, dqkv, B, S, H, Dh, q0);
  CTX_CUDA_LAUNCH_CHECK("split_heads_backward_kernel");
}

template <class T>
void merge_heads(const T* src, T* dst, int64_t B, int64_t H, int64_t Tn, int64_t Dh, bool to_merged) {
  const int64_t n = B * H * Tn * Dh;
  if (n == 0) return;
  CTX_LAUNCH(merge_heads_kernel<T>, grid_for(n), kThreads, 0, 0, src, dst, B, H, Tn, Dh, to_merged);
  CTX_CUDA_LAUNCH_CHECK("merge_heads_kernel");
}

#define CTX_INST_HEADS(T)                                                                            \
  template void split_heads<T>(const T*, T*, T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t);   \
  template void split_heads_backward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                        int64_t, int64_t);                                           \
  template void merge_heads<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, bool);
CTX_INST_HEADS(float)
CTX_INST_HEADS(double)

}  // namespace ctx::cuda
