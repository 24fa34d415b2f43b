// train/eval.cpp — windowed perplexity evaluation, and the trainer's validation loss (see eval.h).
#include "train/eval.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "autograd/variable.h"
#include "core/device_table.h"  // to_host
#include "train/data.h"
#include "train/dist/distributed.h"

namespace ctx {

int64_t eval_window_count(int64_t n_tokens, int64_t length, int64_t max_windows) {
  CTX_CHECK(length >= 1, "evaluate: length must be >= 1, got ", length);
  CTX_CHECK(max_windows >= 0, "evaluate: max_windows must be >= 0 (0 = all), got ", max_windows);
  int64_t n = n_tokens / (length + 1);
  return max_windows > 0 ? std::min(n, max_windows) : n;
}

void check_eval_length(const nn::GPT& model, int64_t n_tokens, int64_t length, const std::string& source,
                       const EvalMode& mode) {
  CTX_CHECK(length >= 1, "evaluate: length must be >= 1, got ", length);
  CTX_CHECK(mode.window >= 0, "evaluate: window must be >= 0 (0 = full attention), got ", mode.window);
  CTX_CHECK(mode.segment >= 0, "evaluate: segment must be >= 0 (0 = not segmented), got ", mode.segment);
  CTX_CHECK(!(mode.window > 0 && mode.segment > 0), "evaluate: choose a sliding window or segments, not both");
  model.check_sinks(mode.window, mode.sinks);
  CTX_CHECK(n_tokens >= length + 1, "evaluate: ", source, " has ", n_tokens,
            " tokens, fewer than one window at length ", length, " (needs length+1 = ", length + 1,
            " tokens); use a longer text or a shorter length");
  try {
    model.pe->check_length(mode.segment > 0 ? std::min(length, mode.segment) : length);
  } catch (const Error& e) {
    throw Error(str("evaluate: length ", length, ": ", e.what()));
  }
}

EvalResult evaluate(nn::GPT& model, const TokenStream& tokens, int64_t length, int64_t batch,
                    int64_t max_windows, const std::string& source, const EvalMode& mode,
                    const Tokenizer* tok, int64_t position_bucket, int64_t attn_sink_keys) {
  CTX_CHECK(batch >= 1, "evaluate: batch must be >= 1, got ", batch);
  CTX_CHECK(attn_sink_keys >= 0, "evaluate: attn_sink_keys must be >= 0 (0 = no attention statistics, e.g. 4), "
            "got ", attn_sink_keys);
  CTX_CHECK(position_bucket >= 0, "evaluate: position_bucket must be >= 0 (0 = no per-position loss), got ",
            position_bucket);
  check_eval_length(model, tokens.size(), length, source, mode);
  const int64_t V = model.cfg.vocab_size;
  for (int64_t i = 0; i < tokens.size(); ++i)
    CTX_CHECK(tokens[i] >= 0 && tokens[i] < V, "evaluate: ", source, ": token id ", tokens[i],
              " at position ", i, " is out of range for vocab_size ", V);

  EvalResult r;
  r.length = length;
  r.windows = eval_window_count(tokens.size(), length, max_windows);
  r.tokens = r.windows * length;
  // Bytes of the predicted tokens (targets: positions 1..length of every window).
  CTX_CHECK(!tok || tok->vocab_size() == V, "evaluate: the tokenizer has ", tok ? tok->vocab_size() : 0,
            " tokens but the model's vocab_size is ", V);
  if (!tok) {
    r.bytes = r.tokens;
  } else {
    std::vector<int64_t> nbytes((size_t)V);
    for (int64_t v = 0; v < V; ++v) nbytes[(size_t)v] = (int64_t)tok->token_text((int32_t)v).size();
    for (int64_t w = 0; w < r.windows; ++w)
      for (int64_t t = 1; t <= length; ++t) r.bytes += nbytes[(size_t)tokens[w * (length + 1) + t]];
  }
  CTX_CHECK(r.tokens == 0 || r.bytes > 0, "evaluate: ", source, ": the predicted tokens stand for no bytes of "
            "text (all control tokens?); bits per byte is undefined");

  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  const int64_t own_window = model.attention_window(), own_sinks = model.attention_sinks();
  std::unique_ptr<nn::AttnStatsCollector> stats;
  if (attn_sink_keys > 0)
    stats = std::make_unique<nn::AttnStatsCollector>(model.cfg.n_layers, model.cfg.n_heads, attn_sink_keys);
  auto restore = [&] {
    model.set_attention_stats(nullptr);
    model.set_attention_window(own_window, own_sinks);
    if (was_training) model.train();
  };
  model.eval();
  model.set_attention_window(mode.window, mode.sinks);
  model.set_attention_stats(stats.get());
  // Chunks evaluated independently: `seg` tokens each (the whole window when not segmented),
  // then a shorter last chunk of `rem` tokens.
  const int64_t seg = mode.segment > 0 ? std::min(mode.segment, length) : length;
  const int64_t n_full = length / seg, rem = length % seg;
  double total = 0;  // sum of per-token losses, nats
  const int64_t nb = position_bucket > 0 ? (length + position_bucket - 1) / position_bucket : 0;
  std::vector<double> bucket_sum((size_t)nb, 0.0);
  try {
    for (int64_t w0 = 0; w0 < r.windows; w0 += batch) {
      const int64_t b = std::min(batch, r.windows - w0);
      // rows of the batch: (window i, chunk c) of `len` tokens starting at offset `off`
      auto run = [&](int64_t rows_per_window, int64_t len, auto offset_of) {
        const int64_t n = b * rows_per_window;
        Tensor in = Tensor::empty({n, len}, DType::I64), tg = Tensor::empty({n, len}, DType::I64);
        int64_t* ip = in.host<int64_t>();
        int64_t* tp = tg.host<int64_t>();
        std::vector<int64_t> src((size_t)len + 1);
        for (int64_t i = 0; i < b; ++i)
          for (int64_t c = 0; c < rows_per_window; ++c) {
            tokens.read((w0 + i) * (length + 1) + offset_of(c), len + 1, src.data());
            const int64_t row = i * rows_per_window + c;
            for (int64_t t = 0; t < len; ++t) {
              ip[row * len + t] = src[(size_t)t];
              tp[row * len + t] = src[(size_t)t + 1];
            }
          }
        const Tensor losses = model.token_losses(in, tg);  // [n, len], host f32
        const float* lp = losses.host<float>();
        for (int64_t row = 0; row < n; ++row) {
          const int64_t pos0 = offset_of(row % rows_per_window);  // of the row's first token in its window
          for (int64_t t = 0; t < len; ++t) {
            total += lp[row * len + t];
            if (nb > 0) bucket_sum[(size_t)((pos0 + t) / position_bucket)] += lp[row * len + t];
          }
        }
      };
      run(n_full, seg, [&](int64_t c) { return c * seg; });
      if (rem > 0) run(1, rem, [&](int64_t) { return n_full * seg; });
    }
  } catch (...) {
    restore();
    throw;
  }
  restore();
  if (stats) {
    r.attn_sink_keys = attn_sink_keys;
    r.attn.assign((size_t)model.cfg.n_layers, {});
    for (int64_t l = 0; l < model.cfg.n_layers; ++l)
      for (int64_t h = 0; h < model.cfg.n_heads; ++h) r.attn[(size_t)l].push_back(stats->mean(l, h));
  }
  r.loss = total / (double)r.tokens;
  r.ppl = std::exp(r.loss);
  r.bpb = total / std::log(2.0) / (double)r.bytes;
  for (int64_t k = 0; k < nb; ++k) {
    PositionBucket b;
    b.begin = k * position_bucket;
    b.end = std::min(length, b.begin + position_bucket);
    b.count = r.windows * (b.end - b.begin);
    b.loss = b.count > 0 ? bucket_sum[(size_t)k] / (double)b.count : 0.0;
    r.positions.push_back(b);
  }
  return r;
}

double validation_loss(nn::GPT& model, const TokenStream& val, int64_t B, int64_t T, int64_t batches,
                       const Tokenizer& tok, double* bpb) {
  NoGradGuard ng;
  bool was = model.is_training();
  model.eval();
  int64_t windows = (val.size() - 1) / T;
  int64_t nb = std::min(batches, windows / B);
  if (nb == 0) { B = std::max<int64_t>(1, windows); nb = 1; }
  // Under MPI rank r evaluates batches r, r + N, ... and the sums are reduced (same batches,
  // same mean as one process; only the summation order differs).
  double total = 0;
  for (int64_t i = dist::rank(); i < nb; i += dist::size()) {
    auto [x, y] = sequential_batch(val, i * B, B, T);
    total += to_host(model.loss(x, y).data()).item();  // host batches move to the model's device in GPT
  }
  dist::allreduce_sum(&total, 1);
  model.train(was);
  int64_t bytes = 0;  // windows 0 .. nb*B-1 of sequential_batch: targets val[w*T+1 .. w*T+T]
  for (int64_t w = 0; w < nb * B; ++w)
    for (int64_t t = 1; t <= T; ++t) bytes += (int64_t)tok.token_text(val[w * T + t]).size();
  *bpb = bytes > 0 ? total / (double)nb * (double)(nb * B * T) / std::log(2.0) / (double)bytes : 0.0;
  return total / (double)nb;
}

}  // namespace ctx
