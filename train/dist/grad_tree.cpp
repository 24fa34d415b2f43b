// train/dist/grad_tree.cpp — canonical shards and the pairwise gradient tree (see grad_tree.h).
#include "train/dist/grad_tree.h"

#include "core/backend.h"
#include "core/error.h"

namespace ctx {

static void shards_rec(int64_t b0, int64_t n, int64_t T, std::vector<std::pair<int64_t, int64_t>>& out) {
  if (n <= 1 || n * T <= kShardRows) {
    out.emplace_back(b0, b0 + n);
    return;
  }
  const int64_t h = n / 2;
  shards_rec(b0, h, T, out);
  shards_rec(b0 + h, n - h, T, out);
}

std::vector<std::pair<int64_t, int64_t>> canonical_shards(int64_t B, int64_t T) {
  CTX_CHECK(B > 0 && T > 0, "canonical_shards: batch ", B, " and length ", T, " must be positive");
  std::vector<std::pair<int64_t, int64_t>> out;
  shards_rec(0, B, T, out);
  return out;
}

// a = a + b, parameter by parameter (an undefined tensor is a zero)
static void add_into(std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!b[i].defined()) continue;
    if (!a[i].defined()) {
      a[i] = b[i].clone();
      continue;
    }
    backend_of(a[i]).binary(BinaryOp::Add, a[i], b[i], a[i]);
  }
}

void GradTree::push() {
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
  Partial cur{0, std::move(g)};
  while (!stack_.empty() && stack_.back().level == cur.level) {  // earlier (left) partial first
    Partial left = std::move(stack_.back());
    stack_.pop_back();
    add_into(left.grads, cur.grads);
    spare_.push_back(std::move(cur.grads));
    cur = Partial{left.level + 1, std::move(left.grads)};
  }
  stack_.push_back(std::move(cur));
}

void GradTree::finish() {
  // the last micro-step's gradients stay where they are: grad = left + grad, from the most
  // recent (smallest) partial to the oldest
  while (!stack_.empty()) {
    Partial left = std::move(stack_.back());
    stack_.pop_back();
    for (size_t i = 0; i < params_.size(); ++i) {
      Variable& p = params_[i].second;
      const Tensor& l = left.grads[i];
      if (!l.defined()) continue;
      if (!p.grad().defined()) {
        accumulate_grad(*p.impl(), l);
        continue;
      }
      Tensor g = p.grad();
      backend_of(g).binary(BinaryOp::Add, l, g, g);
    }
    spare_.push_back(std::move(left.grads));
  }
}

}  // namespace ctx
