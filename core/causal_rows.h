// core/causal_rows.h — the columns of each row that a causal (optionally sliding-window) mask
// keeps: one formula for the CPU reference kernels and the CUDA kernels (Backend::causal_softmax
// and its backward). x [..., Tq, S] is viewed as rows [N, S]; row n is query i = n % Tq, which sees
// the keys j <= i + diag and, with window > 0, only those with j > i + diag - window (what
// Backend::causal_fill leaves unfilled).
#pragma once
#include <cstdint>

#include "core/host_device.h"

namespace ctx {

struct CausalRows {
  int64_t Tq = 0;  // queries per [Tq, S] matrix; 0: no mask, every column of every row
  int64_t diag = 0, window = 0;

  // The visible columns of row n are [lo(n), hi(n, S)); none when hi <= lo.
  CTX_HOST_DEVICE int64_t lo(int64_t n) const {
    if (Tq == 0 || window <= 0) return 0;
    const int64_t l = n % Tq + diag - window + 1;
    return l > 0 ? l : 0;
  }
  CTX_HOST_DEVICE int64_t hi(int64_t n, int64_t S) const {
    if (Tq == 0) return S;
    const int64_t h = n % Tq + diag + 1;
    return h < 0 ? 0 : (h < S ? h : S);
  }
};

}  // namespace ctx
