// nn/attention.cpp — causal multi-head attention (MODEL_SPEC §3):
//   qkv = x W^T + b                           // [B, T, 3D]
//   q, k, v                                   // [B, H, T, Dh]  (head h = cols h*Dh..)
//   rotate (rotary encodings), logits = scale q k^T + bias   // [B, H, T, S]
//   causal mask, softmax, o = p v (+ value terms)            // [B, H, T, Dh]
//     (one fused op, autograd/ops_attention.h, when use_fused_attention says so (core/fast_paths.h:
//      the switch, the backend has Fused::Attention and prefers it for the dims, on CUDA not for
//      training shapes, measured; CTXLAB_FUSED_ATTENTION=1 or set_fast_path(Attention, true):
//      whenever it has it; =0 or set_fast_path(Attention, false): never) and the encoding keeps
//      the default logits and output (dropout included: the kernels apply the mask))
//   out = merge_heads(o) Wp^T + bp            // [B, T, D]
#include "nn/attention.h"

#include <algorithm>
#include <cmath>

#include "autograd/ops_heads.h"
#include "core/fast_paths.h"
#include "core/rng.h"

namespace ctx::nn {

Attention::Attention(const ModelConfig& cfg, int layer, PositionalEncoding* pe, DType dt)
    : layer_(layer), H_(cfg.n_heads), Dh_(cfg.head_dim()), D_(cfg.d_model), dropout_(cfg.dropout), pe_(pe) {
  qkv = register_module("qkv", std::make_shared<Linear>(D_, 3 * D_, true, dt));
  proj = register_module("proj", std::make_shared<Linear>(D_, D_, true, dt));
  if (auto m = pe->layer_module(layer)) register_module("pe", m);
}

// What the encoding hooks see of a call of layer `layer` with T queries at positions q_pos0..
// and S keys (H heads of Dh; the layer's projection for the encodings that use it).
static AttnState new_state(int layer, int64_t H, int64_t Dh, const Linear& qkv, int64_t B, int64_t T,
                           int64_t S, int64_t q_pos0) {
  AttnState st;
  st.layer = layer;
  st.B = B;
  st.H = H;
  st.T = T;
  st.S = S;
  st.Dh = Dh;
  st.q_pos0 = q_pos0;
  st.scale = 1.0 / std::sqrt((double)Dh);
  st.qkv_weight = qkv.weight;
  st.qkv_bias = qkv.bias;
  return st;
}

// The call as Backend::prefers_fused_attention sees it. plain: the scores are q . k alone under
// the mask (the encoding keeps the default logits, its score terms, computed here once for the
// call, add no bias and no content-position terms; no dropout is drawn); dist_table: the same
// plus a distance table alone (RelTerms::dist_bias).
AttnQuery Attention::query(AttnState& st, const DropoutMask& drop) const {
  AttnQuery a{st.B, H_, st.T, st.S, Dh_, false, false};
  if (drop.active() || !pe_->fused_attention_ok(st)) return a;
  const ScoreTerms& t = pe_->score_terms(st);
  if (t.bias.defined()) return a;
  RelTerms content = t.rel;
  content.dist_bias = Variable();
  a.plain = t.rel.empty();
  a.dist_table = content.empty() && t.rel.dist_bias.defined();
  return a;
}

Variable Attention::forward(const Variable& x, Rng* rng, const Positions* positions) const {
  const int64_t B = x.size(0), T = x.size(1);
  // Keys and values see [memory; x] when the encoding keeps segment memory (Transformer-XL);
  // queries are the last T rows. Memory is detached: no gradient flows into past segments.
  const int64_t mem_len = pe_->memory_length();
  Variable kv_in = x;
  if (mem_len > 0 && mem_.defined() && mem_.size(0) == B) kv_in = concat({Variable(mem_, false), x}, 1);
  const int64_t S = kv_in.size(1), M = S - T;
  Variable qkv_out = qkv->forward(kv_in);                               // [B, S, 3D]
  std::array<Variable, 3> heads = split_heads(qkv_out, H_, M);          // q [B, H, T, Dh]; k, v [B, H, S, Dh]
  AttnState st = new_state(layer_, H_, Dh_, *qkv, B, T, S, M);
  st.window = window_;
  st.sinks = sinks_;
  st.positions = positions;
  st.q = heads[0];  // the last T of S rows
  st.k = heads[1];
  st.v = heads[2];
  AttnRowStats row_stats;  // eval --attn-stats: [B, H, T, 3] from the fused kernel or the composed p
  if (stats_) row_stats.sink_keys = stats_->sink_keys(), st.stats = &row_stats;
  pe_->rotate(st);
  Variable o;                                                           // [B, H, T, Dh]
  // dropout on the probabilities: one seed per call, the same mask on either path
  const DropoutMask drop = rng && dropout_ > 0 && is_training() ? dropout_mask(dropout_, rng->next_u64())
                                                                 : DropoutMask{};
  // sinks: the composed path (the fused kernels know only the window), unless the encoding's own
  // fused attention takes them (cope)
  if ((sinks_ == 0 || pe_->fused_attention_takes_sinks()) &&
      use_fused_attention(backend_of(st.q.data()), query(st, drop)))
    o = pe_->fused_attention(st, window_, drop);  // undefined when the encoding cannot take it
  if (!o.defined()) {
    Variable s = pe_->logits(st);                                       // [B, H, T, S]
    if (sinks_ > 0) s = masked_fill(s, hidden_keys_mask(T, S, window_, sinks_, s.data()), -INFINITY);
    Variable p = causal_softmax(s, st.S - st.T, sinks_ > 0 ? 0 : window_);  // [B, H, T, S]
    if (stats_) row_stats.rows = attention_row_stats(p.data(), row_stats.sink_keys);
    o = pe_->output(st, dropout(p, drop));                              // [B, H, T, Dh]
  }
  if (stats_) stats_->add(layer_, row_stats.rows);
  Variable merged = merge_heads(o);                                     // [B, T, D]
  if (mem_len > 0) {  // keep the last mem_len inputs for the next segment
    const int64_t keep = std::min(mem_len, S);
    mem_ = slice(kv_in, 1, S - keep, S).data().clone();
  }
  return proj->forward(merged);
}

Variable Attention::forward_cached(const Variable& x, KVCache& cache) const {
  // pos0: the first new row's rank in the cache (its position, unless a rolling cache rolled)
  const int64_t B = x.size(0), T = x.size(1), pos0 = cache.rows(), n = pos0 + T;
  CTX_CHECK(B == cache.batch(), "decode: batch ", B, " differs from the cache's ", cache.batch());
  CTX_CHECK(n <= cache.buffer_rows(), "decode: ", n, " rows exceed the cache's ", cache.buffer_rows());
  KVCache::Layer& c = cache.layer(layer_);
  Variable qkv_out = qkv->forward(x);                                   // [B, T, 3D]: new rows only
  std::array<Variable, 3> heads = split_heads(qkv_out, H_, 0);          // q, k, v [B, H, T, Dh]
  kv_write_rows(heads[1].data(), c.k_raw, pos0);
  kv_write_rows(heads[2].data(), c.v, pos0);
  auto rows = [&](const Tensor& buf) { return slice(Variable(buf, false), 2, 0, n); };  // [B, H, n, Dh]
  AttnState st = new_state(layer_, H_, Dh_, *qkv, B, T, n, pos0);
  st.decode = cache.posenc_state();
  const bool stable = pe_->decode_keys_stable(n);
  // The fused attention reads the cache's buffers in place ([B, H, capacity, Dh], the first n
  // rows the keys: fused_causal_attention's `keys`), unless the composed path or the encoding's
  // score terms need the n rows as a tensor of their own (then they are copied out).
  const bool fused = use_fused_attention(backend_of(c.v), {B, H_, T, n, Dh_, false});
  const bool in_place = fused && stable && c.rotated == pos0 && pe_->fused_attention_ok(st) && !pe_->terms_read_keys();
  st.v = in_place ? Variable(c.v, false) : rows(c.v);
  if (stable && c.rotated == pos0) {
    // rotate only the new queries and keys (keys at k_pos0 = pos0), append the rotated keys
    AttnState fresh = st;
    fresh.S = T;
    fresh.k_pos0 = pos0;
    fresh.q = heads[0];
    fresh.k = heads[1];
    fresh.v = heads[2];
    pe_->rotate(fresh);
    kv_write_rows(fresh.k.data(), c.k_rot, pos0);
    c.rotated = n;
    st.q = fresh.q;
    st.k = in_place ? Variable(c.k_rot, false) : rows(c.k_rot);
  } else {
    // the rotation of old keys depends on n (xpos, dynamic NTK beyond L): rotate them all again
    st.q = heads[0];
    st.k = rows(c.k_raw);
    pe_->rotate(st);
    if (stable) kv_write_rows(st.k.data(), c.k_rot, 0);
    c.rotated = stable ? n : 0;
  }
  // Window: the cache's sliding window; Transformer-XL memory of M positions: after the first
  // segment (the prompt, one segment as GPT::forward) each query sees its M predecessors and
  // itself, as GPT::forward(token, 0, use_memory = true) does one token at a time.
  // A rolling cache (sinks) holds exactly the visible keys, at their ranks: no window mask.
  int64_t window = cache.rolling() ? 0 : cache.window();
  const int64_t mem_len = pe_->memory_length();
  if (mem_len > 0 && pos0 > 0) {
    CTX_CHECK(T == 1, "decode: with Transformer-XL memory (mem_len ", mem_len, ") the steps after the "
              "first segment take one token, got ", T);
    window = window == 0 ? mem_len + 1 : std::min(window, mem_len + 1);
  }
  st.window = window;
  Variable o;                                                           // [B, H, T, Dh]
  if (fused) o = pe_->fused_attention(st, window);
  if (!o.defined()) {
    if (in_place) st.k = rows(c.k_rot), st.v = rows(c.v);  // e.g. a bias per batch row
    o = pe_->output(st, causal_softmax(pe_->logits(st), st.S - st.T, window));
  }
  return proj->forward(merge_heads(o));
}

}  // namespace ctx::nn
