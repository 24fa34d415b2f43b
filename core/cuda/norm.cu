// core/cuda/norm.cu — LayerNorm and RMSNorm, forward and backward side by side.
// Rows of C <= 1024: one warp a row, the row in registers; the backward is one pass over dy and x
// that also keeps each lane's partial weight / bias gradients in registers, written per block as
// part [2, K, C] (K = norm_row_blocks(N)), then column_sum_add adds the K partials (fixed order) into
// dw / db (accumulated, as the interface says). Wider rows: one block per row, row statistics
// through the fixed trees of block_reduce.cuh, and the weight gradients in a second pass (K row
// chunks, reduce.cu: column_chunks, each writing a partial, then column_sum_add). No atomics,
// grids fixed by the shape: deterministic.
// The residual add fused in (Backend::add_layernorm / add_rmsnorm, FastPath::AddNorm): the forward
// reads x and a, writes h = x + a and normalises h from the same registers; the backward adds dx
// into the residual stream's gradient dres as it writes it (one pass fewer each way).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/cuda/bf16_out.cuh"       // bf16_bits
#include "core/cuda/block_reduce.cuh"  // block_reduce, warp_reduce
#include "core/cuda/check.h"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.h"
#include "core/cuda/shared_opt_in.h"  // allow_shared

namespace ctx::cuda {
namespace {

// dx's element: the norm's gradient t, plus dres[i] where the residual stream's gradient is summed
// in. The add is never contracted into an fma with t's product (the _rn intrinsics), so dx has the
// bits of the composed path: t stored, then added by its own kernel.
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }
template <class T>
__device__ inline T plus_residual(const T* dres, int64_t i, T t) { return dres ? add_rn(dres[i], t) : t; }

// Row n of the norm's input: x's, or with a (and h) h = x + a written by this thread's columns
// (c = threadIdx.x + k blockDim.x), which only this thread reads back. Returns the row to read.
template <class T>
__device__ const T* residual_row(const T* x, const T* a, T* h, int64_t n, int64_t C) {
  if (!a) return x + n * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) h[n * C + c] = x[n * C + c] + a[n * C + c];
  return h + n * C;
}

// x, y are (N, C); w, b (b may be null) are (C); mean, rstd are (N); y16 (or null): y's bf16
// rounding; a, h (or null): the norm of h = x + a, h written
template <class T>
__global__ void layernorm_kernel(const T* x, const T* a, T* h, const T* w, const T* b, T eps, T* y, T* mean,
                                 T* rstd, int64_t N, int64_t C, uint16_t* y16) {
  CTX_DYNAMIC_SHARED(T, buf);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = residual_row(x, a, h, n, C);
    T* yr = y + n * C;
    T m = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) m += xr[c];
    m = block_reduce(m, buf, SumOp()) / T(C);
    T v = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) v += (xr[c] - m) * (xr[c] - m);
    v = block_reduce(v, buf, SumOp()) / T(C);
    const T r = T(1) / std::sqrt(v + eps);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      yr[c] = b ? (xr[c] - m) * r * w[c] + b[c] : (xr[c] - m) * r * w[c];
      if (y16) y16[n * C + c] = bf16_bits(yr[c]);
    }
    if (threadIdx.x == 0) {
      mean[n] = m;
      rstd[n] = r;
    }
  }
}

// dy, x, dx are (N, C); w is (C); mean, rstd are (N): dx = r (g w - mean(g w) - xh mean(g w xh))
template <class T>
__global__ void layernorm_backward_dx_kernel(const T* dy, const T* x, const T* w, const T* mean,
                                             const T* rstd, const T* dres, T* dx, int64_t N, int64_t C) {
  CTX_DYNAMIC_SHARED(T, buf);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* g = dy + n * C;
    const T* xr = x + n * C;
    T* d = dx + n * C;
    const T m = mean[n], r = rstd[n];
    T sg = T(0), sgx = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const T xh = (xr[c] - m) * r;
      const T gw = g[c] * w[c];
      sg += gw;
      sgx += gw * xh;
    }
    sg = block_reduce(sg, buf, SumOp()) / T(C);
    sgx = block_reduce(sgx, buf, SumOp()) / T(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      const T xh = (xr[c] - m) * r;
      d[c] = plus_residual(dres, n * C + c, r * (g[c] * w[c] - sg - xh * sgx));
    }
  }
}

