// nn/attn_stats.h — attention statistics per layer and head (ctxlab eval --attn-stats,
// docs/evaluation.md): the entropy of each query row's attention (nats), its mass on the first
// `sink_keys` keys (attention sinks) and its mean distance (sum_j p_ij (i - j)), summed over every
// query row of the forwards that run while a collector is attached (GPT::set_attention_stats)
// and reported as means. The rows come from the attention itself (AttnRowStats, core/backend.h:
// the fused kernel's pass, or the composed probabilities).
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace ctx::nn {

// The means over `rows` query rows of one head.
struct HeadAttnStats {
  double entropy = 0, sink_mass = 0, distance = 0;
  int64_t rows = 0;
};

class AttnStatsCollector {
 public:
  // layers x heads accumulators; sink_keys >= 1 (the error names --attn-sinks).
  AttnStatsCollector(int64_t layers, int64_t heads, int64_t sink_keys);
  int64_t sink_keys() const { return sink_keys_; }
  int64_t layers() const { return layers_; }
  int64_t heads() const { return heads_; }
  // Adds the rows [B, H, T, 3] (entropy, sink mass, distance; any float dtype and device) of one
  // attention call of `layer`.
  void add(int64_t layer, const Tensor& rows);
  // The means of (layer, head) so far (all 0 with rows 0 before any call).
  HeadAttnStats mean(int64_t layer, int64_t head) const;
  void clear();

 private:
  int64_t layers_, heads_, sink_keys_;
  std::vector<double> sums_;     // [layers, heads, 3]
  std::vector<int64_t> counts_;  // [layers, heads]
};

}  // namespace ctx::nn
