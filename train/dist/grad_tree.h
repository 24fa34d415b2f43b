// train/dist/grad_tree.h — the gradients of one optimizer step's micro-steps (the canonical shards of
// a batch, and --accum's micro-batches) summed in a fixed pairwise tree, so that a run's bits
// depend on the global batch only: not on the number of MPI ranks, nor on --accum, nor on the
// thread count (docs/distributed.md, "The same run whatever N").
//
// canonical_shards(B, T) cuts a batch of B sequences by recursive halving (the first n/2, then
// the rest) until a piece has at most kShardRows = B*T rows; the trainer runs the forward and
// backward once per piece. Two ranks holding B/2 sequences each cut them the same way, so
//   tree(shards of B) == tree(shards of the first B/2) + tree(shards of the rest)
// bit for bit, which is what MPI_Allreduce over 2 ranks computes. Summing per piece, instead of
// letting one backward accumulate every use of a weight, is what makes a tied weight (wte, used
// by the embedding and the output layer) come out the same too.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace ctx {

constexpr int64_t kShardRows = 1024;  // rows (sequences x positions) per forward/backward piece

// [b0, b1) sequence ranges, in order. One range when B * T <= kShardRows (or B == 1).
std::vector<std::pair<int64_t, int64_t>> canonical_shards(int64_t B, int64_t T);

// Sums the micro-steps' gradients in a pairwise tree (a binary counter: two partial sums of the
// same size are added, earlier one first). Usage: after the backward of every micro-step but the
// last, push() (takes the gradients and clears them); after the last one, finish() (leaves the
// tree's sum in the parameters' gradients). For 2^k micro-steps this is the balanced tree.
class GradTree {
 public:
  explicit GradTree(const nn::NamedParams& params) : params_(params) {}
  void push();
  void finish();

 private:
  struct Partial {
    int level;
    std::vector<Tensor> grads;  // one per parameter (undefined: no gradient)
  };
  nn::NamedParams params_;
  std::vector<Partial> stack_;
  std::vector<std::vector<Tensor>> spare_;  // buffers of folded partials, reused (no allocation)
};

}  // namespace ctx
