// nn/gpt.cpp — Block and GPT (see gpt.h).
#include "nn/gpt.h"

#include "autograd/profiler.h"
#include "core/backend.h"
#include "core/device_table.h"  // to_device_like, to_host, host_values, range_proven

#include <cmath>

namespace ctx::nn {

Block::Block(const ModelConfig& cfg, int layer, PositionalEncoding* pe, DType dt) : dropout(cfg.dropout) {
  norm1 = register_module("norm1", std::make_shared<Norm>(cfg.norm, cfg.d_model, cfg.norm_eps, dt));
  attn = register_module("attn", std::make_shared<Attention>(cfg, layer, pe, dt));
  norm2 = register_module("norm2", std::make_shared<Norm>(cfg.norm, cfg.d_model, cfg.norm_eps, dt));
  mlp = register_module("mlp", std::make_shared<MLP>(cfg.d_model, cfg.ff_dim(), dt));
}

Residual Block::forward(const Residual& in, const Norm& next, Rng* rng, const Positions* positions) const {
  Variable a = attn->forward(in.xn, rng, positions);
  if (rng && dropout > 0) a = ctx::dropout(a, dropout, is_training(), *rng);
  auto [h, hn] = norm2->forward_add(in.x, a);  // h = x + a, hn = norm2(h)
  Variable m = mlp->forward(hn);
  if (rng && dropout > 0) m = ctx::dropout(m, dropout, is_training(), *rng);
  auto [out, outn] = next.forward_add(h, m);  // out = h + m, outn = next(out)
  return {out, outn};
}

Variable Block::forward_cached(const Variable& x, KVCache& cache) const {
  Variable h = add(x, attn->forward_cached(norm1->forward(x), cache));
  return add(h, mlp->forward(norm2->forward(h)));
}

GPT::GPT(const ModelConfig& c, DType dt, const std::string& source) : cfg(c), dtype(dt) {
  validate_config(cfg, source);
  pe = make_posenc(cfg, source);
  wte = register_module("wte", std::make_shared<Embedding>(cfg.vocab_size, cfg.d_model, dt));
  if (auto m = pe->shared_module()) register_module(pe->shared_prefix(), m);
  for (int l = 0; l < cfg.n_layers; ++l)
    blocks.push_back(register_module("blocks." + std::to_string(l),
                                     std::make_shared<Block>(cfg, l, pe.get(), dt)));
  norm_f = register_module("norm_f", std::make_shared<Norm>(cfg.norm, cfg.d_model, cfg.norm_eps, dt));
  if (!cfg.tie_embeddings)
    lm_head = register_module("lm_head", std::make_shared<Linear>(cfg.d_model, cfg.vocab_size, false, dt));
  // Encoding parameters are created in f32; convert them to the model dtype.
  if (dt != DType::F32)
    for (auto& p : named_parameters())
      if (p.second.dtype() != dt) p.second.data() = p.second.data().to(dt);
}

static bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

void GPT::init_weights(uint64_t seed) {
  Rng rng(seed);
  const double std_resid = 0.02 / std::sqrt(2.0 * (double)cfg.n_layers);
  for (auto& [name, p] : named_parameters()) {
    Tensor& t = p.data();
    if (name.rfind("blocks.", 0) == 0 && name.find(".pe.") != std::string::npos) continue;
    if (name.rfind("pe.", 0) == 0 || name.rfind("wpe.", 0) == 0) continue;
    if (ends_with(name, "attn.proj.weight") || ends_with(name, "mlp.proj.weight"))
      rng.fill_normal(t, 0.0, std_resid);
    else if (ends_with(name, ".bias"))
      backend_of(t).fill(t, 0.0);
    else if (name.find("norm") != std::string::npos)
      backend_of(t).fill(t, 1.0);
    else
      rng.fill_normal(t, 0.0, 0.02);
  }
  pe->init_parameters(rng);
}

void GPT::check_tokens(const Tensor& tokens, const std::string& what) const {
  CTX_CHECK(tokens.dim() == 2 && tokens.size(0) >= 1 && tokens.size(1) >= 1, what,
            ": tokens must be [B, T] with B >= 1 and T >= 1, got ", tokens.str());
  CTX_CHECK(tokens.dtype() == DType::I32 || tokens.dtype() == DType::I64, what,
            ": tokens must be i32 or i64, got ", tokens.str());
  // Device tokens whose writer checked them against this vocabulary (range_proven) are not read;
  // a host mirror is read in place; other device tokens are copied here (small)
  if (range_proven(tokens, cfg.vocab_size)) return;
  const Tensor host = host_values(tokens);
  for (int64_t i = 0; i < host.numel(); ++i) {
    double id = host.at(i);
    CTX_CHECK(id >= 0 && id < cfg.vocab_size, what, ": token id ", (int64_t)id, " at [",
              i / tokens.size(1), ", ", i % tokens.size(1), "] is out of range for vocab_size ",
              cfg.vocab_size);
  }
}

void GPT::reset_memory() {
  for (auto& b : blocks) b->attn->reset_memory();
}

std::vector<Tensor> GPT::memory_state() const {
  std::vector<Tensor> m;
  for (auto& b : blocks) m.push_back(b->attn->memory());
  return m;
}

void GPT::set_memory_state(const std::vector<Tensor>& m) {
  CTX_CHECK(m.size() == blocks.size(), "set_memory_state: ", m.size(), " tensors for ", blocks.size(), " layers");
  for (size_t l = 0; l < blocks.size(); ++l) blocks[l]->attn->set_memory(m[l]);
}

void GPT::set_attention_stats(AttnStatsCollector* c) {
  CTX_CHECK(!c || (c->layers() == cfg.n_layers && c->heads() == cfg.n_heads), "set_attention_stats: the collector "
            "has ", c ? c->layers() : 0, " layers x ", c ? c->heads() : 0, " heads, the model ", cfg.n_layers, " x ",
            cfg.n_heads);
  for (auto& b : blocks) b->attn->set_stats(c);
}

void GPT::set_attention_window(int64_t w, int64_t sinks) {
  CTX_CHECK(w >= 0, "attention window must be >= 0 (0 = full causal attention), got ", w);
  check_sinks(w, sinks);
  for (auto& b : blocks) b->attn->set_window(w, sinks);
}

void GPT::check_sinks(int64_t w, int64_t sinks) const {
  CTX_CHECK(sinks >= 0, "--sinks must be >= 0 (0 = the plain window, e.g. 4), got ", sinks);
  if (sinks == 0) return;
  CTX_CHECK(w > 0, "--sinks ", sinks, " needs --window W (attention sinks keep the first S tokens visible "
            "beside a sliding window)");
  CTX_CHECK(pe->sinks_ok(), "--sinks is not defined for posenc ", cfg.posenc.dump(), " (POSENC_SPEC §6: "
            "none, learned, sinusoidal, rnn, floater, complex-order, cope, alibi, kerple, sandwich, t5, and "
            "rope without scaling or with pi, ntk, yarn, llama3)");
}

void GPT::check_positions(const Positions& p, int64_t B, int64_t T, const std::string& what) const {
  CTX_CHECK(pe->explicit_positions_ok(), what, ": posenc ", cfg.posenc.dump(), " does not take explicit positions "
            "(POSENC_SPEC §7.3: none, learned without hierarchical, sinusoidal, rope with no scaling or pi, ntk, "
            "dynamic-ntk, yarn, llama3, longrope, alibi, kerple, sandwich, t5, fire)");
  CTX_CHECK(p.T == T && (p.rows == 1 || p.rows == B), what, ": positions of shape [", p.rows, ", ", p.T,
            "] do not match the tokens [", B, ", ", T, "]; expected one row per sequence, [", B, ", ", T, "]");
  for (auto& b : blocks)
    CTX_CHECK(b->attn->sinks() == 0, what, ": explicit positions cannot be combined with --sinks (POSENC_SPEC §6, "
              "§7.3: a sink's position is its rank in the rolling cache); drop one of the two");
}

Variable GPT::forward(const Tensor& tokens_in, int64_t pos0, bool use_memory, const Positions* positions) {
  check_tokens(tokens_in, "forward");
  // host tokens (the usual case: they come from the data loader) move to the model's device
  const Tensor tokens = tokens_in.device() == Device::CPU ? to_device_like(tokens_in, wte->weight.data()) : tokens_in;
  if (prof::enabled()) prof::mark();
  if (!use_memory) reset_memory();
  const int64_t B = tokens.size(0), T = tokens.size(1);
  if (positions) {
    CTX_CHECK(pos0 == 0 && !use_memory, "forward: explicit positions replace pos0 and segment memory");
    check_positions(*positions, B, T, "forward");
  }
  pe->check_length(positions ? positions->max() + 1 : pos0 + T);
  Rng* rng = (is_training() && cfg.dropout > 0) ? &dropout_rng : nullptr;
  Variable x = positions ? pe->embed_positions(embedding(wte->weight, tokens), *positions)
                         : pe->embed_tokens(wte->weight, tokens, pos0);  // [B, T, D]
  if (rng) x = dropout(x, cfg.dropout, true, *rng);
  Residual s{x, blocks.empty() ? norm_f->forward(x) : blocks[0]->norm1->forward(x)};
  for (size_t l = 0; l < blocks.size(); ++l)
    s = blocks[l]->forward(s, l + 1 < blocks.size() ? *blocks[l + 1]->norm1 : *norm_f, rng, positions);
  x = s.xn;  // norm_f of the stream
  const Variable& w_out = lm_head ? lm_head->weight : wte->weight;
  Variable logits = matmul(x, w_out, false, true);         // [B, T, V]
  (void)B;
  return logits;
}

KVCache GPT::make_cache(int64_t batch, int64_t capacity, int64_t window, int64_t sinks) {
  check_sinks(window, sinks);
  return KVCache(cfg, *pe, batch, capacity, window, wte->weight.data(), sinks);
}

Variable GPT::forward_cached(const Tensor& tokens_in, KVCache& cache) {
  check_tokens(tokens_in, "forward_cached");
  CTX_CHECK(!is_training(), "forward_cached: decoding runs in eval mode (call eval() first)");
  const Tensor tokens = tokens_in.device() == Device::CPU ? to_device_like(tokens_in, wte->weight.data()) : tokens_in;
  const int64_t T = tokens.size(1), pos0 = cache.length();
  pe->check_length(pos0 + T);
  const int64_t limit = pe->decode_limit();
  CTX_CHECK(limit == 0 || pos0 + T <= limit, "forward_cached: posenc ", pe->type(), " can be decoded with a cache ",
            "for at most ", limit, " positions (the full forward of a longer sequence re-encodes the earlier "
            "positions, e.g. dynamic NTK's base grows with the length), asked for ", pos0 + T,
            "; recompute the full forward instead (sample() does)");
  cache.make_room(T);  // a full rolling cache (sinks) drops its oldest window row
  Variable x = pe->embed_tokens_decode(wte->weight, tokens, pos0, cache.posenc_state());  // [B, T, D]
  for (auto& b : blocks) x = b->forward_cached(x, cache);
  cache.advance(T);
  x = norm_f->forward(x);
  const Variable& w_out = lm_head ? lm_head->weight : wte->weight;
  return matmul(x, w_out, false, true);                    // [B, T, V]
}

Variable GPT::loss(const Tensor& inputs, const Tensor& targets, bool use_memory, const Positions* positions) {
  CTX_CHECK(inputs.shape() == targets.shape(), "loss: inputs ", inputs.str(), " and targets ",
            targets.str(), " differ in shape");
  // Targets are token ids too: cross_entropy would silently ignore a -1 (its ignore index).
  check_tokens(targets, "loss targets");
  Variable logits = forward(inputs, 0, use_memory, positions);
  const int64_t N = inputs.numel();
  const Tensor tg = targets.device() == Device::CPU ? to_device_like(targets, logits.data()) : targets;
  return cross_entropy(reshape(logits, {N, cfg.vocab_size}), tg.view({N}));
}

Variable GPT::masked_loss(const Tensor& inputs, const Tensor& targets, const Positions* positions) {
  CTX_CHECK(inputs.shape() == targets.shape() && targets.dim() == 2, "masked_loss: inputs ", inputs.str(),
            " and targets ", targets.str(), " must be [B, T] of the same shape");
  const int64_t B = targets.size(0), T = targets.size(1), N = B * T;
  const Tensor th = to_host(targets);
  Tensor w = Tensor::zeros({N}, DType::F64);
  double* wp = w.host<double>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t kept = 0;
    for (int64_t t = 0; t < T; ++t) {
      const double id = th.at(b * T + t);
      CTX_CHECK(id == (double)kIgnoreTarget || (id >= 0 && id < cfg.vocab_size), "masked_loss: target ", (int64_t)id,
                " at [", b, ", ", t, "] is neither a token id below vocab_size ", cfg.vocab_size, " nor ignored (",
                kIgnoreTarget, ")");
      kept += id >= 0;
    }
    CTX_CHECK(kept > 0, "masked_loss: every target of row ", b, " is ignored");
    for (int64_t t = 0; t < T; ++t) wp[b * T + t] = th.at(b * T + t) >= 0 ? 1.0 / (double)(B * kept) : 0.0;
  }
  Variable logits = forward(inputs, 0, false, positions);
  const Tensor tg = targets.device() == Device::CPU ? to_device_like(targets, logits.data()) : targets;
  return cross_entropy(reshape(logits, {N, cfg.vocab_size}), tg.view({N}), w);
}

Tensor GPT::token_losses(const Tensor& inputs, const Tensor& targets) {
  CTX_CHECK(inputs.shape() == targets.shape(), "token_losses: inputs ", inputs.str(), " and targets ",
            targets.str(), " differ in shape");
  check_tokens(targets, "token_losses targets");
  const Tensor z = forward(inputs).data();
  const int64_t N = inputs.numel();
  const Tensor zn = z.view({N, cfg.vocab_size});
  const Tensor tg = targets.device() == Device::CPU ? to_device_like(targets, z) : targets;
  Tensor loss = Tensor::empty({N}, z.dtype(), z.device()), lse = Tensor::empty({N}, z.dtype(), z.device());
  backend_of(z).cross_entropy(zn, tg.view({N}), loss, lse);
  Tensor h = to_host(loss);
  if (h.dtype() != DType::F32) h = h.to(DType::F32);
  return h.view(inputs.shape());
}

}  // namespace ctx::nn
