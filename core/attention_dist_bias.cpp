// core/attention_dist_bias.cpp — see attention_dist_bias.h.
#include "core/attention_dist_bias.h"

#include <algorithm>

#include "core/device_table.h"

namespace ctx {

Tensor dist_bias_index(const AttnDims& d, const Tensor& like) {
  Tensor idx = Tensor::empty({d.T * d.S}, DType::I64);
  int64_t* p = idx.host<int64_t>();
  for (int64_t i = 0; i < d.T; ++i)
    for (int64_t j = 0; j < d.S; ++j) p[i * d.S + j] = std::max<int64_t>(i + d.S - d.T - j, 0);
  return device_table(idx, like);  // the same for every layer of a step: uploaded once
}

Tensor expand_dist_bias(Backend& be, const AttnDims& d, const Tensor& table) {
  Tensor bias = Tensor::empty({d.H, d.T * d.S}, table.dtype(), table.device());
  be.index_select(table, 1, dist_bias_index(d, table), bias);
  return bias.view({d.H, d.T, d.S});
}

void reduce_dist_bias(Backend& be, const AttnDims& d, const Tensor& dbias, Tensor& dtable) {
  be.fill(dtable, 0.0);
  be.index_add(dtable, 1, dist_bias_index(d, dtable), dbias.view({d.H, d.T * d.S}));
}

}  // namespace ctx
