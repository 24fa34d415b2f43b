// train/sample.h — autoregressive sampling from a GPT (docs/sampling.md). By default the prompt
// goes through the model once and every new token costs one position, its keys and values
// appended to a KV cache (nn/kv_cache.h); with use_cache = false each step recomputes the full
// forward instead. Both see the same positions, so they give the same tokens up to float
// rounding of the logits:
//   - the whole sequence so far, positions 0.. (beyond the trained context the encoding
//     extrapolates, with the scaling of its config; window > 0: each query sees its last
//     `window` keys, as `eval --window`; with sinks > 0 also the first `sinks`, the cache then a
//     rolling one of sinks + window rows, StreamingLLM's, at its ranks: POSENC_SPEC §6);
//   - Transformer-XL with memory: the prompt as one segment, then one token per segment with
//     the last mem_len positions as memory (GPT::forward with use_memory);
//   - encodings limited to L positions (learned, tupe; PositionalEncoding::max_length): when
//     the next forward would pass L, the context shifts: the last `keep` tokens (default L/2)
//     are re-encoded at positions 0..keep-1 in one forward (the cache restarts from them) and
//     decoding continues one position per token (llama.cpp's context shift). keep = L gives
//     the previous sampler's (and nanoGPT's) crop: the last L tokens recomputed every step;
//   - rope dynamic NTK: past its original context the base grows with the length and re-encodes
//     every earlier position, so from there each step recomputes the whole sequence
//     (PositionalEncoding::decode_limit).
// The next token comes from the last position's logits: greedy argmax at temperature 0,
// otherwise softmax(logits / temperature) restricted to the top-k logits (k = 0: no
// restriction), drawn with a seeded ctx::Rng — deterministic for a given model, prompt and seed.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"
#include "nn/gpt.h"

namespace ctx {

struct SampleOptions {
  int64_t max_tokens = 200;   // tokens to generate (>= 0)
  double temperature = 0.8;   // >= 0; 0 = greedy argmax
  int64_t top_k = 40;         // >= 0; 0 = keep the whole vocabulary
  uint64_t seed = 0;          // seeds the Rng that draws the tokens
  int64_t window = 0;         // >= 0; sliding-window attention over the last `window` keys (0 = all)
  int64_t sinks = 0;          // >= 0; with window: attention sinks, the first `sinks` keys stay visible
                              // (POSENC_SPEC §6; the cache rolls: sinks + window rows)
  bool use_cache = true;      // KV cache (one position per token); false: full recompute per token
  int64_t keep = 0;           // learned / tupe context shift: tokens kept, 1..L (0 = L / 2)
  int64_t num_samples = 1;    // sample_many: continuations drawn together (sample b with seed + b), >= 1
};

// What sample_many made: one continuation per sample, and how the logits were computed
// ("kv cache, graph-free decoder, one backend call a step" or "..., op by op a step", "kv cache,
// through the graph: REASON", "no cache, full recompute").
struct SampleResult {
  std::vector<std::vector<int32_t>> tokens;
  std::string path;
};

// Throws ctx::Error naming the option and the expected value when an option is out of range.
void check_sample_options(const SampleOptions& opt);

// Picks the next token from one row of logits (V values). temperature 0: the argmax (lowest
// index on ties). Otherwise the top_k largest logits (ties broken by lower index; top_k = 0 or
// >= V keeps all) are softmaxed at `temperature` in double precision and one is drawn with a
// single rng.uniform(). top_k = 1 therefore equals greedy.
int32_t sample_next(const float* logits, int64_t V, double temperature, int64_t top_k, Rng& rng);

// Generates opt.max_tokens tokens after `prompt` (at least one token, ids in [0, vocab)) and
// returns them (the continuation only). on_token, when set, is called with each new token as it
// is generated (streaming output). Runs in eval mode with no autograd graph.
std::vector<int32_t> sample(nn::GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                            const std::function<void(int32_t)>& on_token = nullptr);
// opt.num_samples continuations of `prompt` decoded together: the rows of one batch, so every
// token's weights are read once for all of them (the graph-free decoder, nn/decode_engine.h;
// more than one sample is an error where the model cannot use it). Sample b draws with
// Rng(opt.seed + b), so sample 0 is sample()'s. on_token(b, token) as each is drawn.
SampleResult sample_many(nn::GPT& model, const std::vector<int32_t>& prompt, const SampleOptions& opt,
                         const std::function<void(int64_t, int32_t)>& on_token = nullptr);

}  // namespace ctx
