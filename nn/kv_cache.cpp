// nn/kv_cache.cpp — the decoding cache's buffers (see kv_cache.h).
#include "nn/kv_cache.h"

#include "core/backend.h"

#include <algorithm>

namespace ctx::nn {

KVCache::KVCache(const ModelConfig& cfg, PositionalEncoding& pe, int64_t batch, int64_t capacity, int64_t window,
                 const Tensor& like, int64_t sinks)
    : B_(batch), cap_(capacity), window_(window), sinks_(sinks), pe_(&pe) {
  CTX_CHECK(batch >= 1 && capacity >= 1, "KVCache: batch (", batch, ") and capacity (", capacity,
            ") must be >= 1");
  CTX_CHECK(window >= 0, "KVCache: window must be >= 0 (0 = full causal attention), got ", window);
  CTX_CHECK(sinks >= 0 && (sinks == 0 || window > 0), "KVCache: sinks must be >= 0 and need a window > 0, got sinks ",
            sinks, " with window ", window);
  buf_ = sinks > 0 ? std::min(capacity, sinks + window) : capacity;
  const Shape s = {batch, cfg.n_heads, buf_, cfg.head_dim()};
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
  n_ = rows_ = 0;
  for (auto& L : layers_) L.rotated = 0;
  pe_state_ = pe_->begin_decode(cap_);
}

void KVCache::make_room(int64_t T) {
  CTX_CHECK(n_ + T <= cap_, "decode: ", n_ + T, " positions exceed the cache capacity ", cap_);
  if (rows_ + T <= buf_) return;
  CTX_CHECK(rolling() && T == 1 && rows_ == buf_, "decode: ", T, " new positions do not fit the rolling cache of ",
            buf_, " rows (", rows_, " held); feed one position per step once it is full");
  // rows sinks+1 .. buf-1 move to sinks .. buf-2 (a copy first: the ranges overlap)
  for (auto& L : layers_)
    for (Tensor* t : {&L.k_raw, &L.v}) {
      const Tensor keep = kv_read_rows(*t, sinks_ + 1, buf_);  // [B, H, buf - sinks - 1, Dh]
      kv_write_rows(keep, *t, sinks_);
    }
  for (auto& L : layers_) L.rotated = 0;  // every rank moved: rotate all keys again
  rows_ -= 1;
}

Tensor kv_read_rows(const Tensor& buf, int64_t begin, int64_t end) {
  // buf: [B, H, cap, Dh] -> [B, H, end - begin, Dh] (contiguous copy)
  CTX_CHECK(buf.dim() == 4 && 0 <= begin && begin <= end && end <= buf.size(2), "kv_read_rows: rows [", begin, ", ",
            end, ") of ", buf.str());
  const int64_t cap = buf.size(2), Dh = buf.size(3);
  const Shape shape = {buf.size(0), buf.size(1), end - begin, Dh};
  Tensor out = Tensor::empty(shape, buf.dtype(), buf.device());
  Strided s, d;
  s.strides = {buf.size(1) * cap * Dh, cap * Dh, Dh, 1};
  s.offset = begin * Dh;
  d.strides = contiguous_strides(shape);
  backend_of(buf).copy_strided(buf, s, out, d, shape, false);
  return out;
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
