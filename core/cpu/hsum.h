// core/cpu/hsum.h — the sum of a SIMD vector's lanes by halving (log2(lanes) vector adds instead
// of one add per lane), for kernels that reduce one vector per output (the GEMV's rows, the
// decode attention's scores). The vector is passed by address, so that a kernel compiled for a
// wider ISA than its translation unit (target attributes) can call it without an ABI change.
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

}  // namespace ctx::cpu
