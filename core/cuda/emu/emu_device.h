// core/cuda/emu/emu_device.h — what kernel code sees: the CUDA qualifiers, the built-in variables
// (threadIdx, blockIdx, blockDim, gridDim, warpSize), __syncthreads, the warp intrinsics, the
// atomics, fences and the math intrinsics, spelled as in CUDA. Synchronisation calls capture
// their call site (__builtin_FILE/__builtin_LINE default arguments) for the emulator's reports.
#pragma once
#include <math.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/cuda/emu/emu_types.h"

// ---- qualifiers ----
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
// __noinline__ is not defined: libstdc++ spells __attribute__((__noinline__)) and a macro would break it.
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Static shared memory: one copy per OS thread, which every fiber of the block running there
// shares (a block never leaves its OS thread). Limits (README): not NaN-filled per block, and not
// counted against the shared-memory limit; ctxlab's kernels use CTX_DYNAMIC_SHARED instead.
#define __shared__ static thread_local

// ---- built-in variables: set by the scheduler before it resumes each CUDA thread ----
inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
constexpr int warpSize = 32;

namespace cuemu::detail {
// Mma: mma.sync (emu_mma.h); its value is the address of the lane's MmaLane record.
enum class WarpOp : int { Sync, Shfl, ShflUp, ShflDown, ShflXor, Ballot, Any, All, Mma };
void syncthreads(const char* file, int line);
int syncthreads_reduce(int kind, int predicate, const char* file, int line);  // 0 count, 1 and, 2 or
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                 int line);
unsigned activemask();
unsigned char* dynamic_shared_base();
size_t dynamic_shared_bytes();  // the launch's dynamic shared memory size
[[noreturn]] void device_trap(const char* what, const char* file, int line);
void device_fence();  // __threadfence(): a fence, and (racecheck) the block's writes so far are published

template <class T>
inline uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                "warp shuffles move values of at most 8 bytes (split larger types)");
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}
}  // namespace cuemu::detail

namespace cuemu {
// CTX_DYNAMIC_SHARED(T, name): the block's dynamic shared memory (NaN-filled at block start).
template <class T>
inline T* dynamic_shared() {
  return reinterpret_cast<T*>(detail::dynamic_shared_base());
}
}  // namespace cuemu

// ---- barriers ----
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  cuemu::detail::syncthreads(file, line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return cuemu::detail::syncthreads_reduce(0, pred, file, line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return cuemu::detail::syncthreads_reduce(1, pred, file, line);
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return cuemu::detail::syncthreads_reduce(2, pred, file, line);
}

// ---- warp intrinsics (lane = linear thread id % 32, x fastest) ----
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  cuemu::detail::warp_op(cuemu::detail::WarpOp::Sync, mask, 0, 0, warpSize, file, line);
}
template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace cuemu::detail;
  return from_bits<T>(warp_op(WarpOp::Shfl, mask, to_bits(var), src_lane, width, file, line));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                        const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace cuemu::detail;
  return from_bits<T>(warp_op(WarpOp::ShflUp, mask, to_bits(var), (int)delta, width, file, line));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize,
                          const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace cuemu::detail;
  return from_bits<T>(warp_op(WarpOp::ShflDown, mask, to_bits(var), (int)delta, width, file, line));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize,
                         const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace cuemu::detail;
  return from_bits<T>(warp_op(WarpOp::ShflXor, mask, to_bits(var), lane_mask, width, file, line));
}
inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  using namespace cuemu::detail;
  return (unsigned)warp_op(WarpOp::Ballot, mask, pred != 0, 0, warpSize, file, line);
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace cuemu::detail;
  return (int)warp_op(WarpOp::Any, mask, pred != 0, 0, warpSize, file, line);
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  using namespace cuemu::detail;
  return (int)warp_op(WarpOp::All, mask, pred != 0, 0, warpSize, file, line);
}
// The lanes of the caller's warp that had not exited when the warp last synchronised (a warp op
// completing, a barrier releasing, or the block's start): deterministic under every schedule.
inline unsigned __activemask() { return cuemu::detail::activemask(); }

// ---- atomics (real atomics: blocks run on several OS threads) ----
namespace cuemu::detail {
template <class T, class F>
inline T atomic_update(T* addr, F f) {  // CAS loop on the bit pattern; returns the old value
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  static_assert(sizeof(T) == sizeof(U), "atomics on 4- or 8-byte values");
  U* ua = reinterpret_cast<U*>(addr);
  U old_bits = __atomic_load_n(ua, __ATOMIC_RELAXED);
  for (;;) {
    T old_v;
    std::memcpy(&old_v, &old_bits, sizeof(T));
    T new_v = f(old_v);
    U new_bits;
    std::memcpy(&new_bits, &new_v, sizeof(T));
    if (__atomic_compare_exchange_n(ua, &old_bits, new_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return old_v;
  }
}
}  // namespace cuemu::detail

#define CUEMU_ATOMIC_INT_OPS(T)                                                                     \
  inline T atomicAdd(T* a, T v) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }             \
  inline T atomicSub(T* a, T v) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }             \
  inline T atomicExch(T* a, T v) { return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST); }           \
  inline T atomicAnd(T* a, T v) { return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST); }             \
  inline T atomicOr(T* a, T v) { return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST); }               \
  inline T atomicXor(T* a, T v) { return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST); }             \
  inline T atomicMax(T* a, T v) {                                                                   \
    return cuemu::detail::atomic_update(a, [v](T o) { return o > v ? o : v; });                     \
  }                                                                                                 \
  inline T atomicMin(T* a, T v) {                                                                   \
    return cuemu::detail::atomic_update(a, [v](T o) { return o < v ? o : v; });                     \
  }                                                                                                 \
  inline T atomicCAS(T* a, T expected, T desired) {                                                 \
    __atomic_compare_exchange_n(a, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST); \
    return expected;                                                                                \
  }
