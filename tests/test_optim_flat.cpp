// tests/test_optim_flat.cpp — the fused AdamW over flat buffers (train/optim.h FlatParams) against
// the per-tensor reference on the same gradients: the same update bit for bit over five steps (with
// and without weight decay, a frozen parameter; with clipping bit for bit given the same clip
// factor, the fused f64 norm being more exact than the reference's f32 one), parameters and state
// as views that survive load_state, checkpoints and reassignment, gradients landing in the flat
// buffer (accumulation, zero_grad), and no pool allocation in a warm training step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include "core/allocator.h"
#include "core/threads.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "train/io/checkpoint.h"
#include "train/optim.h"
#include "train/io/safetensors.h"

using namespace ctx;

namespace {

// Two layers, an untied head, and an MLP matrix of 128 x 768 > 65536 elements (the backend's
// threshold for parallel kernels), so both the serial and the parallel reference paths are covered.
ModelConfig test_config() {
  ModelConfig c = preset_config("tiny");
  c.d_model = 128, c.n_heads = 4, c.n_layers = 2, c.d_ff = 768, c.context = 32;
  c.tie_embeddings = false;
  return c;
}

std::unique_ptr<nn::GPT> make_model(const ModelConfig& c, uint64_t seed = 3) {
  auto m = std::make_unique<nn::GPT>(c);
  m->init_weights(seed);
  m->train();
  return m;
}

std::pair<Tensor, Tensor> batch(uint64_t seed, int64_t B, int64_t T) {
  Rng rng(seed);
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) {
    x.data<int64_t>()[i] = (int64_t)rng.below(256);
    y.data<int64_t>()[i] = (int64_t)rng.below(256);
  }
  return {x, y};
}

// Distance in units in the last place between two floats (0: bit-identical; +0 and -0 are 0 apart).
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b)) return INT64_MAX;
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  int64_t la = ia < 0 ? (int64_t)INT32_MIN - ia : ia, lb = ib < 0 ? (int64_t)INT32_MIN - ib : ib;
  return la > lb ? la - lb : lb - la;
}

// Largest ulp distance between two f32 tensors of the same shape.
int64_t max_ulps(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  int64_t worst = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, ulps(a.data<float>()[i], b.data<float>()[i]));
  return worst;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Every tensor of two named lists (same names in the same order) within max_ulp; returns the worst.
// Undefined tensors (a gradient a parameter did not get) must be undefined in both.
int64_t compare_named(const std::vector<std::pair<std::string, Tensor>>& a,
                      const std::vector<std::pair<std::string, Tensor>>& b, int64_t max_ulp, const char* what) {
  EXPECT_EQ(a.size(), b.size());
  int64_t worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.defined(), b[i].second.defined()) << what << " " << a[i].first;
    if (!a[i].second.defined() || !b[i].second.defined()) continue;
    int64_t u = max_ulps(a[i].second, b[i].second);
    EXPECT_LE(u, max_ulp) << what << " " << a[i].first;
    worst = std::max(worst, u);
  }
  return worst;
}

// Largest |a - b| of two named lists relative to each tensor's largest |b|; returns the worst.
double compare_named_rel(const std::vector<std::pair<std::string, Tensor>>& a,
                         const std::vector<std::pair<std::string, Tensor>>& b, double rtol, const char* what) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    double diff = 0, scale = 1e-30;
    for (int64_t j = 0; j < b[i].second.numel(); ++j) {
      diff = std::max(diff, std::fabs(a[i].second.at(j) - b[i].second.at(j)));
      scale = std::max(scale, std::fabs(b[i].second.at(j)));
    }
    EXPECT_LE(diff / scale, rtol) << what << " " << a[i].first;
    worst = std::max(worst, diff / scale);
  }
  return worst;
}

// The global gradient norm summed exactly enough (f64, in order) to judge the others by.
double exact_grad_norm(const nn::GPT& m) {
  double s = 0;
  for (auto& [n, p] : m.named_parameters())
    if (p.grad().defined())
      for (int64_t i = 0; i < p.grad().numel(); ++i) s += p.grad().at(i) * p.grad().at(i);
  return std::sqrt(s);
}

std::vector<std::pair<std::string, Tensor>> param_tensors(const nn::GPT& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, p] : m.named_parameters()) out.emplace_back(n, p.data());
  return out;
}

std::vector<std::pair<std::string, Tensor>> grad_tensors(const nn::GPT& m) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (auto& [n, p] : m.named_parameters()) out.emplace_back(n, p.grad());
  return out;
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ctxlab_optim_flat_" + std::to_string(getpid()) + "_" + name))
      .string();
}

