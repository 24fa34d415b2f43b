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
  // On the CPU a team of the pool's threads streams the weights together (a step's GEMVs split by
  // rows, for one sequence or a few; docs/sampling.md); a device runs its kernels asynchronously,
  // one host thread is all it needs.
  last_ = Tensor::empty({B_, D_}, like.dtype(), like.device());
  logits_ = Tensor::empty({B_, V_}, like.dtype(), like.device());
  const int threads = like.device() == Device::CPU ? ctx::num_threads() : 1;
  Backend& be = backend_of(like);
  if (like.dtype() == DType::F32 && use_fused(FastPath::DecodeStep, be)) whole_ = be.make_decode_step(stack(), threads);
  tok_.assign((size_t)B_, 0);
  if (!whole_) one_ = make_plan(1, threads);
}

DecodeStack DecodeEngine::stack() const {
  DecodeStack s;
  s.B = B_, s.H = H_, s.Dh = Dh_, s.capacity = cap_, s.window = window_;
  s.layernorm = m_.norm_f->kind == "layernorm";
  auto bias = [&](const Norm& n) { return s.layernorm ? n.bias.data() : Tensor(); };
  for (const Layer& c : layers_) {
    const Block& b = *c.block;
    DecodeLayer l;
    l.norm1_w = b.norm1->weight.data(), l.norm1_b = bias(*b.norm1), l.norm1_eps = b.norm1->eps;
    l.norm2_w = b.norm2->weight.data(), l.norm2_b = bias(*b.norm2), l.norm2_eps = b.norm2->eps;
    l.qkv_w = b.attn->qkv->weight.data(), l.qkv_b = b.attn->qkv->bias.data();
    l.proj_w = b.attn->proj->weight.data(), l.proj_b = b.attn->proj->bias.data();
    l.fc_w = b.mlp->fc->weight.data(), l.fc_b = b.mlp->fc->bias.data();
    l.mproj_w = b.mlp->proj->weight.data(), l.mproj_b = b.mlp->proj->bias.data();
    l.k_cache = c.k, l.v_cache = c.v;
    s.layers.push_back(std::move(l));
  }
  s.wte = m_.wte->weight.data();
  s.add = tables_.add;
  s.cos = tables_.cos, s.sin = tables_.sin, s.interleaved = tables_.interleaved;
  s.norm_f_w = m_.norm_f->weight.data(), s.norm_f_b = bias(*m_.norm_f), s.norm_f_eps = m_.norm_f->eps;
  s.head_w = m_.lm_head ? m_.lm_head->weight.data() : s.wte;
  s.keep = &m_.decode_keep;
  return s;
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

// Rows a step may have for a team to split its GEMMs by output columns: the CPU's GEMV kernels
// take up to 8 (core/cpu/gemv.h); past that a GEMM threads itself.
constexpr int64_t kTeamRows = 8;

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
  const int64_t R = B_ * T;
  // a team where the GEMV kernels take the rows (one token per sequence, a few sequences)
  p->threads = T == 1 && R <= kTeamRows ? std::max(1, threads) : 1;
  Work& w = p->w;
  const Tensor& like = m_.wte->weight.data();
  const int n = p->threads;
  auto make = [&](const Shape& s) { return Tensor::empty(s, like.dtype(), like.device()); };
  // A thread's share of a Linear [N, K] -> out [R, N]: rows in blocks of 16 (whole 4-row GEMV passes)
  auto lin = [&](const Tensor& wt, const Tensor& bias, const Tensor& out, std::pair<int64_t, int64_t> s) {
    Lin l;
    if (n == 1) {
      l.w = wt, l.b = bias, l.out = out;
      return l;
    }
    l.w = rows(wt, s), l.b = rows(bias, s);
    const int64_t N = wt.size(0), c = s.second - s.first;
    if (R == 1) {
      l.out = cols(out, s);
    } else {
      l.out = make({R, c});
      l.dst = out.view({R, N});
      l.scatter = true;
      l.from.strides = {c, 1};
      l.into.strides = {N, 1};
      l.into.offset = s.first;
    }
    return l;
  };
  auto share = [&](int r, int64_t N) { return Team(r, n).share(N, 16); };
  for (const Layer& c : layers_) {
    std::vector<Part> ranks;
    const Attention& at = *c.block->attn;
    const MLP& mlp = *c.block->mlp;
    for (int r = 0; r < n; ++r) {
      Part q;
      const auto g = Team(r, n).share(B_ * H_);  // its heads (b, h)
      const Tensor& wq = at.qkv->weight.data();
      const Tensor& bq = at.qkv->bias.data();
      if (n > 1 && R == 1) {  // heads g are columns g0 Dh..g1 Dh of each of the q, k, v blocks
        for (int64_t blk = 0; blk < 3 && g.second > g.first; ++blk)
          q.qkv.push_back(lin(wq, bq, w.qkv, {blk * D_ + g.first * Dh_, blk * D_ + g.second * Dh_}));
      } else {
        q.qkv.push_back(lin(wq, bq, w.qkv, share(r, 3 * D_)));
      }
      q.proj = lin(at.proj->weight.data(), at.proj->bias.data(), w.a, share(r, D_));
      q.fc = lin(mlp.fc->weight.data(), mlp.fc->bias.data(), w.pre, share(r, F_));
      q.h = n == 1 ? w.h : R == 1 ? cols(w.h, share(r, F_)) : make(q.fc.out.shape());
      if (q.fc.scatter) q.fc.dst = w.h.view({R, F_});  // the activation is what the others read
      q.mproj = lin(mlp.proj->weight.data(), mlp.proj->bias.data(), w.a, share(r, D_));
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
      p->streams.push_back({make({R, D_}), make({R, D_}), make({R}), make({R})});
    }
  }
  const Tensor& w_out = m_.lm_head ? m_.lm_head->weight.data() : like;
  const Tensor zero = Tensor::zeros({V_}, like.dtype(), like.device());
  for (int r = 0; r < n; ++r) p->head.push_back(lin(w_out, zero, logits_, share(r, V_)));
  if (tables_.cos.defined()) {
    p->rope_c = Tensor::empty({T, Dh_ / 2}, like.dtype(), like.device());
    p->rope_s = Tensor::empty({T, Dh_ / 2}, like.dtype(), like.device());
    p->rope_src.strides = {Dh_ / 2, 1};
    p->rope_dst.strides = {Dh_ / 2, 1};
  }
  return p;
}

