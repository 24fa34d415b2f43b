// posenc/posenc.h — the positional-encoding interface: a few hooks that one attention
// implementation calls, and the registry by name (POSENC_SPEC). An encoding is a small file.
//
// Hooks, in the order attention calls them:
//   embed_tokens(wte, tokens, pos0)  the input of block 0: embed(wte[tokens], pos0) unless an
//                       encoding needs the token ids (complex-order)
//   embed(x, pos0)      absolute encodings add to / transform the token embeddings (learned,
//                       sinusoidal, floater; rnn replaces them by a GRU's states)
//   rotate(st)          rotary encodings rotate st.q / st.k (rope, xpos, scaling family)
//   bias(st)            additive logit terms [1 or B, H, T, S] (alibi, kerple, t5, sandwich, fire)
//   terms(st)           what the default logits / output compute (ScoreTerms): the query,
//                       scale and bias, plus the relative terms of the content-position
//                       encodings (shaw, xl, deberta, tupe), which override this hook only
//   logits(st)          the pre-mask scores [B, H, T, S] of terms(st) (rerope, cope override it)
//   output(st, p)       o = p @ v (+ the value term of terms(st): shaw)
//   fused_attention_ok  true when logits and output are the defaults: attention then runs
//                       logits, mask, softmax and output as one fused op (fused_attention)
// Incremental decoding (nn/kv_cache.h, docs/sampling.md) calls the same hooks with T new queries
// at q_pos0 = the cached length and all S cached keys, plus:
//   begin_decode        a per-generation PosencDecodeState (default none: stateless encodings)
//   embed_tokens_decode  embed the new positions, continuing from the state (default:
//                       embed_tokens)
//   decode_keys_stable  whether rotate() maps key j by j alone, so rotated keys may be cached
//   max_length          the longest sequence the encoding can encode (0 = no limit)
//   decode_limit        the most positions a cache reproduces exactly (0 = no limit)
// Explicit positions (POSENC_SPEC §7.3; `grads --positions`, `"randomized": M` in training):
// GPT::forward hands a Positions table to embed_positions() and, through AttnState::positions,
// to every attention hook; the encodings with explicit_positions_ok() read them through
// query_position / key_position (the same helpers serve the contiguous q_pos0 / k_pos0 case).
// Parameters: a shared module registered on the model (under shared_prefix(), e.g. "wpe" or
// "pe") and per-layer modules registered on each attention as "pe".
#pragma once
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "autograd/ops_attention.h"
#include "nn/config.h"
#include "nn/module.h"