// Gives `to` bit-identical copies of `from`'s gradients, so that two optimizers are compared on
// the same input whatever the backward does (beyond two threads its bias-gradient reductions
// combine per-thread partial sums in arbitrary order).
void copy_grads(const nn::GPT& from, nn::GPT& to) {
  auto f = from.named_parameters(), t = to.named_parameters();
  for (size_t i = 0; i < f.size(); ++i)
    t[i].second.grad() = f[i].second.grad().defined() ? f[i].second.grad().clone() : Tensor();
}

// At most two threads while alive: for tests that compare two backward passes bit for bit
// (see copy_grads for why). Restores the previous count.
class AtMostTwoThreads {
 public:
  AtMostTwoThreads() : prev_(ctx::num_threads()) { ctx::set_num_threads(std::min(prev_, 2)); }
  ~AtMostTwoThreads() { ctx::set_num_threads(prev_); }

 private:
  int prev_;
};

struct Case {
  double weight_decay, clip;
  bool freeze;  // one parameter without gradient (requires_grad off): both must skip it
};

class FusedVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(FusedVsReference, FiveStepsSameUpdate) {
  const Case cs = GetParam();
  const ModelConfig cfg = test_config();
  auto ref = make_model(cfg), fast = make_model(cfg);
  if (cs.freeze)
    for (auto* m : {ref.get(), fast.get()}) m->named_parameters()[3].second.set_requires_grad(false);
  AdamWOptions o{3e-3, 0.9, 0.99, 1e-8, cs.weight_decay};
  o.fused = false;
  AdamW opt_ref(ref->named_parameters(), o);
  o.fused = true;
  AdamW opt_fast(fast->named_parameters(), o);
  ASSERT_FALSE(opt_ref.fused());
  ASSERT_TRUE(opt_fast.fused());
  compare_named(param_tensors(*ref), param_tensors(*fast), 0, "initial parameter");

  int64_t worst_p = 0, worst_s = 0;
  double worst_rel = 0;
  bool clipped = false;
  for (int step = 0; step < 5; ++step) {
    auto [x, y] = batch(100 + step, 3, cfg.context);
    fast->loss(x, y).backward();  // into the flat gradient buffer
    copy_grads(*fast, *ref);       // the reference gets the same bits, as its own tensors
    const double exact = exact_grad_norm(*fast);
    double lr = 3e-3 * (step + 1) / 5.0;
    double n_ref = clip_grad_norm(ref->named_parameters(), cs.clip);
    opt_ref.step(lr);
    double n_fast = opt_fast.clip_and_step(lr, cs.clip);
    clipped = clipped || (cs.clip > 0 && n_ref > cs.clip);
    // The fused norm is summed in f64 (fixed chunks, any thread count); the reference sums each
    // tensor in f32, good to a few 1e-6.
    EXPECT_NEAR(n_fast, exact, 1e-12 * exact) << "fused grad norm at step " << step;
    EXPECT_NEAR(n_ref, exact, 2e-5 * exact) << "reference grad norm at step " << step;
    opt_ref.zero_grad();
    opt_fast.zero_grad();
    if (cs.clip == 0) {
      // Without clipping the update is the reference's bit for bit.
      worst_p = std::max(worst_p, compare_named(param_tensors(*ref), param_tensors(*fast), 0, "parameter"));
      worst_s = std::max(worst_s, compare_named(opt_ref.state(), opt_fast.state(), 0, "state"));
    } else {
      // With clipping the two norms differ by the reference's f32 rounding (~1e-6 relative), and
      // so do the clip factors (FoldedClipIsTheReferenceScale shows that the same factor gives
      // the same bits): the moments follow the factor, the parameters hardly move.
      worst_rel = std::max(worst_rel, compare_named_rel(param_tensors(*ref), param_tensors(*fast), 5e-5, "parameter"));
      worst_rel = std::max(worst_rel, compare_named_rel(opt_ref.state(), opt_fast.state(), 5e-5, "state"));
    }
  }
  EXPECT_EQ(opt_ref.steps, 5);
  EXPECT_EQ(opt_fast.steps, 5);
  if (cs.clip > 0) {
    EXPECT_TRUE(clipped) << "the clip threshold must bite for this case to mean anything";
  }
  if (cs.freeze) {
    auto fp = fast->named_parameters()[3].second;
    auto init = make_model(cfg);
    EXPECT_TRUE(bit_equal(fp.data(), init->named_parameters()[3].second.data())) << "frozen parameter moved";
  }
  std::printf("worst parameter ulp %lld, worst state ulp %lld, worst relative difference %.3g\n", (long long)worst_p,
              (long long)worst_s, worst_rel);
}