// y = x w^T + b into its columns of the output. act: fc, whose activation gelu_tanh(y) goes to
// *act (node: in one call, as the MLP node's Backend::linear_gelu), and is what is scattered.
void DecodeEngine::run_lin(const Lin& l, const Tensor& x, const Tensor* act, bool node) {
  if (l.w.size(0) == 0) return;
  Backend& be = backend_of(x);
  Tensor out = l.out, a = act ? *act : Tensor();
  if (act && node) {
    be.linear_gelu(x, l.w, l.b, out, a);
  } else {
    be.linear(x, l.w, l.b, out);
    if (act) be.unary(UnaryOp::GeluTanh, out, a);
  }
  if (l.scatter) {
    Tensor dst = l.dst;
    const Tensor& src = act ? a : out;
    be.copy_strided(src, l.from, dst, l.into, src.shape(), false);
  }
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
  const bool one_row = B_ * w.T == 1;
  for (const Lin& lq : q.qkv) run_lin(lq, st.y, nullptr);  // [B, T, 3D] (its columns)
  if (!one_row) {  // q, k, v of every (b, h): the heads of a thread need columns of all the others
    tm.barrier();
    if (tm.rank() == 0) be.split_heads(w.qkv, H_, 0, w.q, w.k, w.v);
    tm.barrier();
  }
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
  run_lin(q.proj, w.merged, nullptr);
  tm.barrier();
  be.binary(BinaryOp::Add, st.x, w.a, st.x);
  norm_into(*b.norm2, st);
  run_lin(q.fc, st.y, &q.h, mlp_node_);
  tm.barrier();
  run_lin(q.mproj, w.h, nullptr);
  tm.barrier();
  be.binary(BinaryOp::Add, st.x, w.a, st.x);
}

// p.w.T positions of each sequence from tokens (row b at tokens + b * stride) through every layer
// and the output head: logits_ [B, V] of each sequence's last one.
void DecodeEngine::run(Plan& p, const int32_t* tokens, int64_t stride) {
  Work& w = p.w;
  const int64_t T = w.T, pos = n_;  // (step checked the capacity)
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
    // y w_out^T as a Linear with a zero bias: a decoding step's output head then takes the GEMV
    // kernels too (the graph path's matmul: the same products, summed by another kernel)
    run_lin(p.head[(size_t)tm.rank()], *y, nullptr);  // [B, V] (its columns)
  });
  n_ += T;
}

const Tensor& DecodeEngine::step(const int32_t* tokens, int64_t T) {
  CTX_CHECK(T >= 1, "decode: a step takes at least one position, got ", T);
  CTX_CHECK(n_ + T <= cap_, "decode: positions ", n_, "..", n_ + T - 1, " are past the engine's capacity ", cap_);
  if (T == 1 && whole_) {
    for (int64_t b = 0; b < B_; ++b) {
      CTX_CHECK(tokens[b] >= 0 && tokens[b] < V_, "decode: token id ", tokens[b], " of sequence ", b,
                " is out of range for vocab_size ", V_);
      tok_[(size_t)b] = tokens[b];
    }
    whole_->run(tok_.data(), n_, logits_);
    n_ += 1;
    return logits_;
  }
  if (T == 1) {
    run(*one_, tokens, 1);  // (one_ exists: whole_ is null)
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