namespace ctx {

// The terms of one attention call (autograd/ops_attention.h):
//   logits = scale * (q k^T + relative terms) + bias;  o = p v (+ value term)
// What an encoding carries from one decoding step to the next (incremental decoding,
// nn/kv_cache.h): a recurrence's hidden state, the end point of an integration, or tables built
// once per generation instead of once per token. Made by begin_decode(), one per generation.
struct PosencDecodeState {
  virtual ~PosencDecodeState() = default;
};

// What the graph-free decoder (nn/decode_engine.h) needs from an encoding: tables over the
// positions 0..capacity-1 of one generation, built once, so that a step of one position is
// kernels on preallocated buffers. Each table is optional (undefined: absent).
struct DecodeTables {
  Tensor add;              // [capacity, D]: added to wte[token] at position p (row p; absolute encodings)
  Tensor cos, sin;         // [capacity, Dh / 2]: q and k of position p rotated by row p (rope_rotate)
  bool interleaved = false;  // rotation pairs (2k, 2k + 1) instead of (k, k + Dh / 2)
};

struct ScoreTerms {
  Variable q;          // the content query: st.q, or the encoding's own (xl: q + u)
  double scale = 1.0;
  Variable bias;       // [1 or B, H, T, S] or undefined
  RelTerms rel;        // content-position terms; empty for the other encodings
};

// Explicit positions (POSENC_SPEC §7.3): token t of batch row b sits at at(b, t) instead of t.
// rows == 1: one row shared by the whole batch (a randomized draw; a [B, T] array whose rows are
// all equal collapses to it, so the encodings build one table and the fused attention applies).
// Each row strictly increasing, 0 <= p < 2^24 (make_positions checks).
struct Positions {
  int64_t rows = 0, T = 0;
  std::vector<int64_t> p;  // [rows, T], row-major
  int64_t at(int64_t b, int64_t t) const { return p[(size_t)((rows == 1 ? 0 : b) * T + t)]; }
  int64_t max() const { return p.empty() ? 0 : *std::max_element(p.begin(), p.end()); }
};
// The largest position an explicit table may hold + 1 (every integer below is exact in float32).
constexpr int64_t kMaxExplicitPosition = int64_t(1) << 24;
// Positions from a [rows, T] row-major array (checked: rows >= 1, T >= 1, each row strictly
// increasing, 0 <= p < 2^24; `what` starts the messages); equal rows collapse to one.
Positions make_positions(std::vector<int64_t> p, int64_t rows, int64_t T, const std::string& what);
// Randomized positions (POSENC_SPEC §7.3, Ruoss et al. 2023): T distinct integers drawn uniformly
// from {0, ..., M-1} (without replacement), sorted ascending; one row for the whole batch.
Positions randomized_positions(Rng& rng, int64_t M, int64_t T);
// The `"randomized": M` key of a posenc config: M (an integer >= context), or 0 when absent /
// null. `source` starts the error messages.
int64_t posenc_randomized(const nlohmann::json& posenc, int64_t context, const std::string& source);

// What an encoding sees of one attention call.
struct AttnState {
  int layer = 0;
  int64_t B = 0, H = 0, T = 0, S = 0, Dh = 0;  // T queries, S keys (S = T + memory length)
  int64_t q_pos0 = 0;   // position of the first query (= memory length; 0 without memory)
  // position of key row 0. Always 0 except when a decoding step hands rotate() only its new
  // keys (k_pos0 = q_pos0, S = T) to append them, rotated, to the cache; see decode_keys_stable.
  int64_t k_pos0 = 0;
  // Sliding window and attention sinks of this call (POSENC_SPEC §6; 0 = off): query i sees key j
  // iff j <= i and (i - j < window or j < sinks). Encodings with sinks_ok() read them to place
  // a sink key beyond the window at its cache rank (sink_distance).
  int64_t window = 0, sinks = 0;
  PosencDecodeState* decode = nullptr;  // this generation's state (incremental decoding) or null
  // When set, the attention also writes its per-query-row statistics there (AttnRowStats,
  // core/backend.h: eval --attn-stats); fused_attention passes it to the kernel.
  AttnRowStats* stats = nullptr;
  // Explicit positions of this forward (POSENC_SPEC §7.3) or null: query i and key j of batch row
  // b sit at positions->at(b, i) and at(b, j) (then q_pos0 = k_pos0 = 0 and S = T). Read them
  // through query_position / key_position / position_rows.
  const Positions* positions = nullptr;
  double scale = 1.0;   // 1/sqrt(Dh) unless the encoding says otherwise
  Variable q, k, v;     // q [B, H, T, Dh]; k, v [B, H, S, Dh]
  Variable qkv_weight, qkv_bias;  // the layer's projection (DeBERTa projects its table with it)
  // terms(st) of this call, computed on first use by PositionalEncoding::score_terms (so that
  // logits and output share them); a copy of the state made after that carries them along.
  std::optional<ScoreTerms> terms;
};

// The position of query i / key j of batch row b (explicit, or q_pos0 + i / k_pos0 + j).
inline int64_t query_position(const AttnState& st, int64_t b, int64_t i) {
  return st.positions ? st.positions->at(b, i) : st.q_pos0 + i;
}
inline int64_t key_position(const AttnState& st, int64_t b, int64_t j) {
  return st.positions ? st.positions->at(b, j) : st.k_pos0 + j;
}
// How many distinct position rows the call has: explicit per-row positions give B, else 1
// (tables over positions are [position_rows, ...] and broadcast over the batch when 1).
inline int64_t position_rows(const AttnState& st) { return st.positions ? st.positions->rows : 1; }
// The largest position of the call + 1 (the "n" of dynamic NTK / LongRoPE, of distance tables).
inline int64_t position_extent(const AttnState& st) {
  return st.positions ? st.positions->max() + 1 : std::max(st.k_pos0 + st.S, st.q_pos0 + st.T);
}

class PositionalEncoding {
 public:
  virtual ~PositionalEncoding() = default;
  virtual std::string type() const = 0;
  // Checks that sequences of `total_len` positions can be encoded (learned / tupe reject > L).
  virtual void check_length(int64_t total_len) const { (void)total_len; }
  // Segment memory (Transformer-XL): how many past positions each layer keeps, detached, as
  // extra keys/values for the next segment. 0 for every other encoding.
  virtual int64_t memory_length() const { return 0; }

