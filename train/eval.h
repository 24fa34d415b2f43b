// train/eval.h — perplexity of a model on a token stream at a given context length.
// The text is cut into non-overlapping windows of length+1 tokens; in each window the first
// `length` tokens are the inputs (positions 0..length-1, no state carried between windows) and
// the last `length` the targets. The result is the mean cross-entropy over every predicted
// token, in nats, with perplexity and bits per byte: total nats / ln 2 / the UTF-8 bytes of the
// predicted tokens (Tokenizer::token_text), comparable between tokenizers (bytes: loss / ln 2).
// Evaluation runs in eval mode with no autograd graph and is deterministic.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "nn/gpt.h"
#include "train/io/token_stream.h"
#include "train/io/tokenizer.h"

namespace ctx {

// Per-position loss: the mean loss of the predictions made at window positions [begin, end)
// (position t predicts token t+1 of its window), over `count` = windows * (end - begin) tokens.
struct PositionBucket {
  int64_t begin = 0, end = 0, count = 0;
  double loss = 0;
};

struct EvalResult {
  int64_t length = 0;   // context length evaluated
  int64_t windows = 0;  // windows of length+1 tokens used
  int64_t tokens = 0;   // predicted tokens (windows * length)
  double loss = 0;      // mean cross-entropy, nats per token
  double ppl = 0;       // exp(loss)
  int64_t bytes = 0;    // bytes of text the predicted tokens stand for
  double bpb = 0;       // bits per byte = loss * tokens / ln 2 / bytes
  // with position_bucket > 0: positions [0, length) in buckets of that many (the last one may be
  // shorter); their count-weighted mean is `loss`
  std::vector<PositionBucket> positions;
  // with attn_sink_keys > 0: the attention statistics of every layer and head (nn/attn_stats.h),
  // means over every query row of every window; [layer][head]
  int64_t attn_sink_keys = 0;
  std::vector<std::vector<nn::HeadAttnStats>> attn;
};

// The two baselines the length-extrapolation literature compares against (both 0 = off):
//   window > 0:   sliding-window (local) attention: each query attends to its last `window`
//                 positions only (the window itself still has `length` positions).
//   segment > 0:  each window is cut into chunks of `segment` tokens (the last one may be shorter)
//                 evaluated independently, positions restarting at 0 (no cross-chunk attention).
//   sinks > 0:    with window: attention sinks, the first `sinks` positions stay visible too
//                 (POSENC_SPEC §6).
struct EvalMode {
  int64_t window = 0;
  int64_t sinks = 0;
  int64_t segment = 0;
};

// Windows of `length`+1 tokens available in `n_tokens` tokens, capped by max_windows (> 0).
int64_t eval_window_count(int64_t n_tokens, int64_t length, int64_t max_windows);

// Checks, before any compute, that `model` can be evaluated at `length` on `n_tokens` tokens:
// length >= 1, at least one window of length+1 tokens (the error names `source`, the length and
// the token count), and the encoding accepts `length` positions (its own error, prefixed with
// the length).
// With mode.segment > 0 the encoding only has to accept min(length, segment) positions.
void check_eval_length(const nn::GPT& model, int64_t n_tokens, int64_t length, const std::string& source,
                       const EvalMode& mode = {});

// Evaluates `model` at `length` on `tokens` (ids in [0, vocab)). `batch`: windows per forward
// (>= 1); `max_windows`: use at most the first this-many windows (0 = all). `source` names the
// text in errors (a file name). `tok` maps tokens to bytes for bits per byte (nullptr: bytes).
// `position_bucket` > 0: also the per-position loss in buckets of that many positions
// (EvalResult::positions). `attn_sink_keys` > 0: also the attention statistics per layer and head
// (EvalResult::attn), the first attn_sink_keys tokens of a window counting as sinks. Runs in eval
// mode with mode's window (the train/eval state and the model's own window are restored after).
EvalResult evaluate(nn::GPT& model, const TokenStream& tokens, int64_t length, int64_t batch,
                    int64_t max_windows, const std::string& source = "text", const EvalMode& mode = {},
                    const Tokenizer* tok = nullptr, int64_t position_bucket = 0, int64_t attn_sink_keys = 0);

// The trainer's validation loss (nats / token): the mean over the first `batches` batches of B
// consecutive windows of T+1 tokens of `val` (fewer windows than one batch: one batch of all of
// them), in eval mode without a graph. *bpb gets the bits per byte of the same windows (the bytes
// their target tokens stand for, by `tok`). Under MPI rank r evaluates batches r, r + N, ... and
// the sums are reduced: every rank returns the same value.
double validation_loss(nn::GPT& model, const TokenStream& val, int64_t B, int64_t T, int64_t batches,
                       const Tokenizer& tok, double* bpb);

}  // namespace ctx
