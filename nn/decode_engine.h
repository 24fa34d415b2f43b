// nn/decode_engine.h — graph-free incremental decoding (docs/sampling.md, "The graph-free
// decoder"): one position per step for B sequences, straight through the backend's kernels on
// buffers allocated once per generation. No Variable, no autograd node, no tensor allocated in a
// warm step; the same kernels, in the same order, as GPT::forward_cached (nn/gpt.h), so the logits
// are the graph path's. Per layer of a step (x: the residual stream [B, D]):
//   y = norm1(x); qkv = y Wqkv^T + b            // [B, 3D]
//   q, k, v = split_heads(qkv)                  // [B, H, 1, Dh]
//   q, k rotated by row `pos` of the encoding's tables (rotary); k, v written to cache row pos
//   o = attention(q, cache rows 0..pos)         // [B, H, 1, Dh] = [B, D] (one query: no merge)
//   x += o Wp^T + bp
//   x += proj(gelu_tanh(norm2(x) Wfc^T + bfc))
// and then logits [B, V] = norm_f(x) Wout^T. The token embedding is wte[tok] + row pos of the
// encoding's additive table (absolute encodings).
//
// It serves the models whose encoding gives DecodeTables (posenc/posenc.h: none, learned,
// sinusoidal, rope with a one-branch scaling) on a backend with the fused kernels it calls,
// without sinks or Transformer-XL memory; make() says why not otherwise, and the caller decodes
// through the graph (train/sample.cpp does). CTXLAB_FUSED_DECODE=0 turns it off.
// A one-position step runs as one backend call where the backend has a whole-step decoder for the
// model (Backend::make_decode_step, core/decode_step.h: the CPU's, f32 models), else op by op as
// below (CTXLAB_FUSED_DECODE_STEP=0 forces that); the logits are the same.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"  // Strided
#include "core/team.h"
#include "core/tensor.h"
#include "nn/gpt.h"

namespace ctx::nn {

class DecodeEngine {
 public:
  // An engine for `batch` sequences of up to `capacity` positions with a sliding window of
  // `window` keys (0: full attention), or null with *why set (the reason the graph path decodes).
  // The model must stay alive and unchanged (its weights are read in place) while the engine is used.
  static std::unique_ptr<DecodeEngine> make(GPT& model, int64_t batch, int64_t capacity, int64_t window,
                                            std::string* why);
  // Feeds T tokens per sequence (tokens [B, T] row-major, ids < vocab) at positions length()..
  // and returns the logits of each sequence's last one [B, V] (the engine's buffer, valid until the
  // next call; on the model's device). A step of T = 1 is the warm path: it allocates nothing.
  // Longer steps (a prompt) run in chunks of at most 64 positions on a second workspace made on
  // first use.
  const Tensor& step(const int32_t* tokens, int64_t T = 1);
  int64_t length() const { return n_; }
  int64_t capacity() const { return cap_; }
  int64_t batch() const { return B_; }
  // Forget every position (the buffers stay).
  void clear() { n_ = 0; }
  static constexpr int64_t kChunk = 64;
  // How a one-position step runs: "one backend call" or "op by op".
  const char* step_kind() const { return whole_ ? "one backend call" : "op by op"; }

 private:
  // The buffers of one call of T positions for B sequences (rows = B T).
  struct Work {
    int64_t T = 0;
    Tensor tok_host, tok;          // [B T] i64: the host copy and the device's
    Tensor x, y, mean, rstd;       // [B T, D], [B T, D], [B T], [B T]
    Tensor qkv;                    // [B, T, 3D]
    Tensor q, k, v, qr, kr, o;     // [B, H, T, Dh] (one row: q, k, v are views of qkv's blocks)
    Tensor lse;                    // [B, H, T]
    Tensor merged, a;              // [B, T, D]: the heads merged (T = 1: o viewed [B, D]); [B T, D]: a sublayer's output
    Tensor pre, h;                 // [B T, F]
  };
  // One thread's share of a Linear: its rows of the weight and bias, and where their columns of
  // the output go: a column view of the output (one row of x: contiguous), or a buffer of its own
  // [R, n] scattered into the output's columns (several rows), or the whole output (a team of one).
  struct Lin {
    Tensor w, b, out;
    Tensor dst;          // the whole output [R, N] when scattering
    Strided from, into;  // out -> its columns of dst
    bool scatter = false;
  };
  // One thread's part of one layer on a workspace, as views made once.
  struct Part {
    // qkv: the whole projection (a team of one); with one row, the q, k and v rows of its own heads,
    // so that its attention needs no other thread's columns (no barrier between the two); with
    // several rows its share of the rows, the heads split afterwards
    std::vector<Lin> qkv;
    Lin proj, fc, mproj;
    Tensor h;                                // fc's activation (fc.out holds the pre-activation)
    Tensor q, k, v, qr, kr, o, lse, ck, cv;  // its heads (b, h) [1, n, T, Dh]; ck, cv [1, n, capacity, Dh]
    int64_t heads = 0;
    Strided kv_src, kv_dst;  // its k, v rows into the cache (dst offset: the position)
  };
  // Each rank's own copy of the residual stream and its norm (one row: the row-wise steps are
  // repeated by every thread of a team instead of run by one while the others wait).
  struct Stream {
    Tensor x, y, mean, rstd;  // [B T, D], [B T, D], [B T], [B T]
  };
  // A workspace and its parts: [layer][rank], and each rank's rows of the output head.
  struct Plan {
    Work w;
    int threads = 1;
    std::vector<Stream> streams;  // [rank]; rank 0's are w's buffers
    std::vector<std::vector<Part>> parts;
    std::vector<Lin> head;             // [rank]: the output head (w_out's rows, a zero bias) into logits
    Tensor rope_c, rope_s;             // [T, Dh / 2]: the rotation of this call's positions
    Strided rope_src, rope_dst;
  };
  struct Layer {
    const Block* block;
    Tensor k, v;  // the cache: [B, H, capacity, Dh] (keys rotated)
  };
  DecodeEngine(GPT& model, int64_t batch, int64_t capacity, int64_t window, DecodeTables tables);
  DecodeStack stack() const;  // the model and the cache as the backend's whole step reads them
  Work make_work(int64_t T) const;
  std::unique_ptr<Plan> make_plan(int64_t T, int threads);
  void run(Plan& p, const int32_t* tokens, int64_t stride);
  void layer(Plan& p, const Team& tm, int l, int64_t pos);
  void norm_into(const Norm& n, Stream& s) const;
  static void run_lin(const Lin& l, const Tensor& x, const Tensor* act, bool node = false);

  GPT& m_;
  const int64_t B_, cap_, window_, D_, H_, Dh_, F_, V_;
  int64_t n_ = 0;
  const bool mlp_node_;  // FastPath::MlpGelu: linear_gelu, else linear then gelu_tanh (as the MLP node)
  DecodeTables tables_;
  std::vector<Layer> layers_;
  std::unique_ptr<DecodeStep> whole_;  // T = 1 as one backend call, where the backend has one
  std::vector<int64_t> tok_;           // [B]: its token ids
  std::unique_ptr<Plan> one_;    // T = 1 op by op (no whole_): the warm path, on a team of threads where it pays
  std::unique_ptr<Plan> chunk_;  // T = kChunk or less: prompts, made on first use
  Tensor last_;                  // [B, D]: each sequence's last row (chunks)
  Tensor logits_;                // [B, V]
};

}  // namespace ctx::nn