// ---- LayerNorm rows of C <= 32 P (P <= 32) columns: one warp a row, the row in registers (lane l
// holds columns l, l + 32, ...), sums by warp_reduce: no shared memory, no barrier, x read once.
// (One block a row took 37 us forward, 113 us backward per GPT-2 small call on an H200.)
constexpr int kRowWarps = 8;  // rows per block of 256 threads
__device__ inline unsigned full_mask() { return 0xffffffffu; }
template <class T>
__device__ T warp_sum(T v) { return warp_reduce(v, full_mask(), 32, SumOp()); }

// mean null: RMSNorm (y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps), b unused). a, h (or null):
// the norm of h = x + a, h written from the registers that hold it.
template <class T, int P>
__global__ void norm_warp_kernel(const T* x, const T* a, T* h, const T* w, const T* b, T eps, T* y, T* mean,
                                 T* rstd, int64_t N, int C, uint16_t* y16) {
  const int lane = threadIdx.x % 32;
  for (int64_t n = blockIdx.x * (int64_t)kRowWarps + threadIdx.x / 32; n < N; n += (int64_t)gridDim.x * kRowWarps) {
    const T* xr = x + n * C;
    T v[P], s = T(0);
    CTX_UNROLL
    for (int i = 0; i < P; ++i) {  // every load of the row before any store (h may alias nothing,
      const int c = lane + 32 * i;  // but the compiler cannot know: a store between the loads kept
      v[i] = c < C ? xr[c] : T(0);  // them one at a time, 2.3x slower on an H200)
      if (a && c < C) v[i] += a[n * C + c];
      s += mean ? v[i] : v[i] * v[i];
    }
    if (a) {
      CTX_UNROLL
      for (int i = 0; i < P; ++i)
        if (lane + 32 * i < C) h[n * C + lane + 32 * i] = v[i];
    }
    T m = T(0), r;
    if (mean) {
      m = warp_sum(s) / T(C);
      T q = T(0);
      CTX_UNROLL
      for (int i = 0; i < P; ++i)
        if (lane + 32 * i < C) q += (v[i] - m) * (v[i] - m);
      r = T(1) / std::sqrt(warp_sum(q) / T(C) + eps);
    } else {
      r = T(1) / std::sqrt(warp_sum(s) / T(C) + eps);
    }
    CTX_UNROLL
    for (int i = 0; i < P; ++i) {
      const int c = lane + 32 * i;
      if (c < C) {
        const T yv = !mean ? v[i] * r * w[c] : b ? (v[i] - m) * r * w[c] + b[c] : (v[i] - m) * r * w[c];
        y[n * C + c] = yv;
        if (y16) y16[n * C + c] = bf16_bits(yv);
      }
    }
    if (lane == 0) {
      if (mean) mean[n] = m;
      rstd[n] = r;
    }
  }
}

