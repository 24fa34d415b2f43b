// nn/gpt.h — the decoder-only, pre-norm GPT of MODEL_SPEC §3 with parameter names of §4:
// wte, [wpe | pe.*], blocks.{l}.{norm1, attn.{qkv, proj, pe.*}, norm2, mlp.{fc, proj}}, norm_f,
// [lm_head].
#pragma once
#include <memory>
#include <vector>

#include "core/rng.h"
#include "nn/attention.h"
#include "nn/layers.h"
#include "posenc/posenc.h"

namespace ctx {
struct DecodeKeep;  // core/decode_step.h
}

namespace ctx::nn {

// The residual stream between blocks: x [B, T, D], and xn = the next norm of x (the block's norm1,
// or norm_f after the last), made by the same kernel as the add that made x (Norm::forward_add).
struct Residual {
  Variable x, xn;
};

class Block : public Module {
 public:
  Block(const ModelConfig& cfg, int layer, PositionalEncoding* pe, DType dt);
  // in.xn = norm1(in.x); returns the stream this block leaves and next(stream), `next` being the
  // norm that reads it (the next block's norm1, or norm_f): both residual adds are fused with the
  // norm after them.
  Residual forward(const Residual& in, const Norm& next, Rng* rng, const Positions* positions = nullptr) const;
  Variable forward_cached(const Variable& x, KVCache& cache) const;  // decoding, eval only
  std::shared_ptr<Norm> norm1, norm2;
  std::shared_ptr<Attention> attn;
  std::shared_ptr<MLP> mlp;
  double dropout;
};

class GPT : public Module {
 public:
  // `source` names where the config came from (for error messages).
  explicit GPT(const ModelConfig& cfg, DType dt = DType::F32, const std::string& source = "config");
  // MODEL_SPEC §4 default init, deterministic in `seed`.
  void init_weights(uint64_t seed);
  // tokens [B, T] (i32/i64) -> logits [B, T, V]. Positions start at pos0.
  // use_memory: continue from the previous call's segment memory (Transformer-XL with mem_len;
  // the caller feeds consecutive segments). Otherwise memory is cleared first, so every call
  // stands alone.
  // positions (POSENC_SPEC §7.3): explicit positions [1 or B, T] instead of pos0.. (pos0 must be 0,
  // no memory, no sinks, an encoding with explicit_positions_ok(): otherwise an error).
  Variable forward(const Tensor& tokens, int64_t pos0 = 0, bool use_memory = false,
                   const Positions* positions = nullptr);
  // Incremental decoding (nn/kv_cache.h, docs/sampling.md): tokens [B, T] at positions
  // cache.length().. -> logits [B, T, V]; each layer appends their keys / values to the cache
  // and attends over every cached position, so a step of one token costs one position. Equals
  // forward() of the whole sequence so far (last T rows) up to float rounding, with the cache's
  // window as set_attention_window, and for Transformer-XL memory the segment recurrence
  // (prompt as one segment, then one token per call with use_memory). Eval mode, no grad.
  Variable forward_cached(const Tensor& tokens, KVCache& cache);
  // A cache for `batch` sequences of up to `capacity` positions on the model's device.
  // window / sinks: as set_attention_window (sinks > 0: a rolling cache, nn/kv_cache.h).
  KVCache make_cache(int64_t batch, int64_t capacity, int64_t window = 0, int64_t sinks = 0);
  // mean cross-entropy of forward(inputs, 0, use_memory, positions) against targets [B, T]
  Variable loss(const Tensor& inputs, const Tensor& targets, bool use_memory = false,
                const Positions* positions = nullptr);
  // Targets with ignored positions (kIgnoreTarget = -1, e.g. everything but a task's answer):
  // the mean over rows of each row's mean cross-entropy over its non-ignored targets, so that every
  // sequence weighs the same however few tokens it scores (a row of plain text: its T tokens;
  // without ignored targets this equals loss()). Every row needs one target that is not ignored.
  static constexpr int64_t kIgnoreTarget = -1;
  Variable masked_loss(const Tensor& inputs, const Tensor& targets, const Positions* positions = nullptr);
  // Checks that explicit positions fit tokens [B, T] and this model (POSENC_SPEC §7.3: the
  // encoding takes them, no sinks); `what` starts the messages (a file or an option).
  void check_positions(const Positions& p, int64_t B, int64_t T, const std::string& what) const;
  // The cross-entropy of every position, nats, as a host f32 tensor [B, T] (no graph: call under
  // NoGradGuard in eval mode); the per-position loss of evaluation (train/eval.h).
  Tensor token_losses(const Tensor& inputs, const Tensor& targets);
  // Checks ids in [0, vocab) and the sequence length against the encoding (clear errors).
  void check_tokens(const Tensor& tokens, const std::string& what) const;
  // Forget the segment memory of every layer (Transformer-XL; no-op for other encodings).
  void reset_memory();
  // The segment memory of every layer (empty tensors when none), to set aside and restore
  // around an evaluation that must not disturb training's memory.
  std::vector<Tensor> memory_state() const;
  void set_memory_state(const std::vector<Tensor>& m);
  // Sliding-window (local) attention of width w in every layer (0 = full causal attention),
  // with the first `sinks` positions visible too (attention sinks, POSENC_SPEC §6; needs w > 0
  // and an encoding with sinks_ok(): otherwise a one-line error).
  void set_attention_window(int64_t w, int64_t sinks = 0);
  void check_sinks(int64_t w, int64_t sinks) const;
  // The window and sinks set now (0 = none). A checkpoint trained with --window records its window
  // (train/io/checkpoint.h) and loading sets it.
  int64_t attention_window() const { return blocks.empty() ? 0 : blocks[0]->attn->window(); }
  int64_t attention_sinks() const { return blocks.empty() ? 0 : blocks[0]->attn->sinks(); }
  // While set, every layer's attention adds its per-row statistics to `c` (layers x heads of this
  // model; null: off). Evaluation (train/eval.h, --attn-stats) sets it around its forwards.
  void set_attention_stats(AttnStatsCollector* c);

  ModelConfig cfg;
  DType dtype;
  std::unique_ptr<PositionalEncoding> pe;
  std::shared_ptr<Embedding> wte;
  std::vector<std::shared_ptr<Block>> blocks;
  std::shared_ptr<Norm> norm_f;
  std::shared_ptr<Linear> lm_head;  // null when tied
  Rng dropout_rng{0};
  // The randomized-positions sampler's RNG (POSENC_SPEC §7.3, "randomized": M): seeded by the
  // trainer from --seed, saved with the optimizer state like the data position.
  Rng position_rng{0};
  // What the backend keeps between the graph-free decoder's steps made over these weights (the
  // CPU's pack of them: core/decode_step.h, DecodeKeep); checked against the weights when used.
  std::shared_ptr<DecodeKeep> decode_keep;
};

}  // namespace ctx::nn
