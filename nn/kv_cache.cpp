// nn/kv_cache.cpp — the decoding cache's buffers (see kv_cache.h).
#include "nn/kv_cache.h"

#include "core/backend.h"

namespace ctx::nn {

KVCache::KVCache(const ModelConfig& cfg, PositionalEncoding& pe, int64_t batch, int64_t capacity, int64_t window,
                 const Tensor& like)
    : B_(batch), cap_(capacity), window_(window), pe_(&pe) {
  CTX_CHECK(batch >= 1 && capacity >= 1, "KVCache: batch (", batch, ") and capacity (", capacity,
            ") must be >= 1");
  CTX_CHECK(window >= 0, "KVCache: window must be >= 0 (0 = full causal attention), got ", window);
  const Shape s = {batch, cfg.n_heads, capacity, cfg.head_dim()};
  for (int l = 0; l < cfg.n_layers; ++l) {
    Layer L;
    L.k_raw = Tensor::empty(s, like.dtype(), like.device());
    L.k_rot = Tensor::empty(s, like.dtype(), like.device());
    L.v = Tensor::empty(s, like.dtype(), like.device());
    layers_.push_back(std::move(L));
  }
  pe_state_ = pe.begin_decode(capacity);
}

void KVCache::clear() {
  n_ = 0;
  for (auto& L : layers_) L.rotated = 0;
  pe_state_ = pe_->begin_decode(cap_);
}

void kv_write_rows(const Tensor& src, Tensor& buf, int64_t pos) {
  // src: [B, H, T, Dh] contiguous; buf: [B, H, cap, Dh]
  CTX_CHECK(src.dim() == 4 && buf.dim() == 4 && src.size(0) == buf.size(0) && src.size(1) == buf.size(1) &&
                src.size(3) == buf.size(3) && pos >= 0 && pos + src.size(2) <= buf.size(2),
            "kv_write_rows: ", src.str(), " does not fit rows [", pos, ", ", pos + src.size(2), ") of ", buf.str());
  CTX_CHECK(src.dtype() == buf.dtype() && src.device() == buf.device(), "kv_write_rows: ", src.str(),
            " and the cache ", buf.str(), " differ in dtype or device");
  const int64_t cap = buf.size(2), Dh = buf.size(3);
  Strided s, d;
  s.strides = contiguous_strides(src.shape());
  d.strides = {buf.size(1) * cap * Dh, cap * Dh, Dh, 1};
  d.offset = pos * Dh;
  backend_of(src).copy_strided(src, s, buf, d, src.shape(), false);
}

}  // namespace ctx::nn