INSTANTIATE_TEST_SUITE_P(OptimFlat, FusedVsReference,
                         ::testing::Values(Case{0.0, 0.0, false}, Case{0.1, 0.0, false}, Case{0.1, 0.05, false},
                                           Case{0.0, 0.05, false}, Case{0.1, 0.0, true}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.weight_decay > 0 ? "Decay" : "NoDecay") +
                                  (i.param.clip > 0 ? "Clip" : "NoClip") + (i.param.freeze ? "Frozen" : "");
                         });

// Clip folded into the update: given the same clip factor (the reference's norm), the fused
// step is the reference bit for bit — the only difference left is how the norm is summed.
TEST(OptimFlat, FoldedClipIsTheReferenceScale) {
  const ModelConfig cfg = test_config();
  auto ref = make_model(cfg), fast = make_model(cfg);
  AdamWOptions o{1e-3, 0.9, 0.99, 1e-8, 0.1};
  o.fused = false;
  AdamW opt_ref(ref->named_parameters(), o);
  o.fused = true;
  AdamW opt_fast(fast->named_parameters(), o);
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch(7 + step, 2, cfg.context);
    fast->loss(x, y).backward();
    copy_grads(*fast, *ref);
    const double n_ref = clip_grad_norm(ref->named_parameters(), 0.0);  // the norm only
    ASSERT_GT(n_ref, 0.05);
    clip_grad_norm(ref->named_parameters(), 0.05);
    opt_ref.step(1e-3);
    // The fused step reading gradients times the reference's clip factor.
    opt_fast.step_scaled(1e-3, 0.05 / (n_ref + 1e-6));
    opt_ref.zero_grad();
    opt_fast.zero_grad();
    compare_named(param_tensors(*ref), param_tensors(*fast), 0, "parameter");
    compare_named(opt_ref.state(), opt_fast.state(), 0, "state");
  }
}

TEST(OptimFlat, ParametersBecomeViewsWithNamesShapesValuesKept) {
  const ModelConfig cfg = test_config();
  auto m = make_model(cfg), init = make_model(cfg);
  auto before = m->named_parameters();
  AdamW opt(m->named_parameters(), AdamWOptions{});
  ASSERT_TRUE(opt.fused());
  const FlatParams& f = *opt.flat();
  auto after = m->named_parameters();
  ASSERT_EQ(after.size(), before.size());
  ASSERT_EQ(f.ranges.size(), after.size());
  int64_t total = 0;
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].first, before[i].first);
    EXPECT_EQ(after[i].second.impl(), before[i].second.impl()) << "the Variable itself is kept";
    EXPECT_TRUE(f.is_view(i)) << after[i].first;
    EXPECT_EQ(after[i].second.data().storage(), f.values.storage());
    EXPECT_EQ(after[i].second.data().offset() % 16, 0) << "ranges start on 64-byte boundaries";
    EXPECT_TRUE(bit_equal(after[i].second.data(), init->named_parameters()[i].second.data())) << after[i].first;
    total += after[i].second.data().numel();
  }
  EXPECT_GE(f.total, total);
  EXPECT_LT(f.total, total + 16 * (int64_t)after.size());
  // State: the checkpoint names, parameter shapes, views of two flat buffers.
  auto st = opt.state();
  ASSERT_EQ(st.size(), 2 * after.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(st[i].first, "exp_avg." + after[i].first);
    EXPECT_EQ(st[after.size() + i].first, "exp_avg_sq." + after[i].first);
    EXPECT_EQ(st[i].second.shape(), after[i].second.shape());
    EXPECT_EQ(st[i].second.storage(), st[0].second.storage());
    EXPECT_EQ(st[after.size() + i].second.storage(), st[after.size()].second.storage());
  }
  // The reference keeps separate tensors and leaves the parameters alone.
  auto r = make_model(cfg);
  AdamWOptions o;
  o.fused = false;
  AdamW opt_ref(r->named_parameters(), o);
  EXPECT_NE(r->named_parameters()[0].second.data().storage(), r->named_parameters()[1].second.data().storage());
}

