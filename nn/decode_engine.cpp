// nn/decode_engine.cpp — the graph-free decoder (see decode_engine.h).
#include "nn/decode_engine.h"

#include <algorithm>
#include <cmath>

#include "core/backend.h"
#include "core/device_table.h"  // to_device_like
#include "core/fast_paths.h"

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
  one_ = make_work(1);
  last_ = Tensor::empty({B_, D_}, like.dtype(), like.device());
  logits_ = Tensor::empty({B_, V_}, like.dtype(), like.device());
  row_dst_.strides = {H_ * cap_ * Dh_, cap_ * Dh_, Dh_, 1};
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
  w.merged = make({B_, T, D_});
  w.mean = make({R});
  w.rstd = make({R});
  w.qkv = make({B_, T, 3 * D_});
  for (Tensor* t : {&w.q, &w.k, &w.v, &w.qr, &w.kr, &w.o}) *t = make({B_, H_, T, Dh_});
  w.lse = make({B_, H_, T});
  w.pre = make({R, F_});
  w.h = make({R, F_});
  w.row_src.strides = contiguous_strides({B_, H_, T, Dh_});
  return w;
}

void DecodeEngine::write_rows(const Work& w, const Tensor& src, Tensor& cache, int64_t pos) {
  row_dst_.offset = pos * Dh_;
  backend_of(src).copy_strided(src, w.row_src, cache, row_dst_, src.shape(), false);
}

// One norm of the block's kind (the graph path's Norm::forward).
static void norm(Backend& be, const Norm& n, const Tensor& x, Tensor& y, Tensor& mean, Tensor& rstd) {
  if (n.kind == "layernorm")
    be.layernorm(x, n.weight.data(), n.bias.data(), n.eps, y, mean, rstd);
  else
    be.rmsnorm(x, n.weight.data(), n.eps, y, rstd);
}

// Block l on w.x [B T, D] at positions pos..pos+T-1 (the graph path's Block::forward_cached).
void DecodeEngine::layer(Work& w, int l, int64_t pos) {
  Backend& be = backend_of(w.x);
  const int64_t T = w.T;
  Layer& c = layers_[(size_t)l];
  const Block& b = *c.block;
  const Attention& at = *b.attn;
  norm(be, *b.norm1, w.x, w.y, w.mean, w.rstd);
  be.linear(w.y, at.qkv->weight.data(), at.qkv->bias.data(), w.qkv);  // [B, T, 3D]
  be.split_heads(w.qkv, H_, 0, w.q, w.k, w.v);                         // [B, H, T, Dh]
  const Tensor* q = &w.q;
  const Tensor* k = &w.k;
  if (tables_.cos.defined()) {
    const Tensor C = tables_.cos.slice0(pos, pos + T), S = tables_.sin.slice0(pos, pos + T);  // [T, Dh/2]
    be.rope_rotate(w.q, C, S, w.qr, tables_.interleaved, false);
    be.rope_rotate(w.k, C, S, w.kr, tables_.interleaved, false);
    q = &w.qr, k = &w.kr;
  }
  write_rows(w, *k, c.k, pos);
  write_rows(w, w.v, c.v, pos);
  AttnDims d;
  d.B = B_, d.H = H_, d.T = T, d.S = pos + T, d.Dh = Dh_;
  d.window = window_;
  d.scale = 1.0 / std::sqrt((double)Dh_);
  d.kv_rows = cap_;
  be.attention_forward(d, *q, c.k, c.v, Tensor(), w.o, w.lse, AttnRel{});  // o [B, H, T, Dh]
  // one query: o's [B, H, 1, Dh] is already [B, D]
  if (T > 1) be.merge_heads(w.o, w.merged);
  be.linear(T > 1 ? w.merged : w.o.view({B_, D_}), at.proj->weight.data(), at.proj->bias.data(), w.a);
  be.binary(BinaryOp::Add, w.x, w.a, w.x);
  norm(be, *b.norm2, w.x, w.y, w.mean, w.rstd);
  const Linear& fc = *b.mlp->fc;
  if (mlp_node_) {
    be.linear_gelu(w.y, fc.weight.data(), fc.bias.data(), w.pre, w.h);
  } else {
    be.linear(w.y, fc.weight.data(), fc.bias.data(), w.pre);
    be.unary(UnaryOp::GeluTanh, w.pre, w.h);
  }
  be.linear(w.h, b.mlp->proj->weight.data(), b.mlp->proj->bias.data(), w.a);
  be.binary(BinaryOp::Add, w.x, w.a, w.x);
}

// w.T positions of each sequence from tokens (row b at tokens + b * stride) through every layer;
// w.y holds the final norm of each row.
void DecodeEngine::run(Work& w, const int32_t* tokens, int64_t stride) {
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
  be.index_select(m_.wte->weight.data(), 0, w.tok, w.x);  // [B T, D]
  if (tables_.add.defined()) {
    Tensor x3 = T == 1 ? w.x : w.x.view({B_, T, D_});
    be.binary(BinaryOp::Add, x3, tables_.add.slice0(pos, pos + T), x3);  // + table rows [T, D]
  }
  for (int l = 0; l < (int)layers_.size(); ++l) layer(w, l, pos);
  norm(be, *m_.norm_f, w.x, w.y, w.mean, w.rstd);
  n_ += T;
}

const Tensor& DecodeEngine::step(const int32_t* tokens, int64_t T) {
  CTX_CHECK(T >= 1, "decode: a step takes at least one position, got ", T);
  Backend& be = backend_of(logits_);
  const Tensor* y = &one_.y;  // [B, D]: each sequence's last row after the final norm
  if (T == 1) {
    run(one_, tokens, 1);
  } else {
    for (int64_t c = 0; c < T; c += kChunk) {
      const int64_t t = std::min(kChunk, T - c);
      if (!chunk_ || chunk_->T != t) chunk_ = std::make_unique<Work>(make_work(t));
      run(*chunk_, tokens + c, T);
    }
    // row T_chunk - 1 of each sequence: [B, t, D] -> [B, D]
    Strided s, d;
    s.strides = {chunk_->T * D_, 1};
    s.offset = (chunk_->T - 1) * D_;
    d.strides = {D_, 1};
    be.copy_strided(chunk_->y, s, last_, d, {B_, D_}, false);
    y = &last_;
  }
  const Tensor& w_out = m_.lm_head ? m_.lm_head->weight.data() : m_.wte->weight.data();
  GemmDesc g;
  g.trans_b = true;
  g.M = B_, g.N = V_, g.K = D_;
  be.gemm(g, *y, w_out, logits_);  // [B, V]
  return logits_;
}

}  // namespace ctx::nn