// The backward of a norm over rows of C <= 32 P columns, in one pass over dy and x: one warp a row
// as above, dx from the row in registers, and the weight gradients' partial sums on the way: lane l
// adds dy * xh (dw) and dy (db) of its columns l, l + 32, ... into its warp's own slice of shared
// memory, over the rows the warp visits in their order (warp j of block b: rows b kRowWarps + j +
// i gridDim.x kRowWarps, i = 0, 1, ...). Then thread t adds column c's slices in warp order into
// part[0, b, c] (dw) and part[1, b, c] (db, with_bias), and column_sum_add adds the blocks in a
// fixed order. The grid (norm_row_blocks) depends only on N: the same bits on every run, schedule
// and device. (dy and x used to be read a second time, by norm_dweight_partial_kernel.) The sums
// live in shared memory, not registers: with them in registers (4 P a lane, 128-209 registers)
// the kernel ran at ~37% of an H200's DRAM bandwidth, latency-bound. LayerNorm: xh = (x - mean)
// rstd, dx = rstd (g w - mean(g w) - xh mean(g w xh)); RMSNorm (mean null): xh = x rstd,
// dx = rstd (g w - xh mean(g w xh)).
template <class T, int P>
__global__ void norm_backward_warp_kernel(const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                                          const T* dres, T* dx, T* part, int64_t N, int C, bool with_bias) {
  CTX_DYNAMIC_SHARED(T, sh);  // [kRowWarps][2][C]: warp j's sums of dy xh and dy (dynamic: see below)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  T* sw = sh + (int64_t)warp * 2 * C;  // this warp's [2][C]; lane l alone touches its columns
  CTX_UNROLL
  for (int i = 0; i < P; ++i) {
    const int c = lane + 32 * i;
    if (c < C) sw[c] = sw[C + c] = T(0);
  }
  for (int64_t n = blockIdx.x * (int64_t)kRowWarps + warp; n < N; n += (int64_t)gridDim.x * kRowWarps) {
    const T m = mean ? mean[n] : T(0), r = rstd[n];
    T gw[P], xh[P], sg = T(0), sgx = T(0);
    CTX_UNROLL
    for (int i = 0; i < P; ++i) {
      const int c = lane + 32 * i;
      const T g = c < C ? dy[n * C + c] : T(0);
      xh[i] = c < C ? (x[n * C + c] - m) * r : T(0);
      gw[i] = c < C ? g * w[c] : T(0);
      if (c < C) sw[c] += g * xh[i], sw[C + c] += g;
      sg += gw[i];
      sgx += gw[i] * xh[i];
    }
    sg = mean ? warp_sum(sg) / T(C) : T(0);
    sgx = warp_sum(sgx) / T(C);
    CTX_UNROLL
    for (int i = 0; i < P; ++i) gw[i] = r * (gw[i] - sg - xh[i] * sgx);  // the norm's gradient
    if (dres) {  // dres's row loaded whole before dx is stored (dres may be dx; interleaved, the
      CTX_UNROLL  // loads waited on the stores one at a time)
      for (int i = 0; i < P; ++i) xh[i] = lane + 32 * i < C ? dres[n * C + lane + 32 * i] : T(0);
      CTX_UNROLL
      for (int i = 0; i < P; ++i) gw[i] = add_rn(xh[i], gw[i]);
    }
    CTX_UNROLL
    for (int i = 0; i < P; ++i)
      if (lane + 32 * i < C) dx[n * C + lane + 32 * i] = gw[i];
  }
  __syncthreads();
  // part[0 / 1, b, c] = ((warp 0 + warp 1) + warp 2) + ...
  const int64_t K = gridDim.x, b = blockIdx.x;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    T s = sh[c], t = sh[C + c];
    for (int j = 1; j < kRowWarps; ++j) s += sh[(int64_t)j * 2 * C + c], t += sh[(int64_t)j * 2 * C + C + c];
    part[b * C + c] = s;
    if (with_bias) part[K * C + b * C + c] = t;
  }
}

// CALL with constexpr int P = the registers a lane needs for C columns (C <= 1024)
#define CTX_ROW_REGS(C, CALL)                                   \
  do {                                                          \
    if ((C) <= 128) { constexpr int P = 4; CALL; }              \
    else if ((C) <= 256) { constexpr int P = 8; CALL; }         \
    else if ((C) <= 512) { constexpr int P = 16; CALL; }        \
    else if ((C) <= 768) { constexpr int P = 24; CALL; }        \
    else { constexpr int P = 32; CALL; }                        \
  } while (0)
constexpr int64_t kWarpRowMaxC = 1024;
inline unsigned warp_row_grid(int64_t N) {
  return (unsigned)std::max<int64_t>(1, std::min<int64_t>((N + kRowWarps - 1) / kRowWarps, 65535));
}
// Blocks of norm_backward_warp_kernel = K, the rows of its partial sums [2, K, C]: a warp takes
// at least kMinWarpRows rows (fewer partials to add for mid-sized N), and K is at most kRowBlocks
// (256 blocks of 8 warps: one wave on a 132-SM H100 / H200 at 2-3 blocks an SM; GPT-2 small's
// N = 8192 rows gives each warp 4 rows). Depends only on N.
constexpr int64_t kMinWarpRows = 2, kRowBlocks = 256;
int64_t norm_row_blocks(int64_t N) {
  return std::max<int64_t>(1, std::min<int64_t>((N + kRowWarps * kMinWarpRows - 1) / (kRowWarps * kMinWarpRows),
                                                kRowBlocks));
}

