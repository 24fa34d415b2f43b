// tests/test_grad_tree.cpp — the canonical summation orders that make a run the same whatever the
// number of MPI ranks, --accum or the thread count (train/dist/grad_tree.h, core/cpu/ref_kernels.h
// colsum_tree; docs/distributed.md): column sums of a gradient over rows equal, bit for bit, the
// sum of the two halves' column sums (what two ranks' allreduce computes) and do not depend on the
// thread count; the tree over a step's sequences gives the same bits whatever the number of ranks
// that hold its leaves; and GradTree adds the leaves' gradients in that tree, tied weights included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "autograd/ops.h"
#include "core/cpu/ref_kernels.h"
#include "core/threads.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "train/dist/grad_tree.h"

using namespace ctx;

namespace {

std::vector<float> random_rows(int64_t R, int64_t C, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> x((size_t)(R * C));
  for (auto& v : x) v = (float)(rng.uniform() * 2 - 1) * (1.f + (float)rng.below(1000));
  return x;
}

bool same_bits(const float* a, const float* b, int64_t n) { return std::memcmp(a, b, (size_t)n * 4) == 0; }

}  // namespace

TEST(GradTree, ColumnSumsSplitIntoHalvesAndIgnoreThreads) {
  const int64_t R = 2048, C = 200;  // R * C > 65536: the threaded path
  const auto x = random_rows(R, C, 1);
  std::vector<float> full(C), lo(C), hi(C), halves(C), one(C);
  const int saved = ctx::num_threads();
  ctx::set_num_threads(2);
  cpu::ref::colsum_rows(x.data(), R, C, full.data());
  cpu::ref::colsum_rows(x.data(), R / 2, C, lo.data());
  cpu::ref::colsum_rows(x.data() + (R / 2) * C, R / 2, C, hi.data());
  for (int64_t c = 0; c < C; ++c) halves[(size_t)c] = lo[(size_t)c] + hi[(size_t)c];
  ctx::set_num_threads(1);
  cpu::ref::colsum_rows(x.data(), R, C, one.data());
  ctx::set_num_threads(saved);
  EXPECT_TRUE(same_bits(full.data(), halves.data(), C)) << "tree(R) != tree(R/2) + tree(R/2)";
  EXPECT_TRUE(same_bits(full.data(), one.data(), C)) << "the sums depend on the thread count";
  // and they are sums: against f64
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, a = 0;
    for (int64_t r = 0; r < R; ++r) s += x[(size_t)(r * C + c)], a += std::abs(x[(size_t)(r * C + c)]);
    EXPECT_NEAR(full[(size_t)c], s, 1e-6 * a) << "column " << c;
  }
  // a plain running sum over the rows does not have the split property on this data (so the
  // check above can fail)
  std::vector<float> run(C, 0.f), rlo(C, 0.f), rhi(C, 0.f);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      run[(size_t)c] += x[(size_t)(r * C + c)];
      (r < R / 2 ? rlo : rhi)[(size_t)c] += x[(size_t)(r * C + c)];
    }
  for (int64_t c = 0; c < C; ++c) rlo[(size_t)c] += rhi[(size_t)c];
  EXPECT_FALSE(same_bits(run.data(), rlo.data(), C));
}

TEST(GradTree, NormWeightGradientsSplitIntoHalves) {
  const int64_t N = 1024, C = 96;
  const auto dy = random_rows(N, C, 2), x = random_rows(N, C, 3);
  std::vector<float> mean((size_t)N), rstd((size_t)N);
  Rng rng(4);
  for (int64_t i = 0; i < N; ++i) mean[(size_t)i] = (float)rng.uniform(), rstd[(size_t)i] = 0.5f + (float)rng.uniform();
  std::vector<float> dw(C, 0.f), db(C, 0.f), dw2(C, 0.f), db2(C, 0.f), dwh(C, 0.f), dbh(C, 0.f);
  cpu::ref::norm_param_grads(dy.data(), x.data(), mean.data(), rstd.data(), dw.data(), db.data(), N, C);
  const int64_t h = N / 2;
  cpu::ref::norm_param_grads(dy.data(), x.data(), mean.data(), rstd.data(), dw2.data(), db2.data(), h, C);
  cpu::ref::norm_param_grads(dy.data() + h * C, x.data() + h * C, mean.data() + h, rstd.data() + h, dwh.data(),
                             dbh.data(), N - h, C);
  for (int64_t c = 0; c < C; ++c) dw2[(size_t)c] += dwh[(size_t)c], db2[(size_t)c] += dbh[(size_t)c];
  EXPECT_TRUE(same_bits(dw.data(), dw2.data(), C));
  EXPECT_TRUE(same_bits(db.data(), db2.data(), C));
}

namespace {

// The sum of leaves [n.start, n.start + n.size) in the balanced tree (a node's value).
float node_sum(const std::vector<float>& leaf, TreeNode n) {
  if (n.size == 1) return leaf[(size_t)n.start];
  const int64_t h = n.size / 2;
  return node_sum(leaf, {n.start, h}) + node_sum(leaf, {n.start + h, h});
}

// The root the ranks compute from their nodes (gathered in rank order) with tree_plan.
float root_of(const std::vector<float>& leaf, int64_t B, int64_t accum, int ranks) {
  std::vector<TreeNode> nodes;
  for (int r = 0; r < ranks; ++r)
    for (TreeNode n : rank_nodes(B, accum, r, ranks)) nodes.push_back(n);
  std::vector<float> v;
  for (TreeNode n : nodes) v.push_back(node_sum(leaf, n));
  size_t root = 0;
  for (auto [i, j] : tree_plan(nodes, &root)) v[i] = v[i] + v[j];
  return v[root];
}

}  // namespace

