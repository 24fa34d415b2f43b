// nn/kv_cache.h — the key/value cache of incremental decoding (GPT::forward_cached,
// docs/sampling.md). Per layer, preallocated for `capacity` positions at construction (nothing
// grows per token; a rolling cache with sinks keeps sinks + window rows): the raw keys (before rotate()), the keys as rotate() leaves them (valid for
// the first `rotated` rows while the encoding's decode_keys_stable holds) and the values, each
// [B, H, capacity, Dh]. A decoding step writes its T new rows at positions length()..,
// attends over rows 0..length()+T-1 through the encoding's ordinary hooks (queries at
// q_pos0 = length(), S = all cached keys) and advances length().
#pragma once
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "posenc/posenc.h"

namespace ctx::nn {

class KVCache {
 public:
  struct Layer {
    Tensor k_raw, k_rot, v;  // [B, H, rows, Dh]
    int64_t rotated = 0;     // rows of k_rot that hold rotated keys
  };
  // window > 0: each query sees its last `window` keys (sliding window, the semantics of
  // GPT::set_attention_window over the full sequence). `like`: a model parameter (dtype, device).
  // sinks > 0 (with window > 0): a rolling cache (StreamingLLM, POSENC_SPEC §6) of sinks + window
  // rows: the first `sinks` positions and the last `window`, the new one included. Rows are
  // ranks: the encoding's hooks see the queries and keys at their rank in the cache, so a sink
  // key is at its cache distance from the query and a window key at its true distance.
  KVCache(const ModelConfig& cfg, PositionalEncoding& pe, int64_t batch, int64_t capacity, int64_t window,
          const Tensor& like, int64_t sinks = 0);
  int64_t length() const { return n_; }      // positions fed so far (the next one's position)
  int64_t capacity() const { return cap_; }  // positions the cache may be fed
  int64_t rows() const { return rows_; }     // rows held: length(), or fewer once a rolling cache rolls
  int64_t buffer_rows() const { return buf_; }
  int64_t batch() const { return B_; }
  int64_t window() const { return window_; }
  int64_t sinks() const { return sinks_; }
  bool rolling() const { return sinks_ > 0; }
  Layer& layer(int l) { return layers_.at((size_t)l); }
  PosencDecodeState* posenc_state() { return pe_state_.get(); }
  // Before a step of T positions (GPT::forward_cached): a full rolling cache drops its oldest
  // window row (one position per step once full; every layer's raw keys and values move up one
  // row and every key is rotated again at its new rank). Errors when T positions do not fit.
  void make_room(int64_t T);
  // Called by GPT::forward_cached once every layer has appended its T rows.
  void advance(int64_t T) { n_ += T, rows_ += T; }
  // Forget every position (the buffers stay; the encoding's decode state starts over).
  void clear();

 private:
  int64_t B_, cap_, window_, sinks_, buf_, n_ = 0, rows_ = 0;
  std::vector<Layer> layers_;
  PositionalEncoding* pe_;
  std::unique_ptr<PosencDecodeState> pe_state_;
};

// Writes src [B, H, T, Dh] into rows [pos, pos + T) of buf [B, H, cap, Dh] (any backend).
void kv_write_rows(const Tensor& src, Tensor& buf, int64_t pos);
// A contiguous copy of rows [begin, end) of buf [B, H, cap, Dh] (any backend).
Tensor kv_read_rows(const Tensor& buf, int64_t begin, int64_t end);

}  // namespace ctx::nn