// First pass of the weight gradients. dy, x are (N, C); mean, rstd (N); part is (2, K, C):
// part[0, k, c] = sum over chunk k's rows of dy * xh (LayerNorm: xh = (x - mean) rstd; RMSNorm:
// xh = x rstd, mean null), part[1, k, c] = sum of dy (LayerNorm bias). Block (32, kLanes): 32
// columns of chunk blockIdx.y; lane y sums the chunk's rows y, y + kLanes, ... in order, then the
// lanes are added in order (fixed: deterministic). kLanes rows in flight per column: one thread
// per column walking a 128-row chunk left GPT-2 small's LayerNorm backward latency-bound on an
// H200 (128 us a call for 50 MB).
constexpr int kLanes = 8;
template <class T>
__global__ void norm_dweight_partial_kernel(const T* dy, const T* x, const T* mean, const T* rstd, T* part,
                                            int64_t N, int64_t C, int64_t K, bool with_bias) {
  CTX_DYNAMIC_SHARED(T, sh);  // [2][kLanes][32]: the lanes' sums (dynamic: the emulator keeps a static
  T* sw_l = sh;               // __shared__ array in static TLS, which dlopen cannot grow)
  T* sb_l = sh + kLanes * 32;
  const int64_t rows = (N + K - 1) / K, k = blockIdx.y, c = blockIdx.x * (int64_t)32 + threadIdx.x;
  T sw = T(0), sb = T(0);
  if (c < C)
    for (int64_t n = k * rows + threadIdx.y; n < N && n < (k + 1) * rows; n += kLanes) {
      const T g = dy[n * C + c];
      const T xh = (x[n * C + c] - (mean ? mean[n] : T(0))) * rstd[n];
      sw += g * xh;
      sb += g;
    }
  sw_l[threadIdx.y * 32 + threadIdx.x] = sw;
  sb_l[threadIdx.y * 32 + threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < C) {
    for (int y = 1; y < kLanes; ++y) sw += sw_l[y * 32 + threadIdx.x], sb += sb_l[y * 32 + threadIdx.x];
    part[k * C + c] = sw;
    if (with_bias) part[K * C + k * C + c] = sb;
  }
}

// x, y are (N, C); w is (C); rstd is (N): y = x rstd w, rstd = 1 / sqrt(mean(x^2) + eps)
template <class T>
__global__ void rmsnorm_kernel(const T* x, const T* a, T* h, const T* w, T eps, T* y, T* rstd, int64_t N, int64_t C,
                               uint16_t* y16) {
  CTX_DYNAMIC_SHARED(T, buf);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = residual_row(x, a, h, n, C);
    T s = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += xr[c] * xr[c];
    s = block_reduce(s, buf, SumOp());
    const T r = T(1) / std::sqrt(s / T(C) + eps);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
      y[n * C + c] = xr[c] * r * w[c];
      if (y16) y16[n * C + c] = bf16_bits(y[n * C + c]);
    }
    if (threadIdx.x == 0) rstd[n] = r;
  }
}

// dy, x, dx are (N, C); w is (C); rstd is (N): dx = g w r - x r^3 sum(g w x) / C
template <class T>
__global__ void rmsnorm_backward_dx_kernel(const T* dy, const T* x, const T* w, const T* rstd, const T* dres,
                                           T* dx, int64_t N, int64_t C) {
  CTX_DYNAMIC_SHARED(T, buf);
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* g = dy + n * C;
    const T* xr = x + n * C;
    const T r = rstd[n];
    T s = T(0);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x) s += g[c] * w[c] * xr[c];
    s = block_reduce(s, buf, SumOp());
    const T k = s * r * r * r / T(C);
    for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
      dx[n * C + c] = plus_residual(dres, n * C + c, g[c] * w[c] * r - xr[c] * k);
  }
}

template <class T>
void dweight(const T* dy, const T* x, const T* mean, const T* rstd, T* dw, T* db, T* part, int64_t N,
             int64_t C) {
  const int64_t K = column_chunks(N);
  CTX_LAUNCH(norm_dweight_partial_kernel<T>, dim3((unsigned)((C + 31) / 32), (unsigned)K), dim3(32, kLanes),
             2 * kLanes * 32 * sizeof(T), stream(),
             dy, x, mean, rstd, part, N, C, K, db != nullptr);
  CTX_CUDA_LAUNCH_CHECK("norm_dweight_partial_kernel");
  column_sum_add(part, dw, K, C);
  if (db) column_sum_add(part + K * C, db, K, C);
}

// mean null: RMSNorm (b unused); a, h (or null): the norm of h = x + a, h written
template <class T>
void norm_forward(const T* x, const T* a, T* h, const T* w, const T* b, T eps, T* y, T* mean, T* rstd, int64_t N,
                  int64_t C, uint16_t* y16) {
  if (N == 0 || C == 0) return;
  if (C <= kWarpRowMaxC) {
    CTX_ROW_REGS(C, (CTX_LAUNCH((norm_warp_kernel<T, P>), warp_row_grid(N), 32 * kRowWarps, 0, stream(), x, a, h, w,
                                b, eps, y, mean, rstd, N, (int)C, y16)));
    CTX_CUDA_LAUNCH_CHECK("norm_warp_kernel");
    return;
  }
  const int th = row_threads(C);
  if (mean) {
    CTX_LAUNCH(layernorm_kernel<T>, row_grid(N), th, th * sizeof(T), stream(), x, a, h, w, b, eps, y, mean, rstd, N,
               C, y16);
    CTX_CUDA_LAUNCH_CHECK("layernorm_kernel");
  } else {
    CTX_LAUNCH(rmsnorm_kernel<T>, row_grid(N), th, th * sizeof(T), stream(), x, a, h, w, eps, y, rstd, N, C, y16);
    CTX_CUDA_LAUNCH_CHECK("rmsnorm_kernel");
  }
}

