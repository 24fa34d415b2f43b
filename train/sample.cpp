// train/sample.cpp — autoregressive sampling (see sample.h).
#include "train/sample.h"

#include "train/io/limits.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>

#include "autograd/variable.h"
#include "core/threads.h"
#include "core/device_table.h"  // to_host
#include "nn/decode_engine.h"

namespace ctx {

void check_sample_options(const SampleOptions& opt) {
  CTX_CHECK(std::isfinite(opt.temperature) && opt.temperature >= 0, "sample: --temperature must be >= 0 ",
            "(0 = greedy, e.g. 0.8), got ", opt.temperature);
  CTX_CHECK(opt.top_k >= 0, "sample: --top-k must be >= 0 (0 = whole vocabulary, e.g. 40), got ", opt.top_k);
  CTX_CHECK(opt.max_tokens >= 0, "sample: --max-tokens must be >= 0 (e.g. 200), got ", opt.max_tokens);
  check_count_fits((double)opt.max_tokens, 8.0, "sample: --max-tokens");  // the ids generated are kept
  CTX_CHECK(opt.window >= 0, "sample: --window must be >= 0 (0 = full attention, e.g. 256), got ", opt.window);
  CTX_CHECK(opt.sinks >= 0, "sample: --sinks must be >= 0 (0 = the plain window, e.g. 4), got ", opt.sinks);
  CTX_CHECK(opt.sinks == 0 || opt.window > 0, "sample: --sinks ", opt.sinks, " needs --window W (e.g. 256)");
  CTX_CHECK(opt.keep >= 0, "sample: --keep must be >= 0 (0 = half the context, e.g. 128), got ", opt.keep);
}

int32_t sample_next(const float* logits, int64_t V, double temperature, int64_t top_k, Rng& rng) {
  CTX_CHECK(V >= 1, "sample_next: empty logits row");
  CTX_CHECK(temperature >= 0 && top_k >= 0, "sample_next: temperature (", temperature, ") and top_k (",
            top_k, ") must be >= 0");
  for (int64_t i = 0; i < V; ++i)
    CTX_CHECK(!std::isnan(logits[i]), "sample_next: logit ", i, " is NaN (the model diverged?)");
  if (temperature == 0) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; ++i)
      if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
  }
  // Candidates in order of decreasing logit, ties by lower index; keep the first k.
  std::vector<int32_t> idx((size_t)V);
  std::iota(idx.begin(), idx.end(), 0);
  const int64_t k = (top_k == 0 || top_k > V) ? V : top_k;
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  idx.resize((size_t)k);
  const double top = logits[idx[0]];
  std::vector<double> p((size_t)k);
  double z = 0;
  for (int64_t i = 0; i < k; ++i) z += (p[(size_t)i] = std::exp(((double)logits[idx[(size_t)i]] - top) / temperature));
  double u = rng.uniform() * z, c = 0;
  for (int64_t i = 0; i < k; ++i) {
    c += p[(size_t)i];
    if (u < c) return idx[(size_t)i];
  }
  return idx[(size_t)k - 1];  // rounding: u landed at the very top
}

namespace {

// Logits [V] (f32, host) of the last row of logits [1, n, V].
Tensor last_row(const Variable& logits) {
  const Tensor z = to_host(logits.data());
  const int64_t n = z.size(1), V = z.size(2);
  Tensor row = z.view({n, V}).select0(n - 1);
  return row.dtype() == DType::F32 ? row : row.to(DType::F32);
}

// seq[begin, end) (end 0: to the end) as [1, n] i64
Tensor token_tensor(const std::vector<int32_t>& seq, size_t begin, size_t end = 0) {
  const int64_t n = (int64_t)((end ? end : seq.size()) - begin);
  Tensor in = Tensor::empty({1, n}, DType::I64);
  int64_t* ip = in.host<int64_t>();
  for (int64_t t = 0; t < n; ++t) ip[t] = seq[begin + (size_t)t];
  return in;
}

// Restores the model's attention window, segment memory and training mode on scope exit.
struct ModelStateGuard {
  nn::GPT& m;
  bool was_training;
  int64_t window, sinks;
  std::vector<Tensor> memory;
  explicit ModelStateGuard(nn::GPT& model)
      : m(model), was_training(model.is_training()),
        window(model.attention_window()), sinks(model.attention_sinks()), memory(model.memory_state()) {}
  ~ModelStateGuard() {
    m.set_attention_window(window, sinks);
    m.set_memory_state(memory);
    if (was_training) m.train();
  }
};

// The sequences decoded so far (rows of equal length, one per sample) and how the logits of their
// next tokens are computed: the graph-free decoder (nn/decode_engine.h) where the model allows it,
// else the KV cache through the graph (opt.use_cache) or a full recompute, with the context shift
// of encodings limited to L positions. Several rows need the graph-free decoder.
class Decoder {
 public:
  Decoder(nn::GPT& model, const SampleOptions& opt, const std::vector<int32_t>& prompt, int64_t rows);
  // The next tokens' logits [rows, V] (f32, host); `first`: the prompt's.
  Tensor next_logits(bool first);
  void push(int64_t row, int32_t token) { seqs_[(size_t)row].push_back(token); }
  bool cached() const { return engine_ || cache_; }
  bool graph_free() const { return engine_ != nullptr; }
  const std::string& path() const { return path_; }