TEST(OptimFlat, GradientsLandInTheFlatBufferAndAccumulate) {
  AtMostTwoThreads deterministic;
  const ModelConfig cfg = test_config();
  auto ref = make_model(cfg), fast = make_model(cfg);
  AdamW opt(fast->named_parameters(), AdamWOptions{});
  const FlatParams& f = *opt.flat();
  auto [x1, y1] = batch(1, 2, cfg.context);
  auto [x2, y2] = batch(2, 2, cfg.context);
  // Two micro-batches: the gradients sum (the reference adopts the first and adds the second;
  // the flat path copies the first into its slot and adds the second).
  for (auto* m : {ref.get(), fast.get()}) {
    m->loss(x1, y1).backward();
    m->loss(x2, y2).backward();
  }
  auto fp = fast->named_parameters();
  for (size_t i = 0; i < fp.size(); ++i) {
    EXPECT_TRUE(f.grad_is_view(i)) << fp[i].first;
    EXPECT_EQ(fp[i].second.impl()->grad_slot.storage(), f.grads.storage());
  }
  compare_named(grad_tensors(*ref), grad_tensors(*fast), 0, "accumulated gradient");
  // And the sum is the sum: g(b1) + g(b2) from separate passes.
  auto one = make_model(cfg), two = make_model(cfg);
  one->loss(x1, y1).backward();
  two->loss(x2, y2).backward();
  auto op = one->named_parameters(), tp = two->named_parameters();
  for (size_t i = 0; i < fp.size(); ++i) {
    Tensor s = Tensor::empty(op[i].second.shape());
    backend_of(s).binary(BinaryOp::Add, op[i].second.grad(), tp[i].second.grad(), s);
    EXPECT_TRUE(bit_equal(s, fp[i].second.grad())) << fp[i].first;
  }

  // zero_grad: every gradient is gone; the next backward starts from nothing (the slot's stale
  // contents are overwritten, not added to).
  opt.zero_grad();
  for (auto& [n, p] : fast->named_parameters()) {
    EXPECT_FALSE(p.grad().defined()) << n;
    EXPECT_TRUE(p.impl()->grad_slot.defined()) << n << ": the slot stays";
  }
  fast->loss(x2, y2).backward();
  compare_named(grad_tensors(*two), grad_tensors(*fast), 0, "gradient after zero_grad");
  // Module::zero_grad is the same thing.
  fast->zero_grad();
  for (auto& [n, p] : fast->named_parameters()) EXPECT_FALSE(p.grad().defined()) << n;
}

TEST(OptimFlat, ViewsSurviveLoadStateCheckpointsAndReassignment) {
  AtMostTwoThreads deterministic;
  const ModelConfig cfg = test_config();
  // Uninterrupted: 4 steps.
  auto a = make_model(cfg);
  AdamWOptions o{2e-3, 0.9, 0.99, 1e-8, 0.1};
  AdamW opt_a(a->named_parameters(), o);
  auto train_step = [&](nn::GPT& m, AdamW& opt, int step) {
    auto [x, y] = batch(50 + step, 2, cfg.context);
    m.loss(x, y).backward();
    opt.clip_and_step(2e-3, 1.0);
    opt.zero_grad();
  };
  for (int s = 0; s < 4; ++s) train_step(*a, opt_a, s);

  // Interrupted after 2: checkpoint + optimizer state on disk, a fresh model and optimizer.
  auto b = make_model(cfg);
  AdamW opt_b(b->named_parameters(), o);
  for (int s = 0; s < 2; ++s) train_step(*b, opt_b, s);
  const std::string mp = temp_path("model.safetensors"), op = temp_path("optim.safetensors");
  save_checkpoint(mp, *b, 2);
  save_safetensors(op, opt_b.state(), {{"optimizer_steps", std::to_string(opt_b.steps)}});
  LoadedModel lm = load_checkpoint(mp);
  lm.model->train();
  AdamW opt_c(lm.model->named_parameters(), o);
  SafetensorsFile sf = load_safetensors(op);
  opt_c.load_state(sf.tensors, op);
  opt_c.steps = std::stoll(sf.metadata.at("optimizer_steps"));
  const FlatParams& fc = *opt_c.flat();
  for (size_t i = 0; i < fc.ranges.size(); ++i) EXPECT_TRUE(fc.is_view(i)) << fc.ranges[i].name;
  auto st = opt_c.state();
  for (auto& [n, t] : st) EXPECT_EQ(t.storage(), (n.rfind("exp_avg_sq.", 0) == 0 ? st.back() : st.front()).second.storage()) << n;
  for (int s = 2; s < 4; ++s) train_step(*lm.model, opt_c, s);
  compare_named(param_tensors(*a), param_tensors(*lm.model), 0, "resumed parameter");
  compare_named(opt_a.state(), opt_c.state(), 0, "resumed state");

  // Copying a checkpoint into the live model (as load_checkpoint does) keeps the views.
  auto live = make_model(cfg);
  AdamW opt_live(live->named_parameters(), o);
  SafetensorsFile mf = load_safetensors(mp);
  for (auto& [n, p] : live->named_parameters()) p.data().copy_from(mf.tensors.at(n));
  for (size_t i = 0; i < opt_live.flat()->ranges.size(); ++i) EXPECT_TRUE(opt_live.flat()->is_view(i));

  // A parameter replaced by a new tensor is taken back into the flat buffer at the next step,
  // with its new values, and trains as the reference does.
  auto r = make_model(cfg), f = make_model(cfg);
  AdamWOptions ro = o;
  ro.fused = false;
  AdamW opt_r(r->named_parameters(), ro);
  AdamW opt_f(f->named_parameters(), o);
  for (auto* m : {r.get(), f.get()}) {
    Variable w = m->named_parameters()[1].second;
    Tensor t = w.data().clone();
    backend_of(t).unary(UnaryOp::Scale, t, t, 0.5);
    w.data() = t;
  }
  EXPECT_FALSE(opt_f.flat()->is_view(1));
  for (int s = 0; s < 2; ++s) {
    auto [x, y] = batch(70 + s, 2, cfg.context);
    f->loss(x, y).backward();
    copy_grads(*f, *r);
    opt_r.step(1e-3);
    opt_f.step(1e-3);
    opt_r.zero_grad();
    opt_f.zero_grad();
  }
  EXPECT_TRUE(opt_f.flat()->is_view(1));
  compare_named(param_tensors(*r), param_tensors(*f), 0, "parameter after reassignment");
  std::filesystem::remove(mp);
  std::filesystem::remove(op);
}

