// train/dist/grad_tree.cpp — the tree's nodes and plan, and GradTree (see grad_tree.h).
#include "train/dist/grad_tree.h"

#include <algorithm>
#include <cstring>

#include "core/backend.h"
#include "core/error.h"
#include "train/dist/distributed.h"

namespace ctx {

namespace {

// a + b is their parent: adjacent, equal size, a aligned to the parent's size
bool siblings(const TreeNode& a, const TreeNode& b) {
  return a.size == b.size && a.start + a.size == b.start && a.start % (2 * a.size) == 0;
}

// a = a + b, parameter by parameter (an undefined tensor is a zero)
void add_into(std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!b[i].defined()) continue;
    if (!a[i].defined()) {
      a[i] = b[i].clone();
      continue;
    }
    backend_of(a[i]).binary(BinaryOp::Add, a[i], b[i], a[i]);
  }
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> sequence_shards(int64_t B) {
  CTX_CHECK(B > 0, "sequence_shards: batch ", B, " must be positive");
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < B; ++i) out.emplace_back(i, i + 1);
  return out;
}

std::vector<TreeNode> tree_cover(int64_t begin, int64_t end) {
  CTX_CHECK(0 <= begin && begin <= end, "tree_cover: bad leaf range [", begin, ", ", end, ")");
  std::vector<TreeNode> out;
  for (int64_t x = begin; x < end;) {
    int64_t s = 1;
    while (x % (2 * s) == 0 && x + 2 * s <= end) s *= 2;
    out.push_back({x, s});
    x += s;
  }
  return out;
}

std::vector<TreeNode> rank_nodes(int64_t batch, int64_t accum, int rank, int ranks) {
  CTX_CHECK(batch > 0 && accum > 0 && ranks > 0 && batch % ranks == 0 && 0 <= rank && rank < ranks,
            "rank_nodes: batch ", batch, " x ", accum, " on rank ", rank, " of ", ranks);
  const int64_t per = batch / ranks;
  if (ranks == 1) return tree_cover(0, batch * accum);
  std::vector<TreeNode> out;
  for (int64_t a = 0; a < accum; ++a)
    for (const TreeNode& n : tree_cover(a * batch + rank * per, a * batch + (rank + 1) * per)) out.push_back(n);
  return out;
}

std::vector<std::pair<size_t, size_t>> tree_plan(const std::vector<TreeNode>& nodes, size_t* root) {
  CTX_CHECK(!nodes.empty(), "tree_plan: no nodes");
  std::vector<size_t> order(nodes.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return nodes[a].start < nodes[b].start; });
  std::vector<std::pair<size_t, size_t>> plan;
  std::vector<std::pair<size_t, TreeNode>> st;  // (index holding the partial, the node it now is)
  int64_t next = 0;
  for (size_t i : order) {
    CTX_CHECK(nodes[i].start == next && nodes[i].size > 0, "tree_plan: the nodes do not cover the leaves: leaf ",
              next, " expected, got [", nodes[i].start, ", +", nodes[i].size, ")");
    next += nodes[i].size;
    st.emplace_back(i, nodes[i]);
    while (st.size() >= 2 && siblings(st[st.size() - 2].second, st.back().second)) {
      auto right = st.back();
      st.pop_back();
      plan.emplace_back(st.back().first, right.first);
      st.back().second.size *= 2;
    }
  }
  size_t acc = st.back().first;
  for (size_t k = st.size() - 1; k-- > 0;) {  // the top blocks, from the right
    plan.emplace_back(st[k].first, acc);
    acc = st[k].first;
  }
  *root = acc;
  return plan;
}

GradTree::GradTree(const nn::NamedParams& params, int64_t batch, int64_t accum)
    : params_(params), batch_(batch), accum_(accum) {
  (void)rank_nodes(batch, accum, dist::rank(), dist::size());  // checks the split
}

void GradTree::push(int64_t leaf) {
  std::vector<Tensor> g;
  if (!spare_.empty()) {
    g = std::move(spare_.back());
    spare_.pop_back();
  }
  g.resize(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i].second;
    const Tensor& pg = p.grad();
    if (!pg.defined()) {
      g[i] = Tensor();
    } else {
      if (!g[i].defined() || g[i].shape() != pg.shape() || g[i].dtype() != pg.dtype() || g[i].device() != pg.device())
        g[i] = Tensor::empty(pg.shape(), pg.dtype(), pg.device());
      g[i].copy_from(pg);
    }
    p.zero_grad();
  }
  Partial cur{{leaf, 1}, std::move(g)};
  while (!stack_.empty() && siblings(stack_.back().node, cur.node)) {  // left + right
    Partial left = std::move(stack_.back());
    stack_.pop_back();
    add_into(left.grads, cur.grads);
    spare_.push_back(std::move(cur.grads));
    cur = Partial{{left.node.start, 2 * left.node.size}, std::move(left.grads)};
  }
  stack_.push_back(std::move(cur));
}

