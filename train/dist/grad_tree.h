// train/dist/grad_tree.h — --deterministic's gradient sum: one fixed pairwise tree over the
// sequences of an optimizer step, so that a run's bits depend on the global batch only: not on the
// number N of MPI ranks (any N that divides --batch), nor on --accum, nor on the thread count
// (docs/distributed.md, "The same run whatever N").
//
// The leaves are the step's sequences, one forward/backward each: sequence i of micro-batch a is
// leaf a * B + i (B: the global batch). The tree's nodes are the aligned blocks of leaves
// [k 2^j, (k+1) 2^j); a node is the sum of its two halves, left + right; the blocks left at the top
// (the binary decomposition of B * accum) fold from the right: n0 + (n1 + (n2 + ...)). A rank
// holds a contiguous range of each micro-batch's leaves; it sums the largest nodes inside its
// ranges (tree_cover), the ranks gather those nodes, and each finishes the same tree. A node's
// value is a function of its leaves alone, and a leaf (one sequence's gradient, with the same loss
// scale 1 / (B * accum) on every rank) does not depend on N: hence the same bits for every N.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "nn/module.h"

namespace ctx {

// The leaves of a batch of B sequences: [i, i + 1) for i = 0 .. B-1 (one forward/backward each).
std::vector<std::pair<int64_t, int64_t>> sequence_shards(int64_t B);

struct TreeNode {
  int64_t start = 0, size = 0;  // the sum of leaves [start, start + size); size a power of two
  bool operator==(const TreeNode& o) const { return start == o.start && size == o.size; }
};

// The nodes that cover [begin, end) exactly, left to right: at each position the largest aligned
// block that fits.
std::vector<TreeNode> tree_cover(int64_t begin, int64_t end);
// The nodes a rank holds after an optimizer step: tree_cover of each micro-batch's rows
// [a B + r B/N, a B + (r+1) B/N), a = 0 .. accum-1 (with N = 1: the cover of [0, B accum)).
std::vector<TreeNode> rank_nodes(int64_t batch, int64_t accum, int rank, int ranks);
// How `nodes` (disjoint, covering [0, n) with no gap, in any order) add up to the root: pairs
// (i, j), each meaning nodes[i] = nodes[i] + nodes[j], in order; *root: the index that ends with
// the sum. Siblings first, then the top blocks from the right.
std::vector<std::pair<size_t, size_t>> tree_plan(const std::vector<TreeNode>& nodes, size_t* root);

// Sums the leaves' gradients in the tree. After the backward of each leaf, push(leaf) takes the
// parameters' gradients (and clears them), adding siblings at once (memory: one partial per level).
// finish() leaves the root in the parameters' gradients: across_ranks (N > 1) gathers every rank's
// nodes first (one MPI_Allgatherv of the partials through the host).
class GradTree {
 public:
  // local: the leaves 0, 1, ... all pushed here (--accum's micro-batches of XL's segments);
  // across ranks: this rank's leaves of a step of `accum` micro-batches of the global `batch`.
  explicit GradTree(const nn::NamedParams& params) : params_(params) {}
  GradTree(const nn::NamedParams& params, int64_t batch, int64_t accum);
  void push(int64_t leaf);
  void finish();

 private:
  struct Partial {
    TreeNode node;
    std::vector<Tensor> grads;  // one per parameter (undefined: no gradient)
  };
  void finish_local();
  void finish_across_ranks();
  int64_t row_floats() const;
  std::vector<float> pack_nodes() const;
  void unpack_root(const float* row);
  nn::NamedParams params_;
  int64_t batch_ = 0, accum_ = 0;  // across ranks when batch_ > 0
  std::vector<Partial> stack_;
  std::vector<std::vector<Tensor>> spare_;  // buffers of added partials, reused (no allocation)
};

}  // namespace ctx