TEST(OptimFlat, UnsupportedParametersFallBackToTheReference) {
  std::string why;
  nn::NamedParams mixed{{"a", Variable(Tensor::zeros({4}), true)}, {"b", Variable(Tensor::zeros({4}, DType::F64), true)}};
  EXPECT_FALSE(FlatParams::supported(mixed, &why));
  EXPECT_NE(why.find("'b'"), std::string::npos) << why;
  Variable shared(Tensor::zeros({4}), true);
  nn::NamedParams twice{{"a", shared}, {"b", shared}};
  EXPECT_FALSE(FlatParams::supported(twice, &why));
  EXPECT_NE(why.find("twice"), std::string::npos) << why;
  AdamW opt(twice, AdamWOptions{});
  EXPECT_FALSE(opt.fused());
  // f64 parameters are flattened too.
  nn::NamedParams f64{{"w", Variable(Tensor::full({3, 5}, 1.0, DType::F64), true)}};
  AdamW o64(f64, AdamWOptions{});
  EXPECT_TRUE(o64.fused());
  f64[0].second.grad() = Tensor::full({3, 5}, 0.5, DType::F64);  // set by hand: copied into the slot
  o64.step(0.1);
  EXPECT_TRUE(o64.flat()->grad_is_view(0));
  EXPECT_LT(f64[0].second.data().at(0), 1.0);
}

// After two warm-up steps a full training step (forward, backward, clip + AdamW, zero_grad)
// gets every buffer from the pool's free lists, and the optimizer part asks the pool for nothing.
TEST(OptimFlat, WarmStepMakesNoSystemAllocation) {
  const ModelConfig cfg = test_config();
  auto m = make_model(cfg);
  AdamW opt(m->named_parameters(), AdamWOptions{1e-3, 0.9, 0.99, 1e-8, 0.1});
  auto [x, y] = batch(5, 2, cfg.context);
  auto& pool = BufferPool::host();
  for (int s = 0; s < 4; ++s) {
    auto s0 = pool.stats();
    Variable loss = m->loss(x, y);
    loss.backward();
    auto s1 = pool.stats();
    opt.clip_and_step(1e-3, 1.0);
    opt.zero_grad();
    auto s2 = pool.stats();
    if (s >= 2) {
      EXPECT_EQ(s2.system_allocs, s0.system_allocs) << "warm step " << s << " reached the system allocator";
      EXPECT_EQ(s2.requests, s1.requests) << "the optimizer step allocated a tensor";
      EXPECT_GT(s1.requests, s0.requests);
    }
  }
}

}  // namespace