  // Parameter modules (null when the encoding has none).
  virtual std::string shared_prefix() const { return "pe"; }
  virtual std::shared_ptr<nn::Module> shared_module() { return nullptr; }
  virtual std::shared_ptr<nn::Module> layer_module(int layer) { (void)layer; return nullptr; }
  // Initial values of the encoding's parameters (POSENC_SPEC §0).
  virtual void init_parameters(Rng& rng) { (void)rng; }

  virtual Variable embed(const Variable& x, int64_t pos0) { (void)pos0; return x; }
  // The input of block 0 from the token ids tokens [B, T] (on wte's device): by default
  // embed(wte[tokens], pos0). Encodings that need the ids themselves (complex-order: a
  // frequency per word) override this instead of embed.
  virtual Variable embed_tokens(const Variable& wte, const Tensor& tokens, int64_t pos0) {
    return embed(embedding(wte, tokens), pos0);
  }
  virtual void rotate(AttnState& st) { (void)st; }
  virtual Variable bias(AttnState& st) { (void)st; return Variable(); }
  // Default: {st.q, st.scale, bias(st), no relative terms}.
  virtual ScoreTerms terms(AttnState& st);
  virtual Variable logits(AttnState& st);  // relative_logits of score_terms(st)
  virtual Variable output(AttnState& st, const Variable& p);  // relative_output of score_terms(st)
  // True when this encoding keeps the default logits and output, so that attention may run them
  // as one fused kernel (autograd/ops_attention.h). Encodings opt in (all but rerope).
  virtual bool fused_attention_ok(const AttnState& st) const { (void)st; return false; }
  // True when terms() reads st.k (DeBERTa's p2c term). A decoding step otherwise hands the fused
  // attention the KV cache's whole buffers as st.k / st.v (rows S.. unused) instead of copying
  // the first S rows out (nn/attention.cpp, Attention::forward_cached).
  virtual bool terms_read_keys() const { return false; }
  // True when the encoding is defined with attention sinks (POSENC_SPEC §6): the mask-only
  // encodings, the distance biases and rope with a T-independent scaling. Others are an error.
  virtual bool sinks_ok() const { return false; }
  // True when the encoding takes explicit positions (POSENC_SPEC §7.3: none, learned without
  // hierarchical, sinusoidal, rope with no scaling or pi / ntk / dynamic-ntk / yarn / llama3 /
  // longrope, alibi, kerple, sandwich, t5, fire); GPT::forward refuses them for the others, and
  // make_posenc refuses "randomized" there.
  virtual bool explicit_positions_ok() const { return false; }
  // The input of block 0 with explicit positions (only called when explicit_positions_ok()):
  // x [B, T, D] = wte[tokens]; absolute encodings add their vectors at p.at(b, t). Default: x.
  virtual Variable embed_positions(const Variable& x, const Positions& p) {
    (void)p;
    return x;
  }

  // ---- incremental decoding (nn/kv_cache.h) ----
  // A state for one generation of up to `capacity` positions, or null when the encoding needs
  // none (the default: every hook is a function of the positions it is handed).
  virtual std::unique_ptr<PosencDecodeState> begin_decode(int64_t capacity) {
    (void)capacity;
    return nullptr;
  }
  // embed_tokens() of the T new positions pos0.. given that positions 0..pos0-1 went through
  // earlier calls with the same state (rnn continues its GRU from the last hidden state here,
  // floater reads the positions it integrated once for the whole generation).
  virtual Variable embed_tokens_decode(const Variable& wte, const Tensor& tokens, int64_t pos0,
                                       PosencDecodeState* state) {
    (void)state;
    return embed_tokens(wte, tokens, pos0);
  }
  // True when rotate() transforms key j as a function of j and its content only (not of S, T or
  // the query positions) for sequences of n positions: the cache then keeps rotated keys and
  // rotates only the new ones (st.k_pos0 > 0). False (xpos, dynamic NTK beyond its original
  // context): every step re-rotates all cached raw keys, exactly as the full recompute does.
  virtual bool decode_keys_stable(int64_t n) const {
    (void)n;
    return true;
  }
  // The longest sequence check_length accepts (0 = no limit): learned (L, or L^2 hierarchical)
  // and tupe (L). Generation beyond it keeps the last max_length tokens and recomputes.
  virtual int64_t max_length() const { return 0; }
  // The most positions a KV cache can serve exactly (0 = no limit): max_length, or fewer when the
  // full forward at a longer length re-encodes the earlier positions (dynamic NTK beyond its
  // original context: the base grows with the length, so every hidden state of every layer
  // changes each step). GPT::forward_cached refuses more; sample() recomputes from there on.
  virtual int64_t decode_limit() const { return max_length(); }
  // The tables that reproduce embed_tokens_decode and rotate() for every decoding step of up to
  // `capacity` positions, with the default logits and output and no bias (nn/decode_engine.h), or
  // nullopt (the default) when the encoding needs its hooks: then decoding takes the graph path.
  // `like`: a model parameter (the tables' dtype and device).
  virtual std::optional<DecodeTables> decode_tables(int64_t capacity, const Tensor& like) {
    (void)capacity, (void)like;
    return std::nullopt;
  }