// C <= kWarpRowMaxC: dx, dw and db in one pass (norm_backward_warp_kernel), then the blocks' partials
// added (column_sum_add); mean null: RMSNorm
template <class T>
void norm_backward_rows(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, const T* dres, T* dx,
                        T* dw, T* db, T* part, int64_t N, int64_t C) {
  const int64_t K = norm_row_blocks(N);
  const size_t smem = (size_t)kRowWarps * 2 * C * sizeof(T);  // <= 128 KiB (fp64, C = 1024)
  CTX_ROW_REGS(C, (allow_shared(norm_backward_warp_kernel<T, P>, smem),
                   CTX_LAUNCH((norm_backward_warp_kernel<T, P>), (unsigned)K, 32 * kRowWarps, smem, stream(), dy, x, w,
                              mean, rstd, dres, dx, part, N, (int)C, db != nullptr)));
  CTX_CUDA_LAUNCH_CHECK("norm_backward_warp_kernel");
  column_sum_add(part, dw, K, C);
  if (db) column_sum_add(part + K * C, db, K, C);
}

}  // namespace

template <class T>
void layernorm(const T* x, const T* w, const T* b, T eps, T* y, T* mean, T* rstd, int64_t N, int64_t C,
               uint16_t* y16, const T* a, T* h) {
  norm_forward(x, a, h, w, b, eps, y, mean, rstd, N, C, y16);
}

template <class T>
void layernorm_backward(const T* dy, const T* x, const T* w, const T* mean, const T* rstd, T* dx, T* dw, T* db,
                        T* part, int64_t N, int64_t C, const T* dres) {
  if (N == 0 || C == 0) return;
  if (C <= kWarpRowMaxC) return norm_backward_rows(dy, x, w, mean, rstd, dres, dx, dw, db, part, N, C);
  const int th = row_threads(C);
  CTX_LAUNCH(layernorm_backward_dx_kernel<T>, row_grid(N), th, th * sizeof(T), stream(), dy, x, w, mean, rstd, dres,
             dx, N, C);
  CTX_CUDA_LAUNCH_CHECK("layernorm_backward_dx_kernel");
  dweight(dy, x, mean, rstd, dw, db, part, N, C);
}

template <class T>
void rmsnorm(const T* x, const T* w, T eps, T* y, T* rstd, int64_t N, int64_t C, uint16_t* y16, const T* a, T* h) {
  norm_forward<T>(x, a, h, w, nullptr, eps, y, nullptr, rstd, N, C, y16);
}

template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, T* dx, T* dw, T* part, int64_t N,
                      int64_t C, const T* dres) {
  if (N == 0 || C == 0) return;
  if (C <= kWarpRowMaxC) return norm_backward_rows<T>(dy, x, w, nullptr, rstd, dres, dx, dw, nullptr, part, N, C);
  const int th = row_threads(C);
  CTX_LAUNCH(rmsnorm_backward_dx_kernel<T>, row_grid(N), th, th * sizeof(T), stream(), dy, x, w, rstd, dres, dx, N,
             C);
  CTX_CUDA_LAUNCH_CHECK("rmsnorm_backward_dx_kernel");
  dweight<T>(dy, x, nullptr, rstd, dw, nullptr, part, N, C);
}

int64_t norm_part_chunks(int64_t N) { return std::max(column_chunks(N), norm_row_blocks(N)); }

#define CTX_INST_NORM(T)                                                                                     \
  template void layernorm<T>(const T*, const T*, const T*, T, T*, T*, T*, int64_t, int64_t, uint16_t*, const T*, \
                             T*);                                                                              \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, T*,       \
                                      int64_t, int64_t, const T*);                                           \
  template void rmsnorm<T>(const T*, const T*, T, T*, T*, int64_t, int64_t, uint16_t*, const T*, T*);          \
  template void rmsnorm_backward<T>(const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t,      \
                                    const T*);
CTX_INST_NORM(float)
CTX_INST_NORM(double)

}  // namespace ctx::cuda
