// core/cpu/parallel.h — the one rule for when a CPU kernel forks OpenMP threads: a region runs on
// the calling thread unless its estimated work reaches kParallelMinWork. Every OpenMP region of
// the CPU backend and of the CPU extension kernels asks threads_for(work) / parallel_pays(work)
// (through CTX_OMP_IF, or its `num_threads` clause), so no region forks on a tiny tensor.
//
// Why one threshold: a fork / join costs a few microseconds when the other threads spin, and far
// more when they sleep (OMP_WAIT_POLICY=PASSIVE, as the test suite runs, or past GOMP_SPINCOUNT):
// the master wakes each worker through the kernel, and on a VM the idle vCPU is halted. Measured
// on the 2-vCPU Xeon (docs/threading.md, "Tiny regions"): a float64 gradcheck of a tiny GPT made
// ~72,000 2-thread GEMM regions of a few hundred multiply-adds, 5.6 s with 2 threads against
// 0.75 s with one.
//
// Work units: about one cheap vectorised element operation (a copy, an add, a multiply). A site
// states its work as elements x its cost per element (e.g. softmax: 4, an exp and a few passes), or
// for products the multiply-adds scaled by how many one unit holds (a vectorised f32 GEMM: 16
// lanes per FMA, so MACs / 16; the scalar reference GEMM: MACs).
#pragma once
#include <omp.h>

#include <cstdint>

namespace ctx::cpu {

// Below this much work (units above) a region runs on one thread: ~10-30 us of one core's work,
// several forks' worth on a quiet machine.
constexpr int64_t kParallelMinWork = 65536;

// Threads a region over `work` units should use: 1 below kParallelMinWork or when called from
// inside a parallel region (a nested call runs on its caller's thread), else the pool's size.
inline int threads_for(int64_t work) {
  if (work < kParallelMinWork || omp_in_parallel()) return 1;
  return omp_get_max_threads();
}

// Whether a region over `work` units forks: the condition of CTX_OMP_IF below.
inline bool parallel_pays(int64_t work) { return threads_for(work) > 1; }

}  // namespace ctx::cpu

// CTX_OMP_IF(cond, "omp parallel for schedule(static)", for (...) body) runs the statement under
// the OpenMP pragma when cond holds, else as plain code on the calling thread, never entering the
// OpenMP runtime. Every region of the CPU kernels is written this way rather than with the
// pragma's own `if` clause, because a region whose `if` is false still enters the runtime: it
// builds a team of one and wakes a futex at its end, a system call each time (measured on a Zen 4
// EPYC: ~1.1 us a call against ~0.25 for the plain loop, from inside a 2-thread region; the graph-free
// decoder, whose kernels run inside its own team region, made ~200 futex calls a token).
// The statement is compiled twice; commas in it are fine (it is the macro's variadic tail); a
// pragma inside it is written _Pragma("omp simd ...") (a directive cannot sit in macro arguments).
// A worksharing pragma ("omp for") inside a region body must go through CTX_OMP_IF too, with the
// region's condition: in the plain branch an orphaned `omp for` would bind to an enclosing region
// (a caller's team) and split its loop with threads that never reach it.
#define CTX_OMP_IF(cond, pragma, ...) \
  do {                                \
    if (cond) {                       \
      _Pragma(pragma) __VA_ARGS__     \
    } else {                          \
      __VA_ARGS__                     \
    }                                 \
  } while (0)
