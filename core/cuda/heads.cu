// core/cuda/heads.cu — the head split / merge around attention and their backwards (Backend fused
// method Heads; the CPU twin is core/cpu/heads.cpp): pure data movement, exact, no reductions.
// Under --precision bf16 every one of them also writes its output's bf16 rounding (the kept copies
// the next GEMM or the attention reads, cuda_backend.cu's kept_bf16_slot).
#include <cstdint>

#include "core/cuda/bf16_out.cuh"  // store_bf16
#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"

namespace ctx::cuda {
namespace {

// Layout: qkv (B, S, 3D), D = H Dh; q (B, H, S - q0, Dh), k, v (B, H, S, Dh). One block per qkv row
// (b, s) (grid-stride over rows), V consecutive columns per thread (Dh % V == 0): the row's
// coordinates once per row, 32-bit column arithmetic (a 64-bit division per element made these
// kernels 4x slower than their memory traffic on an H200: 170 us for GPT-2 small's 75 MB).
// `fwd`: qkv -> q, k, v (q columns of rows < q0 dropped) and, where c16 has them, their bf16
// roundings at the same offsets; else dqkv from dq, dk, dv (null: zeros; q columns of rows < q0:
// zeros) and, where c16.q is given, dqkv's bf16 rounding there (the QKV Linear's output gradient).
template <class T, int V>
__global__ void split_heads_kernel(T* qkv, T* q, T* k, T* v, int64_t rows, int S, int H, int Dh, int q0, bool fwd,
                                   Bf16Outs c16) {
  using P = Pack<T, V>;
  const int D = H * Dh, Tq = S - q0, cols = 3 * D / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t b = r / S;
    const int s = (int)(r - b * S);
    P* row = reinterpret_cast<P*>(qkv + r * 3 * D);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const int col = c * V, part = col / D, h = (col - part * D) / Dh, j = col - part * D - h * Dh;
      T* dst = part == 0 ? (s >= q0 ? q + ((b * H + h) * Tq + (s - q0)) * Dh + j : nullptr)
                         : (part == 1 ? k : v) + ((b * H + h) * S + s) * Dh + j;
      if (fwd) {
        if (dst) {
          const P val = row[c];
          *reinterpret_cast<P*>(dst) = val;
          uint16_t* d16 = part == 0 ? c16.q : (part == 1 ? c16.k : c16.v);
          if (d16) store_bf16<T, V>(d16 + (dst - (part == 0 ? q : (part == 1 ? k : v))), val);
        }
      } else {
        const bool given = part == 0 ? q != nullptr : (part == 1 ? k : v) != nullptr;
        P val{};
        if (dst && given) val = *reinterpret_cast<const P*>(dst);
        row[c] = val;
        if (c16.q) store_bf16<T, V>(c16.q + r * 3 * D + col, val);
      }
    }
  }
}

// o (B, H, Tn, Dh) <-> merged (B, Tn, H Dh): one block per merged row (b, t), V columns a thread.
// to_merged: o -> merged; else merged -> o. dst16 (may be null): dst's bf16 rounding as well.
template <class T, int V>
__global__ void merge_heads_kernel(const T* src, T* dst, int64_t rows, int H, int Tn, int Dh, bool to_merged,
                                   uint16_t* dst16) {
  using P = Pack<T, V>;
  const int D = H * Dh, cols = D / V;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t b = r / Tn;
    const int t = (int)(r - b * Tn);
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
      const int col = c * V, h = col / Dh, j = col - h * Dh;
      const int64_t a = ((b * H + h) * Tn + t) * Dh + j, m = r * D + col;
      const int64_t to = to_merged ? m : a;
      const P val = *reinterpret_cast<const P*>(src + (to_merged ? a : m));
      *reinterpret_cast<P*>(dst + to) = val;
      if (dst16) store_bf16<T, V>(dst16 + to, val);
    }
  }
}

template <class T>
void split_heads_launch(T* qkv, T* q, T* k, T* v, int64_t B, int64_t S, int64_t H, int64_t Dh, int64_t q0,
                        bool fwd, Bf16Outs c16 = {}) {
  const int64_t rows = B * S;
  if (rows * 3 * H * Dh == 0) return;
  constexpr int V = kPack<T>;
  const bool wide = packs<T>(Dh, {qkv, q, k, v});
  const int threads = row_threads(3 * H * Dh / (wide ? V : 1));
  if (wide)
    CTX_LAUNCH((split_heads_kernel<T, V>), row_grid(rows), threads, 0, stream(), qkv, q, k, v, rows, (int)S, (int)H,
               (int)Dh, (int)q0, fwd, c16);
  else
    CTX_LAUNCH((split_heads_kernel<T, 1>), row_grid(rows), threads, 0, stream(), qkv, q, k, v, rows, (int)S, (int)H,
               (int)Dh, (int)q0, fwd, c16);
  CTX_CUDA_LAUNCH_CHECK("split_heads_kernel");
}

}  // namespace

template <class T>
void split_heads(const T* qkv, T* q, T* k, T* v, int64_t B, int64_t S, int64_t H, int64_t Dh, int64_t q0,
                 Bf16Outs c16) {
  split_heads_launch<T>(const_cast<T*>(qkv), q, k, v, B, S, H, Dh, q0, true, c16);  // fwd: qkv only read
}

template <class T>
void split_heads_backward(const T* dq, const T* dk, const T* dv, T* dqkv, int64_t B, int64_t S, int64_t H,
                          int64_t Dh, int64_t q0, uint16_t* dqkv16) {  // !fwd: dq, dk, dv only read
  Bf16Outs c16;
  c16.q = dqkv16;  // (the backward's one destination: dqkv's copy)
  split_heads_launch<T>(dqkv, const_cast<T*>(dq), const_cast<T*>(dk), const_cast<T*>(dv), B, S, H, Dh, q0, false,
                        c16);
}

template <class T>
void merge_heads(const T* src, T* dst, int64_t B, int64_t H, int64_t Tn, int64_t Dh, bool to_merged,
                 uint16_t* dst16) {
  const int64_t rows = B * Tn;
  if (rows * H * Dh == 0) return;
  constexpr int V = kPack<T>;
  const bool wide = packs<T>(Dh, {src, dst});
  const int threads = row_threads(H * Dh / (wide ? V : 1));
  if (wide)
    CTX_LAUNCH((merge_heads_kernel<T, V>), row_grid(rows), threads, 0, stream(), src, dst, rows, (int)H, (int)Tn, (int)Dh,
               to_merged, dst16);
  else
    CTX_LAUNCH((merge_heads_kernel<T, 1>), row_grid(rows), threads, 0, stream(), src, dst, rows, (int)H, (int)Tn, (int)Dh,
               to_merged, dst16);
  CTX_CUDA_LAUNCH_CHECK("merge_heads_kernel");
}

#define CTX_INST_HEADS(T)                                                                            \
  template void split_heads<T>(const T*, T*, T*, T*, int64_t, int64_t, int64_t, int64_t, int64_t, Bf16Outs); \
  template void split_heads_backward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, \
                                        int64_t, int64_t, uint16_t*);                                \
  template void merge_heads<T>(const T*, T*, int64_t, int64_t, int64_t, int64_t, bool, uint16_t*);
CTX_INST_HEADS(float)
CTX_INST_HEADS(double)

}  // namespace ctx::cuda