  // terms(st), computed once per attention call (kept in st.terms).
  const ScoreTerms& score_terms(AttnState& st);
  // Logits, causal mask (with a sliding window when window > 0), softmax and output as one
  // fused op when fused_attention_ok(st) and the bias (if any) is shared over the batch; else
  // undefined (the caller composes logits / softmax / output). An active dropout mask drops the
  // probabilities (training), as dropout(p, mask) on the composed path.
  // An encoding whose logits are its own may override it with a fused attention of its own
  // (cope: logits, softmax and p v in one node), or undefined where it has none.
  virtual Variable fused_attention(AttnState& st, int64_t window, const DropoutMask& dropout = {});
  // True when fused_attention() also applies st.sinks (POSENC_SPEC §6; cope's own node): attention
  // with sinks then asks it first. Otherwise (the default: the fused kernels know only the
  // window) attention with sinks takes the composed path.
  virtual bool fused_attention_takes_sinks() const { return false; }
};

// The relative position of key j for query i (absolute positions, j <= i) under st's window and
// sinks (POSENC_SPEC §6): i - j, except a sink key beyond the window (j < sinks, i - j >= window)
// at min(i, sinks + window - 1) - j, its distance in the rolling cache.
inline int64_t sink_distance(const AttnState& st, int64_t i, int64_t j) {
  if (st.sinks > 0 && j < st.sinks && i - j >= st.window) return std::min(i, st.sinks + st.window - 1) - j;
  return i - j;
}

// Builds the encoding named by config.posenc["type"], validating its parameters (unknown key or
// bad value: an error naming the key and the expected value; a factory that returns nullptr: an
// error naming the type and its plugin). `source` starts the messages.
std::unique_ptr<PositionalEncoding> make_posenc(const ModelConfig& cfg, const std::string& source);
std::vector<std::string> posenc_types();
// Builds each of `types` once on `cfg` with its default parameters: a factory that returns
// nullptr is an error (naming the type and the plugin it came from); one that throws (it needs
// parameters) is left to make_posenc when a model names it. The plugin loader runs it.
void posenc_probe(const std::vector<std::string>& types, const ModelConfig& cfg, const std::string& source);

// Registration (each encoding file registers itself with a static PosencRegistrar; so does a
// user's file linked into a program or a --plugin library: docs/extending.md). A name that is
// already registered keeps its first factory; the repeated name is reported by
// posenc_take_duplicates(), which hands over (and clears) the names repeated so far.
using PosencFactory =
    std::unique_ptr<PositionalEncoding> (*)(const ModelConfig& cfg, const nlohmann::json& params,
                                           const std::string& source);
struct PosencRegistrar {
  PosencRegistrar(const char* type, PosencFactory f);
};
std::vector<std::string> posenc_take_duplicates();

// Helpers for encoding files: read an optional typed parameter (error names key and type).
double posenc_number(const nlohmann::json& p, const char* key, double def, const std::string& source);
// An integer parameter >= lo (error names posenc.<key>, the type and the bound).
int64_t posenc_int(const nlohmann::json& p, const char* key, int64_t def, int64_t lo,
                   const std::string& source, const char* type);
bool posenc_bool(const nlohmann::json& p, const char* key, bool def, const std::string& source);
std::string posenc_string(const nlohmann::json& p, const char* key, const std::string& def,
                          const std::string& source);
// Tables shared by several encodings (posenc/bias.cpp): the causal T5 bucket of a distance
// n >= 0 (t5, tupe) and the ALiBi slopes (float32, POSENC_SPEC §3).
int64_t posenc_t5_bucket(int64_t n, int64_t num_buckets, int64_t max_distance);
std::vector<float> posenc_alibi_slopes(int64_t H);
// Errors if p has a key not in `allowed` (besides "type").
void posenc_check_keys(const nlohmann::json& p, const std::vector<std::string>& allowed,
                       const std::string& source);

}  // namespace ctx
