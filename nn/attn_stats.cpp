// nn/attn_stats.cpp — AttnStatsCollector (see attn_stats.h): host sums per (layer, head).
#include "nn/attn_stats.h"

#include "core/device_table.h"
#include "core/error.h"

namespace ctx::nn {

AttnStatsCollector::AttnStatsCollector(int64_t layers, int64_t heads, int64_t sink_keys)
    : layers_(layers), heads_(heads), sink_keys_(sink_keys) {
  CTX_CHECK(layers >= 1 && heads >= 1, "AttnStatsCollector: layers (", layers, ") and heads (", heads,
            ") must be >= 1");
  CTX_CHECK(sink_keys >= 1, "--attn-sinks must be >= 1 (the first K tokens count as sinks, e.g. 4), got ",
            sink_keys);
  clear();
}

void AttnStatsCollector::clear() {
  sums_.assign((size_t)(layers_ * heads_ * 3), 0.0);
  counts_.assign((size_t)(layers_ * heads_), 0);
}

void AttnStatsCollector::add(int64_t layer, const Tensor& rows_any) {
  CTX_CHECK(layer >= 0 && layer < layers_, "AttnStatsCollector: layer ", layer, " outside [0, ", layers_, ")");
  CTX_CHECK(rows_any.dim() == 4 && rows_any.size(1) == heads_ && rows_any.size(3) == 3,
            "AttnStatsCollector: rows must be [B, ", heads_, ", T, 3], got ", rows_any.str());
  const Tensor rows = to_host(rows_any).to(DType::F64);
  const int64_t B = rows.size(0), T = rows.size(2);
  const double* p = rows.host<double>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < heads_; ++h) {
      double* s = sums_.data() + (layer * heads_ + h) * 3;
      const double* r = p + (b * heads_ + h) * T * 3;
      for (int64_t t = 0; t < T; ++t)
        for (int c = 0; c < 3; ++c) s[c] += r[t * 3 + c];
      counts_[(size_t)(layer * heads_ + h)] += T;
    }
}

HeadAttnStats AttnStatsCollector::mean(int64_t layer, int64_t head) const {
  CTX_CHECK(layer >= 0 && layer < layers_ && head >= 0 && head < heads_, "AttnStatsCollector: (layer ", layer,
            ", head ", head, ") outside [", layers_, ", ", heads_, ")");
  HeadAttnStats m;
  m.rows = counts_[(size_t)(layer * heads_ + head)];
  if (m.rows == 0) return m;
  const double* s = sums_.data() + (layer * heads_ + head) * 3;
  m.entropy = s[0] / (double)m.rows, m.sink_mass = s[1] / (double)m.rows, m.distance = s[2] / (double)m.rows;
  return m;
}

}  // namespace ctx::nn