TEST(GradTree, NodesCoverARankRangeWithAlignedBlocks) {
  using N = std::vector<TreeNode>;
  EXPECT_EQ(tree_cover(0, 8), (N{{0, 8}}));
  EXPECT_EQ(tree_cover(0, 12), (N{{0, 8}, {8, 4}}));
  EXPECT_EQ(tree_cover(2, 8), (N{{2, 2}, {4, 4}}));
  EXPECT_EQ(tree_cover(6, 12), (N{{6, 2}, {8, 4}}));
  EXPECT_EQ(rank_nodes(8, 1, 1, 2), (N{{4, 4}}));
  EXPECT_EQ(rank_nodes(8, 2, 1, 4), (N{{2, 2}, {10, 2}}));  // --accum 2: a range per micro-batch
  EXPECT_EQ(rank_nodes(6, 2, 0, 1), (N{{0, 8}, {8, 4}}));   // one rank: the micro-batches join
  EXPECT_THROW(rank_nodes(8, 1, 0, 3), Error);
  EXPECT_THROW(tree_plan({{0, 2}, {3, 1}}, nullptr), Error);  // a gap: leaf 2 missing
}

// The property --deterministic rests on: for every N that divides the batch (not only powers of
// two, small batches included) the root is the same bits; the leaves have magnitudes 1 .. 1e6
// apart, so any other association would show. The old canonical shards (leaves of up to 1024
// rows, cut from each rank's own rows) failed this for --batch 8 on 1 vs 2 ranks.
TEST(GradTree, TheRootIsTheSameBitsForEveryRankCountThatDividesTheBatch) {
  Rng rng(11);
  for (int64_t B : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32})
    for (int64_t accum : {1, 2, 3}) {
      std::vector<float> leaf((size_t)(B * accum));
      for (auto& v : leaf) v = (float)(rng.uniform() * 2 - 1) * std::pow(10.f, (float)rng.below(7));
      const float one = root_of(leaf, B, accum, 1);
      // the reference: the binary counter over all leaves (blocks left fold from the right)
      float want = 0;
      const std::vector<TreeNode> top = tree_cover(0, B * accum);
      for (size_t k = top.size(); k-- > 0;) want = k + 1 == top.size() ? node_sum(leaf, top[k]) : node_sum(leaf, top[k]) + want;
      EXPECT_EQ(std::memcmp(&one, &want, 4), 0) << "B " << B << " accum " << accum;
      for (int ranks = 2; ranks <= B; ++ranks) {
        if (B % ranks) continue;
        const float r = root_of(leaf, B, accum, ranks);
        EXPECT_EQ(std::memcmp(&one, &r, 4), 0) << "B " << B << " accum " << accum << " N " << ranks << ": " << r
                                               << " vs " << one;
      }
    }
}

TEST(GradTree, MicroStepGradientsAddInTheBalancedTree) {
  ModelConfig c = preset_config("tiny");
  c.context = 16;
  c.tie_embeddings = true;  // wte gets two gradients per backward: the tree must keep them together
  nn::GPT model(c);
  model.init_weights(5);
  model.train();
  nn::NamedParams params = model.named_parameters();
  Rng rng(6);
  const int64_t B = 4, T = 16;
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) x.data<int64_t>()[i] = (int64_t)rng.below(256), y.data<int64_t>()[i] = (int64_t)rng.below(256);
  auto grads_of = [&](int64_t b) {  // one sequence's gradient, alone
    for (auto& [n, p] : params) p.zero_grad();
    model.loss(x.slice0(b, b + 1), y.slice0(b, b + 1)).backward();
    std::vector<Tensor> g;
    for (auto& [n, p] : params) g.push_back(p.grad().clone());
    return g;
  };
  std::vector<std::vector<Tensor>> g;
  for (int64_t b = 0; b < B; ++b) g.push_back(grads_of(b));
  for (int64_t m : {2, 3, 4}) {
    for (auto& [n, p] : params) p.zero_grad();
    GradTree tree(params);
    for (int64_t b = 0; b < m; ++b) {
      model.loss(x.slice0(b, b + 1), y.slice0(b, b + 1)).backward();
      tree.push(b);
    }
    tree.finish();
    for (size_t i = 0; i < params.size(); ++i) {
      const int64_t n = g[0][i].numel();
      std::vector<float> want((size_t)n);
      for (int64_t e = 0; e < n; ++e) {
        const float* p0 = g[0][i].data<float>(), *p1 = g[1][i].data<float>();
        float s = p0[e] + p1[e];  // (g0 + g1)
        if (m == 3) s = s + g[2][i].data<float>()[e];  // + g2
        if (m == 4) s = s + (g[2][i].data<float>()[e] + g[3][i].data<float>()[e]);  // + (g2 + g3)
        want[(size_t)e] = s;
      }
      EXPECT_TRUE(same_bits(params[i].second.grad().data<float>(), want.data(), n))
          << m << " micro-steps: " << params[i].first;
    }
  }
}
