// core/cuda/emu/emu_mma.h — the tensor-core instructions as kernel code sees them under the
// emulator, exact emulations of the PTX ISA (core/cuda/mma.cuh wraps them; under nvcc it issues
// the instructions themselves):
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32   warp-collective (WarpOp::Mma: every lane
//       must arrive, as at a full-mask shuffle); the product is computed once for the warp from
//       the 32 lanes' fragments, lane by lane as the ISA lays them out (tensor_core.cpp)
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}[.trans].shared.b16   row addresses exchanged by
//       full-mask shuffles, each lane then loads its own elements (the access hooks and the race
//       detector see those loads); row addresses must be 16-byte aligned and in shared memory
//   cp.async.{ca,cg}.shared.global (4, 8, 16 bytes), commit_group, wait_group N, wait_all: a
//       copy is performed late, at the wait that covers it (the latest point the ISA allows);
//       until then its destination holds the NaN pattern (0xFF bytes), so a read before the wait
//       sees NaN, and the poisoning store makes a reuse of a buffer still being read a race. The
//       hooks (counters, race detector) see each copy as one access of its size on each side.
// Faults are sticky launch failures naming the call site (device_trap).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>

#include "core/cuda/emu/emu_device.h"

namespace cuemu::detail {

// One lane's registers of an mma (the PTX ISA's fragments, "Matrix Fragments for mma.m16n8k16
// with floating point type"): a[4] bf16 pairs of A (16x16, row), b[2] of B (16x8, col), c/d[4] f32.
struct MmaLane {
  uint32_t a[4];
  uint32_t b[2];
  float c[4];
  float d[4];
};
// D = A B + C for the warp, every lane's d written (tensor_core.cpp; called by the scheduler when
// the 32 lanes have arrived).
void mma_bf16_m16n8k16(MmaLane* const lanes[32]);

inline unsigned lane_id() {
  return ((threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x) % 32u;
}
// A fault unless [p, p + n) lies in the block's dynamic shared memory and p is `align`-aligned.
inline void check_shared(const void* p, size_t n, size_t align, const char* what, const char* file, int line) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), lo = reinterpret_cast<uintptr_t>(dynamic_shared_base());
  if (a % align != 0) device_trap(what, file, line);
  if (a < lo || a + n > lo + dynamic_shared_bytes()) device_trap(what, file, line);
}

// memset(d, c, n) and memcpy(d, s, n) seen by the access hooks as one write (and one read) of n
// bytes at the caller's call site, whatever the compiler makes of the calls (a constant-size memset
// is folded into stores, which the instrumentation splits; a memcpy may stay a plain call, which it
// does not see): core/cuda/emu/access.cpp
void hooked_memset(void* d, int c, size_t n);
void hooked_memcpy(void* d, const void* s, size_t n);

}  // namespace cuemu::detail

namespace cuemu {

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {d}, {a}, {b}, {c}
inline void mma_bf16_16816(float* d, const uint32_t* a, const uint32_t* b, const float* c,
                           const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  detail::MmaLane r{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}, {c[0], c[1], c[2], c[3]}, {0, 0, 0, 0}};
  detail::warp_op(detail::WarpOp::Mma, 0xffffffffu, (uint64_t)reinterpret_cast<uintptr_t>(&r), 0, 32, file, line);
  for (int i = 0; i < 4; ++i) d[i] = r.d[i];
}

// ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16 {r}, [row]: lanes 8m..8m+7 give the rows of
// matrix m; lane l gets, of matrix m, the b16 pair at row l/4, columns 2(l%4) + {0, 1} (low half
// first), or with .trans the pair at rows 2(l%4) + {0, 1}, column l/4.
inline void ldmatrix(uint32_t* r, int n, bool trans, const void* row, const char* file = __builtin_FILE(),
                     int line = __builtin_LINE()) {
  const unsigned l = detail::lane_id();
  if (l < 8u * (unsigned)n)
    detail::check_shared(row, 16, 16, "ldmatrix: a row address that is not a 16-byte aligned row of shared memory",
                         file, line);
  const unsigned char* mine = static_cast<const unsigned char*>(row);
  for (int m = 0; m < n; ++m) {
    if (!trans) {
      const unsigned char* src = __shfl_sync(0xffffffffu, mine, 8 * m + (int)(l / 4), 32, file, line);
      r[m] = *reinterpret_cast<const uint32_t*>(src + 4 * (l % 4));
    } else {
      const unsigned char* r0 = __shfl_sync(0xffffffffu, mine, 8 * m + 2 * (int)(l % 4), 32, file, line);
      const unsigned char* r1 = __shfl_sync(0xffffffffu, mine, 8 * m + 2 * (int)(l % 4) + 1, 32, file, line);
      const uint32_t lo = *reinterpret_cast<const uint16_t*>(r0 + 2 * (l / 4));
      const uint32_t hi = *reinterpret_cast<const uint16_t*>(r1 + 2 * (l / 4));
      r[m] = lo | (hi << 16);
    }
  }
}

// One CUDA thread's cp.async copies not yet waited for (a kernel-local object: the emulator has no
// per-thread hidden state; under nvcc the same class is empty).
class AsyncCopies {
 public:
  static constexpr int kMax = 64;  // copies in flight per thread
  AsyncCopies() = default;
  AsyncCopies(const AsyncCopies&) = delete;
  AsyncCopies& operator=(const AsyncCopies&) = delete;
  // A copy never waited for is a bug (its data may never land): reported when the thread ends.
  ~AsyncCopies() noexcept(false) {
    if (n_ > 0 && std::uncaught_exceptions() == 0)
      detail::device_trap("cp.async: copies issued and never waited for (cp.async.wait_group / wait_all)", file_,
                          line_);
  }
  // cp.async.{ca,cg}.shared.global [dst], [src], bytes (cg: 16 bytes only)
  void copy(void* dst, const void* src, int bytes, bool cg, const char* file = __builtin_FILE(),
            int line = __builtin_LINE()) {
    if (!(bytes == 4 || bytes == 8 || bytes == 16) || (cg && bytes != 16))
      detail::device_trap("cp.async: size must be 4, 8 or 16 bytes (.cg: 16)", file, line);
    detail::check_shared(dst, (size_t)bytes, (size_t)bytes,
                         "cp.async: destination not in shared memory or not aligned to the copy size", file, line);
    if (reinterpret_cast<uintptr_t>(src) % (uintptr_t)bytes != 0)
      detail::device_trap("cp.async: source not aligned to the copy size", file, line);
    if (n_ == kMax) detail::device_trap("cp.async: more copies in flight than the emulator holds (64)", file, line);
    uint32_t* d = static_cast<uint32_t*>(dst);
    // poisoned until the wait, by one write of the copy's size as the hooks see it (the copy is one
    // access of the lane: the counters see a 16-byte copy's bank pattern, not four 4-byte stores'
    // conflicts); called by name, since the compiler folds a constant-size memset into stores
    detail::hooked_memset(d, 0xff, (size_t)bytes);
    q_[n_++] = Copy{d, static_cast<const uint32_t*>(src), bytes / 4, committed_};
    file_ = file, line_ = line;
  }
  void commit() { ++committed_; }
  // cp.async.wait_group n: every committed group but the newest n has landed.
  void wait(int n) { land(committed_ - n); }
  // cp.async.wait_all: every copy issued has landed (committed or not).
  void wait_all() { land(committed_ + 1); }

 private:
  struct Copy {
    uint32_t* dst;
    const uint32_t* src;
    int words;
    int group;  // committed_ when issued: the group it joins at the next commit
  };
  // performs, in issue order, the copies of groups < g; keeps the rest
  void land(int g) {
    int kept = 0;
    for (int i = 0; i < n_; ++i) {
      const Copy& c = q_[i];
      if (c.group < g) {
        detail::hooked_memcpy(c.dst, c.src, 4 * (size_t)c.words);  // one read and one write of its size
      } else {
        q_[kept++] = c;
      }
    }
    n_ = kept;
  }
  Copy q_[kMax];
  int n_ = 0;
  int committed_ = 0;
  const char* file_ = "";
  int line_ = 0;
};

}  // namespace cuemu
