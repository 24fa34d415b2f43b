// core/cpu/hsum.h — the sum of a SIMD vector's lanes by halving (log2(lanes) vector adds instead
// of one add per lane), for kernels that reduce one vector per output (the GEMV's rows, the
// decode attention's scores), and four such sums at once (hsum_tree_x4: the GEMV's rows). The
// vector is passed by address, so that a kernel compiled for a wider ISA than its translation unit
// (target attributes) can call it without an ABI change.
#pragma once
#include <cstring>

namespace ctx::cpu {

// The sum of the Bytes / sizeof(F) lanes of type F stored at v.
template <class F, int Bytes>
inline F hsum_tree(const void* v) {
  if constexpr (Bytes == (int)sizeof(F)) {
    F x;
    std::memcpy(&x, v, sizeof x);
    return x;
  } else {
    typedef F Half __attribute__((vector_size(Bytes / 2)));
    Half lo, hi;
    std::memcpy(&lo, v, sizeof lo);
    std::memcpy(&hi, static_cast<const char*>(v) + Bytes / 2, sizeof hi);
    const Half s = lo + hi;
    return hsum_tree<F, Bytes / 2>(&s);
  }
}

// The lane sums of four vectors of 16 floats at v (4 x 64 bytes) into out[0..3]: hsum_tree's
// additions exactly (lanes i and i + 8, then i and i + 4, i and i + 2, i and i + 1; the same
// bits as four hsum_tree<float, 64> calls), done for the four together in 12 vector operations
// where four trees take ~30: the GEMV's pass of four rows.
inline void hsum_tree_x4(const void* v, float* out) {
  typedef float V16 __attribute__((vector_size(64)));
  typedef float V4 __attribute__((vector_size(16)));
  V16 a[4];
  std::memcpy(a, v, sizeof a);
  const V16 s01 = __builtin_shufflevector(a[0], a[1], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
                  __builtin_shufflevector(a[0], a[1], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  const V16 s23 = __builtin_shufflevector(a[2], a[3], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23) +
                  __builtin_shufflevector(a[2], a[3], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
  // quarter r: row r's 8 partial sums folded to 4
  const V16 t = __builtin_shufflevector(s01, s23, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27) +
                __builtin_shufflevector(s01, s23, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
  const V16 u = t + __builtin_shufflevector(t, t, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  const V16 w = u + __builtin_shufflevector(u, u, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  const V4 r = __builtin_shufflevector(w, w, 0, 4, 8, 12);  // row r's sum in lane 4 r
  std::memcpy(out, &r, sizeof r);
}

}  // namespace ctx::cpu