void GradTree::finish() {
  CTX_CHECK(!stack_.empty(), "GradTree::finish: no leaf was pushed");
  if (batch_ > 0 && dist::size() > 1)
    finish_across_ranks();
  else
    finish_local();
  stack_.clear();
}

// The root into the parameters' gradients (they were cleared by push).
void GradTree::finish_local() {
  std::vector<TreeNode> nodes;
  for (const Partial& p : stack_) nodes.push_back(p.node);
  size_t root = 0;
  for (auto [i, j] : tree_plan(nodes, &root)) add_into(stack_[i].grads, stack_[j].grads);
  for (size_t i = 0; i < params_.size(); ++i)
    if (stack_[root].grads[i].defined()) accumulate_grad(*params_[i].second.impl(), stack_[root].grads[i]);
  for (Partial& p : stack_) spare_.push_back(std::move(p.grads));
}

// Across ranks each node travels as one host row: the parameters' gradients, then one flag per
// parameter (1: it has a gradient).
int64_t GradTree::row_floats() const {
  int64_t row = (int64_t)params_.size();
  for (const auto& [name, p] : params_) row += p.data().numel();
  return row;
}

std::vector<float> GradTree::pack_nodes() const {
  const int64_t row = row_floats();
  std::vector<float> out((size_t)(row * (int64_t)stack_.size()), 0.0f);
  for (size_t k = 0; k < stack_.size(); ++k) {
    float* r = out.data() + (int64_t)k * row;
    float* flags = r + row - (int64_t)params_.size();
    for (size_t i = 0; i < params_.size(); ++i) {
      const Tensor& g = stack_[k].grads[i];
      const int64_t n = params_[i].second.data().numel();
      if (g.defined()) {
        CTX_CHECK(g.dtype() == DType::F32, "GradTree: gradients must be F32 across ranks, got ", dtype_name(g.dtype()));
        const Tensor h = g.device() == Device::CPU ? g : g.to(Device::CPU);
        std::memcpy(r, h.host<float>(), (size_t)n * sizeof(float));
        flags[i] = 1.0f;
      }
      r += n;
    }
  }
  return out;
}

void GradTree::unpack_root(const float* r) {
  const float* flags = r + row_floats() - (int64_t)params_.size();
  for (size_t i = 0; i < params_.size(); ++i) {
    Variable& p = params_[i].second;
    const int64_t n = p.data().numel();
    if (flags[i] > 0) {
      Tensor h = Tensor::empty(p.data().shape(), DType::F32, Device::CPU);
      std::memcpy(h.host<float>(), r, (size_t)n * sizeof(float));
      accumulate_grad(*p.impl(), p.data().device() == Device::CPU ? h : h.to(p.data().device()));
    }
    r += n;
  }
}

// Every rank's nodes gathered (rank after rank), the same plan on every rank, the root into the
// parameters' gradients.
void GradTree::finish_across_ranks() {
  const int ranks = dist::size();
  std::vector<TreeNode> mine;
  for (const Partial& p : stack_) mine.push_back(p.node);
  CTX_CHECK(mine == rank_nodes(batch_, accum_, dist::rank(), ranks),
            "GradTree: this rank's leaves were not pushed once each, in order");
  const int64_t row = row_floats();
  const std::vector<float> send = pack_nodes();
  for (Partial& p : stack_) spare_.push_back(std::move(p.grads));
  std::vector<TreeNode> nodes;
  std::vector<int64_t> counts;  // floats from each rank
  for (int r = 0; r < ranks; ++r) {
    const std::vector<TreeNode> theirs = rank_nodes(batch_, accum_, r, ranks);
    nodes.insert(nodes.end(), theirs.begin(), theirs.end());
    counts.push_back((int64_t)theirs.size() * row);
  }
  std::vector<float> all = dist::allgather_varying(send, counts);
  size_t root = 0;
  for (auto [i, j] : tree_plan(nodes, &root)) {
    float* a = all.data() + (int64_t)i * row;
    const float* b = all.data() + (int64_t)j * row;
    for (int64_t e = 0; e < row; ++e) a[e] = a[e] + b[e];  // the flags: > 0 where any node has a gradient
  }
  unpack_root(all.data() + (int64_t)root * row);
}

}  // namespace ctx
