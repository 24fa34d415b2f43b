// nn/decode_engine.cpp — the graph-free decoder (see decode_engine.h).
#include "nn/decode_engine.h"

#include <algorithm>
#include <cmath>

#include "core/backend.h"
#include "core/device_table.h"  // to_device_like
#include "core/fast_paths.h"
#include "core/threads.h"

namespace ctx::nn {

namespace {

// Why `m` needs the graph path for this generation, or "" when the engine can serve it.
std::string unsupported(GPT& m, const std::optional<DecodeTables>& tables) {
  const Backend& be = backend_of(m.wte->weight.data());
  const int64_t H = m.cfg.n_heads, Dh = m.cfg.head_dim();
  if (!fast_path_enabled(FastPath::Decode)) return "CTXLAB_FUSED_DECODE=0";
  if (!tables) return "posenc " + m.pe->type() + " decodes through its hooks";
  if (m.pe->memory_length() > 0) return "Transformer-XL memory";
  if (m.attention_sinks() > 0) return "attention sinks (the rolling cache)";
  for (FastPath p : {FastPath::Linear, FastPath::Heads, FastPath::Attention})
    if (!use_fused(p, be)) return std::string("the fast path ") + fast_path_info(p).name + " is off";
  if (tables->cos.defined() && !use_fused(FastPath::Rope, be)) return "the fast path rope is off";
  // the graph path's choice for a decoding step (nn/attention.cpp): the engine runs the fused kernel
  if (!use_fused_attention(be, {1, H, 1, 2, Dh, false})) return "the backend prefers the composed attention";
  return "";
}

}  // namespace

std::unique_ptr<DecodeEngine> DecodeEngine::make(GPT& model, int64_t batch, int64_t capacity, int64_t window,
                                                 std::string* why) {
  CTX_CHECK(batch >= 1 && capacity >= 1 && window >= 0, "DecodeEngine: batch (", batch, ") and capacity (",
            capacity, ") must be >= 1 and window (", window, ") >= 0");
  std::optional<DecodeTables> tables = model.pe->decode_tables(capacity, model.wte->weight.data());
  const std::string reason = unsupported(model, tables);
  if (why) *why = reason;
  if (!reason.empty()) return nullptr;
  return std::unique_ptr<DecodeEngine>(new DecodeEngine(model, batch, capacity, window, std::move(*tables)));
}

DecodeEngine::DecodeEngine(GPT& m, int64_t batch, int64_t capacity, int64_t window, DecodeTables tables)
    : m_(m), B_(batch), cap_(capacity), window_(window), D_(m.cfg.d_model), H_(m.cfg.n_heads),
      Dh_(m.cfg.head_dim()), F_(m.cfg.ff_dim()), V_(m.cfg.vocab_size),
      mlp_node_(use_fused(FastPath::MlpGelu, backend_of(m.wte->weight.data()))), tables_(std::move(tables)) {
  const Tensor& like = m.wte->weight.data();
  for (auto& b : m.blocks) {
    const Shape s = {B_, H_, cap_, Dh_};
    layers_.push_back({b.get(), Tensor::empty(s, like.dtype(), like.device()),
                       Tensor::empty(s, like.dtype(), like.device())});
  }
  // One sequence on the CPU: a team of the pool's threads streams the weights together (a step's
  // GEMVs split by rows; docs/sampling.md). More rows are GEMMs, which thread themselves; a device
  // runs its kernels asynchronously, one host thread is all it needs.
  last_ = Tensor::empty({B_, D_}, like.dtype(), like.device());
  logits_ = Tensor::empty({B_, V_}, like.dtype(), like.device());
  one_ = make_plan(1, like.device() == Device::CPU && B_ == 1 ? ctx::num_threads() : 1);
}

DecodeEngine::Work DecodeEngine::make_work(int64_t T) const {
  const Tensor& like = m_.wte->weight.data();
  auto make = [&](const Shape& s) { return Tensor::empty(s, like.dtype(), like.device()); };
  const int64_t R = B_ * T;
  Work w;
  w.T = T;
  w.tok_host = Tensor::empty({R}, DType::I64);
  w.tok = like.device() == Device::CPU ? w.tok_host : to_device_like(w.tok_host, like);
  for (Tensor* t : {&w.x, &w.y, &w.a}) *t = make({R, D_});
  w.mean = make({R});
  w.rstd = make({R});
  w.qkv = make({B_, T, 3 * D_});
  for (Tensor* t : {&w.qr, &w.kr, &w.o}) *t = make({B_, H_, T, Dh_});
  if (R == 1) {  // q | k | v are qkv's three blocks of D: [1, H, 1, Dh] each, no split_heads
    const Tensor flat = w.qkv.view({3 * D_});
    w.q = flat.slice0(0, D_).view({1, H_, 1, Dh_});
    w.k = flat.slice0(D_, 2 * D_).view({1, H_, 1, Dh_});
    w.v = flat.slice0(2 * D_, 3 * D_).view({1, H_, 1, Dh_});
  } else {
    for (Tensor* t : {&w.q, &w.k, &w.v}) *t = make({B_, H_, T, Dh_});
  }
  w.lse = make({B_, H_, T});
  w.merged = T == 1 ? w.o.view({B_, D_}) : make({B_, T, D_});  // one query: o [B, H, 1, Dh] is [B, D]
  w.pre = make({R, F_});
  w.h = make({R, F_});
  return w;
}

namespace {

// Rows [n0, n1) of a matrix [N, ...] (a weight, or a bias [N]).
Tensor rows(const Tensor& t, std::pair<int64_t, int64_t> r) { return t.slice0(r.first, r.second); }
// Columns [n0, n1) of one row y [1, N] (or [.., N] holding one row) as [1, n].
Tensor cols(const Tensor& y, std::pair<int64_t, int64_t> r) {
  return y.view({-1}).slice0(r.first, r.second).view({1, r.second - r.first});
}
// Heads (b, h) g0..g1 of x [B, H, rows, Dh] (or lse [B, H, T]) as [1, n, rows(, Dh)].
Tensor heads(const Tensor& x, std::pair<int64_t, int64_t> g) {
  Shape s = x.shape();
  const int64_t G = s[0] * s[1];
  Shape flat = {G};
  flat.insert(flat.end(), s.begin() + 2, s.end());
  Shape part = {1, g.second - g.first};
  part.insert(part.end(), s.begin() + 2, s.end());
  return x.view(flat).slice0(g.first, g.second).view(part);
}

}  // namespace

std::unique_ptr<DecodeEngine::Plan> DecodeEngine::make_plan(int64_t T, int threads) {
  auto p = std::make_unique<Plan>();
  p->w = make_work(T);
  p->threads = B_ * T == 1 ? std::max(1, threads) : 1;  // column shares need one row
  Work& w = p->w;
  const Tensor& like = m_.wte->weight.data();
  const int n = p->threads;
  // A team's shares: weight rows in blocks of 16 (whole 4-row GEMV passes and 64-byte lines)
  auto share = [&](int r, int64_t N) { return Team(r, n).share(N, 16); };
  for (const Layer& c : layers_) {
    std::vector<Part> ranks;
    const Attention& at = *c.block->attn;
    const MLP& mlp = *c.block->mlp;
    for (int r = 0; r < n; ++r) {
      Part q;
      const bool whole = n == 1;
      auto lin = [&](const Linear& l, const Tensor& out, Tensor& wv, Tensor& bv, Tensor& ov) {
        const auto s = share(r, l.weight.size(0));
        wv = whole ? l.weight.data() : rows(l.weight.data(), s);
        bv = whole ? l.bias.data() : rows(l.bias.data(), s);
        ov = whole ? out : cols(out, s);
      };
      const auto g = Team(r, n).share(B_ * H_);  // its heads (b, h)
      if (whole) {
        q.qkv.push_back({at.qkv->weight.data(), at.qkv->bias.data(), w.qkv});
      } else {  // one row: heads g are columns g0 Dh..g1 Dh of each of the q, k, v blocks
        for (int64_t blk = 0; blk < 3 && g.second > g.first; ++blk) {
          const std::pair<int64_t, int64_t> c = {blk * D_ + g.first * Dh_, blk * D_ + g.second * Dh_};
          q.qkv.push_back({rows(at.qkv->weight.data(), c), rows(at.qkv->bias.data(), c), cols(w.qkv, c)});
        }
      }
      lin(*at.proj, w.a, q.wp, q.bp, q.a);
      lin(*mlp.fc, w.pre, q.wfc, q.bfc, q.pre);
      q.h = whole ? w.h : cols(w.h, share(r, F_));
      lin(*mlp.proj, w.a, q.wp2, q.bp2, q.a2);
      q.heads = g.second - g.first;
      if (q.heads > 0) {
        q.q = heads(w.q, g), q.k = heads(w.k, g), q.v = heads(w.v, g);
        q.qr = heads(w.qr, g), q.kr = heads(w.kr, g), q.o = heads(w.o, g), q.lse = heads(w.lse, g);
        q.ck = heads(c.k, g), q.cv = heads(c.v, g);
        q.kv_src.strides = contiguous_strides(q.k.shape());
        q.kv_dst.strides = {q.heads * cap_ * Dh_, cap_ * Dh_, Dh_, 1};
      }
      ranks.push_back(std::move(q));
    }
    p->parts.push_back(std::move(ranks));
  }
  for (int r = 0; r < n; ++r) {
    if (r == 0) {
      p->streams.push_back({w.x, w.y, w.mean, w.rstd});
    } else {
      auto make = [&](const Shape& s) { return Tensor::empty(s, like.dtype(), like.device()); };
      p->streams.push_back({make({1, D_}), make({1, D_}), make({1}), make({1})});
    }
  }
  const Tensor& w_out = m_.lm_head ? m_.lm_head->weight.data() : like;
  const Tensor zero = Tensor::zeros({V_}, like.dtype(), like.device());
  for (int r = 0; r < n; ++r) {
    p->wout.push_back(n == 1 ? w_out : rows(w_out, share(r, V_)));
    p->bout.push_back(n == 1 ? zero : rows(zero, share(r, V_)));
    p->logits.push_back(n == 1 ? logits_ : cols(logits_, share(r, V_)));
  }
  if (tables_.cos.defined()) {
    p->rope_c = Tensor::empty({T, Dh_ / 2}, like.dtype(), like.device());
    p->rope_s = Tensor::empty({T, Dh_ / 2}, like.dtype(), like.device());
    p->rope_src.strides = {Dh_ / 2, 1};
    p->rope_dst.strides = {Dh_ / 2, 1};
  }
  return p;
}

// s.y = the norm n of s.x (the graph path's Norm::forward).
void DecodeEngine::norm_into(const Norm& n, Stream& s) const {
  Backend& be = backend_of(s.x);
  if (n.kind == "layernorm")
    be.layernorm(s.x, n.weight.data(), n.bias.data(), n.eps, s.y, s.mean, s.rstd);
  else
    be.rmsnorm(s.x, n.weight.data(), n.eps, s.y, s.rstd);
}

// Block l at positions pos..pos+T-1 (the graph path's Block::forward_cached) on p's workspace, as
// this thread's part: its rows of each weight, its heads, between barriers; every thread keeps
// its own residual stream (its s.y holds norm1 of s.x on entry, the next norm's input on exit is
// left to the caller).
void DecodeEngine::layer(Plan& p, const Team& tm, int l, int64_t pos) {
  Work& w = p.w;
  Backend& be = backend_of(w.x);
  Part& q = p.parts[(size_t)l][(size_t)tm.rank()];
  Stream& st = p.streams[(size_t)tm.rank()];
  const Block& b = *layers_[(size_t)l].block;
  for (auto& [wt, bias, out] : q.qkv) be.linear(st.y, wt, bias, out);    // [B, T, 3D] (its columns)
  if (B_ * w.T > 1) be.split_heads(w.qkv, H_, 0, w.q, w.k, w.v);         // (a team of one)
  if (q.heads > 0) {  // its heads: rotate, append k and v to the cache, attend
    const Tensor* qq = &q.q;
    const Tensor* kk = &q.k;
    if (tables_.cos.defined()) {
      be.rope_rotate(q.q, p.rope_c, p.rope_s, q.qr, tables_.interleaved, false);
      be.rope_rotate(q.k, p.rope_c, p.rope_s, q.kr, tables_.interleaved, false);
      qq = &q.qr, kk = &q.kr;
    }
    q.kv_dst.offset = pos * Dh_;
    be.copy_strided(*kk, q.kv_src, q.ck, q.kv_dst, kk->shape(), false);
    be.copy_strided(q.v, q.kv_src, q.cv, q.kv_dst, q.v.shape(), false);
    AttnDims d;
    d.B = 1, d.H = q.heads, d.T = w.T, d.S = pos + w.T, d.Dh = Dh_;
    d.window = window_;
    d.scale = 1.0 / std::sqrt((double)Dh_);
    d.kv_rows = cap_;
    be.attention_forward(d, *qq, q.ck, q.cv, Tensor(), q.o, q.lse, AttnRel{});  // [1, n, T, Dh]
  }
  if (w.T > 1) be.merge_heads(w.o, w.merged);  // (a team of one; one query: merged is o)
  tm.barrier();
  if (q.wp.size(0) > 0) be.linear(w.merged, q.wp, q.bp, q.a);
  tm.barrier();
  be.binary(BinaryOp::Add, st.x, w.a, st.x);
  norm_into(*b.norm2, st);
  if (q.wfc.size(0) == 0) {
  } else if (mlp_node_) {
    be.linear_gelu(st.y, q.wfc, q.bfc, q.pre, q.h);
  } else {
    be.linear(st.y, q.wfc, q.bfc, q.pre);
    be.unary(UnaryOp::GeluTanh, q.pre, q.h);
  }
  tm.barrier();
  if (q.wp2.size(0) > 0) be.linear(w.h, q.wp2, q.bp2, q.a2);
  tm.barrier();
  be.binary(BinaryOp::Add, st.x, w.a, st.x);
}

// p.w.T positions of each sequence from tokens (row b at tokens + b * stride) through every layer
// and the output head: logits_ [B, V] of each sequence's last one.
void DecodeEngine::run(Plan& p, const int32_t* tokens, int64_t stride) {
  Work& w = p.w;
  const int64_t T = w.T, pos = n_;
  CTX_CHECK(pos + T <= cap_, "decode: positions ", pos, "..", pos + T - 1, " are past the engine's capacity ", cap_);
  int64_t* t = w.tok_host.host<int64_t>();
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t i = 0; i < T; ++i) {
      const int32_t id = tokens[b * stride + i];
      CTX_CHECK(id >= 0 && id < V_, "decode: token id ", id, " of sequence ", b, " is out of range for vocab_size ",
                V_);
      t[b * T + i] = id;
    }
  if (w.tok.device() != Device::CPU) w.tok = to_device_like(w.tok_host, w.x);  // 8 B a token up
  Backend& be = backend_of(w.x);
  if (tables_.cos.defined()) {  // the rotation of positions pos.. (rows of the tables)
    p.rope_src.offset = pos * (Dh_ / 2);
    be.copy_strided(tables_.cos, p.rope_src, p.rope_c, p.rope_dst, p.rope_c.shape(), false);
    be.copy_strided(tables_.sin, p.rope_src, p.rope_s, p.rope_dst, p.rope_s.shape(), false);
  }
  run_team(p.threads, [&](const Team& tm) {
    Stream& st = p.streams[(size_t)tm.rank()];
    be.index_select(m_.wte->weight.data(), 0, w.tok, st.x);  // [B T, D]
    if (tables_.add.defined()) {
      Tensor x3 = T == 1 ? st.x : st.x.view({B_, T, D_});
      be.binary(BinaryOp::Add, x3, tables_.add.slice0(pos, pos + T), x3);  // + table rows [T, D]
    }
    for (int l = 0; l < (int)layers_.size(); ++l) {
      norm_into(*layers_[(size_t)l].block->norm1, st);
      layer(p, tm, l, pos);
    }
    norm_into(*m_.norm_f, st);
    const Tensor* y = &st.y;  // [B, D]: each sequence's last row after the final norm
    if (T > 1) {  // row T - 1 of each sequence: [B, T, D] -> [B, D] (a team of one)
      Strided s, d;
      s.strides = {T * D_, 1};
      s.offset = (T - 1) * D_;
      d.strides = {D_, 1};
      be.copy_strided(st.y, s, last_, d, {B_, D_}, false);
      y = &last_;
    }
    // y w_out^T as a Linear with a zero bias: a batch-1 step's output head then takes the GEMV
    // kernels too (the graph path's matmul: the same products, summed by another kernel)
    const size_t r = (size_t)tm.rank();
    if (p.wout[r].size(0) > 0) be.linear(*y, p.wout[r], p.bout[r], p.logits[r]);  // [B, its columns]
  });
  n_ += T;
}

const Tensor& DecodeEngine::step(const int32_t* tokens, int64_t T) {
  CTX_CHECK(T >= 1, "decode: a step takes at least one position, got ", T);
  CTX_CHECK(n_ + T <= cap_, "decode: positions ", n_, "..", n_ + T - 1, " are past the engine's capacity ", cap_);
  if (T == 1) {
    run(*one_, tokens, 1);
    return logits_;
  }
  for (int64_t c = 0; c < T; c += kChunk) {
    const int64_t t = std::min(kChunk, T - c);
    if (!chunk_ || chunk_->w.T != t) chunk_ = make_plan(t, 1);
    run(*chunk_, tokens + c, T);
  }
  return logits_;
}

}  // namespace ctx::nn
