// core/attention_dist_bias.h — AttnRel::dist_bias (core/backend.h) for the backends whose
// attention kernels read a bias [H, T, S] rather than the table: the expansion of the table into
// that bias and the reduction of its gradient back onto the table, both by backend ops
// (index_select / index_add on the table's device, in a fixed order: deterministic). The
// reference of the kernels that read the table in their tiles (core/cuda/attention_tc.cu).
#pragma once
#include <cstdint>

#include "core/backend.h"

namespace ctx {

// i64 [T * S] on like's device: entry i * S + j = max(i + (S - T) - j, 0), the distance of query
// i to key j (0 for a masked j > i + S - T: a valid index whose value the mask removes).
Tensor dist_bias_index(const AttnDims& d, const Tensor& like);
// bias [H, T, S] (table's dtype and device) with bias[h, i, j] = table[h, index(i, j)]
Tensor expand_dist_bias(Backend& be, const AttnDims& d, const Tensor& table);
// dtable [H, n] overwritten: dtable[h, r] = sum of dbias[h, i, j] over index(i, j) = r. dbias is
// 0 where (i, j) is masked, so the masked entries' index 0 adds nothing.
void reduce_dist_bias(Backend& be, const AttnDims& d, const Tensor& dbias, Tensor& dtable);

}  // namespace ctx
