// nn/attention.h — causal multi-head self-attention with a positional-encoding object plugged
// in through its hooks (posenc/posenc.h). One implementation serves every encoding.
#pragma once
#include "nn/attn_stats.h"
#include "nn/kv_cache.h"
#include "nn/layers.h"
#include "posenc/posenc.h"

namespace ctx::nn {

class Attention : public Module {
 public:
  Attention(const ModelConfig& cfg, int layer, PositionalEncoding* pe, DType dt = DType::F32);
  // x: [B, T, D] -> [B, T, D]; positions: explicit positions of the rows (POSENC_SPEC §7.3,
  // checked by GPT::forward) or null (0..T-1 after any segment memory)
  Variable forward(const Variable& x, Rng* dropout_rng, const Positions* positions = nullptr) const;
  // Incremental decoding: x [B, T, D] holds the T new positions cache.length().. ; their keys
  // and values are appended to this layer's rows of the cache and the queries attend over all
  // cached positions (-> [B, T, D]). Eval only (no dropout). The caller advances the cache.
  Variable forward_cached(const Variable& x, KVCache& cache) const;
  std::shared_ptr<Linear> qkv, proj;
  // Segment memory (posenc memory_length() > 0): the last inputs of the previous segment,
  // detached; [B, M, D]. Cleared by reset_memory().
  void reset_memory() const { mem_ = Tensor(); }
  const Tensor& memory() const { return mem_; }
  void set_memory(const Tensor& m) const { mem_ = m; }
  // Sliding-window (local) attention: each query sees only its last `w` keys (0 = all, the
  // default), and with `sinks` > 0 also the first `sinks` keys (attention sinks, POSENC_SPEC §6).
  // Evaluation baselines (ctxlab eval --window W [--sinks S]); GPT::set_attention_window checks.
  void set_window(int64_t w, int64_t sinks = 0) { window_ = w, sinks_ = sinks; }
  int64_t window() const { return window_; }
  int64_t sinks() const { return sinks_; }
  // While set, forward() adds each call's per-row attention statistics to `c` (this layer's
  // rows; null: off, the default). GPT::set_attention_stats.
  void set_stats(AttnStatsCollector* c) { stats_ = c; }

 protected:
  void move_state(Device dev) override {  // the segment memory follows the parameters
    if (mem_.defined() && mem_.device() != dev) mem_ = mem_.to(dev);
  }

 private:
  AttnQuery query(AttnState& st, const DropoutMask& drop) const;
  mutable Tensor mem_;
  int64_t window_ = 0, sinks_ = 0;
  AttnStatsCollector* stats_ = nullptr;
  int layer_;
  int64_t H_, Dh_, D_;
  double dropout_;
  PositionalEncoding* pe_;
};

// Fused attention (autograd/ops_attention.h) for encodings with the default logits and output
// (PositionalEncoding::fused_attention_ok), dropout included (the kernels apply the mask the
// composed path would draw). Unset, it runs where the backend has it and prefers it for the call
// (Backend::prefers_fused_attention: always on the CPU; on CUDA for plain calls and calls whose only
// term is a distance table (alibi, kerple, sandwich, t5) under --precision bf16 (the tensor-core kernels), else only past 2^27 scores and for decoding, measured); CTXLAB_FUSED_ATTENTION=1 (read once) takes it wherever the backend has it, =0
// never. The switch is FastPath::Attention of core/fast_paths.h (set_fast_path overrides the
// environment, tests and benchmarks: set(true) counts as an explicit 1; reset_fast_path returns
// to it).

}  // namespace ctx::nn