CUEMU_ATOMIC_INT_OPS(int)
CUEMU_ATOMIC_INT_OPS(unsigned)
CUEMU_ATOMIC_INT_OPS(unsigned long long)
CUEMU_ATOMIC_INT_OPS(long long)
#undef CUEMU_ATOMIC_INT_OPS
inline float atomicAdd(float* a, float v) {
  return cuemu::detail::atomic_update(a, [v](float o) { return o + v; });
}
inline double atomicAdd(double* a, double v) {
  return cuemu::detail::atomic_update(a, [v](double o) { return o + v; });
}
inline float atomicExch(float* a, float v) {
  return cuemu::detail::atomic_update(a, [v](float) { return v; });
}
// CUDA's wrap rules: inc -> (old >= val) ? 0 : old + 1; dec -> (old == 0 || old > val) ? val : old - 1.
inline unsigned atomicInc(unsigned* a, unsigned val) {
  return cuemu::detail::atomic_update(a, [val](unsigned o) { return o >= val ? 0u : o + 1u; });
}
inline unsigned atomicDec(unsigned* a, unsigned val) {
  return cuemu::detail::atomic_update(a, [val](unsigned o) { return (o == 0u || o > val) ? val : o - 1u; });
}

// ---- fences ----
// A block's threads share one OS thread: a compiler barrier orders them. Device-wide fences are
// real fences and tell the race detector that the block's earlier global writes may be read by
// other blocks (README "Access checks").
inline void __threadfence() { cuemu::detail::device_fence(); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { cuemu::detail::device_fence(); }
#define __trap() ::cuemu::detail::device_trap("__trap()", __FILE__, __LINE__)

// ---- loads ----
template <class T>
inline T __ldg(const T* p) { return *p; }
template <class T>
inline T __ldcs(const T* p) { return *p; }
template <class T>
inline void __stcs(T* p, T v) { *p = v; }

// ---- math: the fast intrinsics map to the exact libm functions (exactness over speed) ----
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return powf(10.0f, x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
// The _rn adds and multiplies are never merged into an fma (CUDA's promise): out of line, so that
// the host compiler cannot contract them with the caller's products under -march=native either.
[[gnu::noinline]] inline float __fadd_rn(float a, float b) { return a + b; }
[[gnu::noinline]] inline float __fsub_rn(float a, float b) { return a - b; }
[[gnu::noinline]] inline float __fmul_rn(float a, float b) { return a * b; }
[[gnu::noinline]] inline double __dadd_rn(double a, double b) { return a + b; }
[[gnu::noinline]] inline double __dmul_rn(double a, double b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float exp10f(float x) { return powf(10.0f, x); }
inline int __float2int_rn(float x) { return (int)nearbyintf(x); }
inline int __float2int_rz(float x) { return (int)x; }
inline int __float2int_rd(float x) { return (int)floorf(x); }
inline int __float2int_ru(float x) { return (int)ceilf(x); }
inline unsigned __float2uint_rn(float x) { return (unsigned)nearbyintf(x); }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline int __float_as_int(float x) { return cuemu::detail::from_bits<int>(cuemu::detail::to_bits(x)); }
inline unsigned __float_as_uint(float x) { return cuemu::detail::from_bits<unsigned>(cuemu::detail::to_bits(x)); }
inline float __int_as_float(int x) { return cuemu::detail::from_bits<float>(cuemu::detail::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return cuemu::detail::from_bits<float>(cuemu::detail::to_bits(x)); }
inline long long __double_as_longlong(double x) { return cuemu::detail::from_bits<long long>(cuemu::detail::to_bits(x)); }
inline double __longlong_as_double(long long x) { return cuemu::detail::from_bits<double>(cuemu::detail::to_bits(x)); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
// CUDA's global min/max overloads.
#define CUEMU_MINMAX(T)                            \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
CUEMU_MINMAX(int)
CUEMU_MINMAX(unsigned)
CUEMU_MINMAX(long)
CUEMU_MINMAX(unsigned long)
CUEMU_MINMAX(long long)
CUEMU_MINMAX(unsigned long long)
#undef CUEMU_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