 private:
  bool shift();
  Tensor recompute(bool first);
  Tensor fill();
  Tensor engine_step(size_t begin, size_t end);
  const std::vector<int32_t>& seq() const { return seqs_[0]; }

  nn::GPT& model_;
  const int64_t max_len_, mem_len_;
  int64_t keep_ = 0;
  std::vector<std::vector<int32_t>> seqs_;
  size_t start_ = 0;
  std::unique_ptr<nn::DecodeEngine> engine_;
  std::unique_ptr<nn::KVCache> cache_;
  std::string path_;
  std::vector<int32_t> ids_;  // the engine's input [rows, n]
};

// Encodings limited to L positions (learned, tupe) see seq[start..]: when that would pass L,
// start moves so that the last `keep` tokens stay, re-encoded at positions 0..keep-1 (a
// context shift; keep = L: the last L tokens every step). Everything else sees seq[0..].
// The cache holds the positions the model sees up to the encoding's decode limit (learned,
// tupe: L, the cache restarts after each shift; dynamic NTK: its original context, past which
// the steps recompute the whole sequence).
Decoder::Decoder(nn::GPT& model, const SampleOptions& opt, const std::vector<int32_t>& prompt, int64_t rows)
    : model_(model), max_len_(model.pe->max_length()), mem_len_(model.pe->memory_length()),
      seqs_((size_t)rows, prompt) {
  CTX_CHECK(max_len_ == 0 || opt.keep <= max_len_, "sample: --keep must be <= the context the encoding can ",
            "encode (", max_len_, "), got ", opt.keep);
  keep_ = max_len_ == 0 ? 0 : opt.keep > 0 ? opt.keep : std::max<int64_t>(1, max_len_ / 2);
  model_.set_attention_window(opt.window, opt.sinks);
  const int64_t want = (int64_t)prompt.size() + opt.max_tokens - 1;  // positions ever fed
  const int64_t limit = model_.pe->decode_limit();
  const int64_t cap = limit > 0 ? std::min(want, limit) : want;
  std::string why = "--no-cache";
  if (opt.use_cache) engine_ = nn::DecodeEngine::make(model_, rows, cap, opt.window, &why);
  CTX_CHECK(rows == 1 || engine_, "sample: --num-samples ", rows, " needs the graph-free decoder, which this model ",
            "cannot use here (", why, "); sample one at a time (--num-samples 1)");
  if (engine_) {
    path_ = std::string("kv cache, graph-free decoder, ") + engine_->step_kind() + " a step";
  } else if (opt.use_cache) {
    cache_ = std::make_unique<nn::KVCache>(model_.make_cache(1, cap, opt.window, opt.sinks));
    path_ = "kv cache, through the graph: " + why;
  } else {
    path_ = "no cache, full recompute";
  }
}

bool Decoder::shift() {  // true when start moved
  if (max_len_ == 0 || (int64_t)(seq().size() - start_) <= max_len_) return false;
  start_ = seq().size() - (size_t)keep_;
  return true;
}

// The full recompute of the last position's logits (use_cache = false; with the cache past
// dynamic NTK's decode limit). One row.
Tensor Decoder::recompute(bool first) {
  if (mem_len_ > 0)  // segment recurrence: the prompt, then one token per segment
    return last_row(first ? model_.forward(token_tensor(seq(), 0), 0, false)
                          : model_.forward(token_tensor(seq(), seq().size() - 1), 0, true));
  return last_row(model_.forward(token_tensor(seq(), start_)));
}

// Positions [begin, end) of every row through the graph-free decoder: their last logits [rows, V].
Tensor Decoder::engine_step(size_t begin, size_t end) {
  ids_.clear();
  for (const auto& s : seqs_) ids_.insert(ids_.end(), s.begin() + (ptrdiff_t)begin, s.begin() + (ptrdiff_t)end);
  const Tensor z = to_host(engine_->step(ids_.data(), (int64_t)(end - begin)));
  return z.dtype() == DType::F32 ? z : z.to(DType::F32);
}

// Refills the cache with seq[start..] and returns the last position's logits: one forward, or
// for a rolling cache (sinks) as many positions as it holds, then one position per call.
Tensor Decoder::fill() {
  const size_t end = seq().size();
  if (engine_) {
    engine_->clear();
    return engine_step(start_, end);
  }
  cache_->clear();
  size_t at = cache_->rolling() ? std::min(end, start_ + (size_t)cache_->buffer_rows()) : end;
  Variable logits = model_.forward_cached(token_tensor(seq(), start_, at), *cache_);
  for (; at < end; ++at) logits = model_.forward_cached(token_tensor(seq(), at, at + 1), *cache_);
  return last_row(logits);
}

Tensor Decoder::next_logits(bool first) {
  const bool shifted = shift();
  if (!cached()) return recompute(first);
  const int64_t cap = engine_ ? engine_->capacity() : cache_->capacity();
  const int64_t length = engine_ ? engine_->length() : cache_->length();
  if (first || shifted) {  // (re)fill the cache with everything the model sees
    if ((int64_t)(seq().size() - start_) > cap) return recompute(first);
    return fill();
  }
  if (length < cap) {
    if (engine_) return engine_step(seq().size() - 1, seq().size());
    return last_row(model_.forward_cached(token_tensor(seq(), seq().size() - 1), *cache_));
  }
  return recompute(false);  // past the decode limit (one row: the engine serves no such model)
}

// Sets the thread count to 1 for its lifetime when `on` (restores it after).
struct OneThread {
  int saved = 0;
  explicit OneThread(bool on) {
    if (on) saved = ctx::num_threads(), ctx::set_num_threads(1);
  }
  ~OneThread() {
    if (saved > 0) ctx::set_num_threads(saved);
  }
};

}  // namespace

SampleResult sample_many(nn::GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                         const std::function<void(int64_t, int32_t)>& on_token) {
  check_sample_options(opt);
  CTX_CHECK(opt.num_samples >= 1, "sample: --num-samples must be >= 1 (e.g. 4), got ", opt.num_samples);
  CTX_CHECK(!prompt.empty(), "sample: the prompt must hold at least one token");
  const int64_t V = model.cfg.vocab_size, N = opt.num_samples;
  for (size_t i = 0; i < prompt.size(); ++i)
    CTX_CHECK(prompt[i] >= 0 && prompt[i] < V, "sample: prompt token ", prompt[i], " at position ", i,
              " is out of range for vocab_size ", V);
  const int64_t mem_len = model.pe->memory_length();
  CTX_CHECK(!(mem_len > 0 && opt.window > 0), "sample: --window does not combine with Transformer-XL memory ",
            "(posenc.mem_len = ", mem_len, "; the memory already bounds what each token sees)");
  NoGradGuard no_grad;
  ModelStateGuard guard(model);
  model.eval();
  std::vector<Rng> rngs;  // sample b draws with seed + b: sample 0 is the one-sample run's
  for (int64_t b = 0; b < N; ++b) rngs.emplace_back(opt.seed + (uint64_t)b);
  SampleResult res;
  res.tokens.assign((size_t)N, {});
  for (auto& t : res.tokens) t.reserve((size_t)std::min<int64_t>(opt.max_tokens, 1 << 20));  // grows past that
  if (opt.max_tokens == 0) return res;

  Decoder decoder(model, opt, prompt, N);
  res.path = decoder.path();
  Tensor rows = decoder.next_logits(true);  // [N, V]
  // Cached decoding through the graph is a few rows per GEMM and a few hundred small kernels per
  // token: a fork and join per kernel costs more than a second core gives (small, 500 tokens: 765
  // tokens/s on 1 thread against 291 on 2; docs/sampling.md). Unless the user chose a thread count,
  // its steps after the prompt run on one thread. The graph-free decoder runs a step on its own team
  // of threads (one region), and its refills after a context shift on the whole pool.
  OneThread one_thread(decoder.cached() && !decoder.graph_free() &&
                       model.wte->weight.data().device() == Device::CPU && !ctx::threads_chosen_by_user());
  for (int64_t s = 0;; ++s) {
    for (int64_t b = 0; b < N; ++b) {
      const int32_t next = sample_next(rows.host<float>() + b * V, V, opt.temperature, opt.top_k, rngs[(size_t)b]);
      decoder.push(b, next);
      res.tokens[(size_t)b].push_back(next);
      if (on_token) on_token(b, next);
    }
    if (s + 1 == opt.max_tokens) break;
    rows = decoder.next_logits(false);
  }
  return res;
}

std::vector<int32_t> sample(nn::GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                            const std::function<void(int32_t)>& on_token) {
  SampleOptions one = opt;
  one.num_samples = 1;
  SampleResult r = sample_many(model, prompt, one, [&](int64_t, int32_t t) {
    if (on_token) on_token(t);
  });
  return std::move(r.tokens[0]);
}

}  // namespace ctx
