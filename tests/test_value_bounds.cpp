// tests/test_value_bounds.cpp — the host's bounds on parameters that ask for one, kept through
// AdamW's updates without reading the values (train/value_bounds.h; FIRE's L_multiplier decides
// its distance table from it on a device, posenc/fire.cpp): every value the parameter takes lies
// in the published bound, for any gradients (adversarial sequences, missing gradients, weight
// decay, both AdamW paths, anchors from fresh and from used moments); the bound is not vacuous
// (within 1.25x of a constant gradient's actual drift with betas 0.9 / 0.95); a write by anyone
// else retires it until the next anchor; an anchor on state without a bound promises nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "train/optim.h"
#include "train/value_bounds.h"

namespace {
using namespace ctx;

// One tracked parameter (a per-head vector [5], or a matrix [1, 5] that takes weight decay).
nn::NamedParams tracked_param(bool decays) {
  Variable p(decays ? Tensor::full({1, 5}, 0.5) : Tensor::full({5}, 0.5), true);
  Tensor& d = p.data();
  // values from -0.3 to 0.5; the decaying matrix's 5, -6, 7, -8, 9, where the decay (lr wd |p|)
  // outweighs a step's move: the bound must shrink with it on both sides, yet keep a value a step
  // without a gradient leaves where it was
  for (int64_t i = 0; i < 5; ++i)
    d.data<float>()[i] = decays ? (5.f + (float)i) * (i % 2 ? -1.f : 1.f) : 0.2f * (float)i - 0.3f;
  p.impl()->wants_value_bound = true;
  return {{decays ? "blocks.0.mlp.fc.weight" : "blocks.0.attn.pe.L_multiplier", p}};
}

// gradient sequence `kind` at step t (element i), drawn from rng where random
using Sequence = std::function<double(int64_t t, int64_t i, Rng& rng)>;
const std::vector<std::pair<std::string, Sequence>>& sequences() {
  static const std::vector<std::pair<std::string, Sequence>> s = {
      {"normal, scale 10^[-4, 2]",
       [](int64_t, int64_t, Rng& r) { return r.normal() * std::pow(10.0, -4.0 + 6.0 * r.uniform()); }},
      {"constant", [](int64_t, int64_t i, Rng&) { return 0.5 + 0.1 * (double)i; }},
      {"alternating", [](int64_t t, int64_t, Rng&) { return t % 2 ? 1.0 : -1.0; }},
      // tiny, then one step 10^6 larger: m / sqrt(v) jumps to (1 - beta1) / sqrt(1 - beta2)
      {"burst", [](int64_t t, int64_t, Rng&) { return t % 17 == 16 ? 1e3 : 1e-3; }},
      // geometric growth: the Cauchy-Schwarz worst case (g_i ~ (beta1 / beta2)^-i)
      {"growing", [](int64_t t, int64_t, Rng&) { return std::pow(1.08, (double)t); }},
      {"sparse (no gradient every third step)", [](int64_t, int64_t, Rng& r) { return r.normal(); }},
  };
  return s;
}

// Every value after every step lies in the bound published on the leaf.
TEST(AdamWValueBound, HoldsForEveryGradientSequence) {
  struct Betas { double b1, b2; };
  for (const Betas b : {Betas{0.9, 0.999}, Betas{0.9, 0.95}, Betas{0.5, 0.6}, Betas{0.95, 0.9}})
    for (const bool fused : {true, false})
      for (const bool decays : {false, true})
        for (const auto& [name, seq] : sequences()) {
          SCOPED_TRACE(name + " betas " + std::to_string(b.b1) + " / " + std::to_string(b.b2) +
                       (fused ? " fused" : " per-tensor") + (decays ? " decaying" : ""));
          nn::NamedParams params = tracked_param(decays);
          Variable& p = params[0].second;
          AdamW opt(params, AdamWOptions{1e-3, b.b1, b.b2, 1e-8, 0.5, fused});
          ASSERT_EQ(opt.fused(), fused);
          opt.anchor_value_bounds();
          ASSERT_EQ(opt.value_bounds().kept(), 1);
          Rng rng(7);
          double lr = 0.01;
          for (int64_t t = 0; t < 80; ++t) {
            if (t == 40) opt.anchor_value_bounds();  // from moments that hold something
            const bool sparse = name.rfind("sparse", 0) == 0 && t % 3 == 2;
            if (!sparse) {
              Tensor g = Tensor::empty(p.shape());
              for (int64_t i = 0; i < 5; ++i) g.data<float>()[i] = (float)seq(t, i, rng);
              p.grad() = g;
            }
            lr = t < 60 ? 0.01 : 0.05;  // a change of lr too
            opt.step(lr);
            opt.zero_grad();
            const ValueBound* vb = known_value_bound(*p.impl());
            ASSERT_NE(vb, nullptr) << "step " << t;
            for (int64_t i = 0; i < 5; ++i) {
              const double x = p.data().at(i);
              ASSERT_GE(x, vb->lo) << "step " << t << " element " << i;
              ASSERT_LE(x, vb->hi) << "step " << t << " element " << i;
            }
          }
        }
}

// A constant gradient moves each element by lr a step (m / sqrt(v) = 1 once bias-corrected); the
// bound, which must also hold for the worst sequences, allows at most 1.165 lr a step with betas
// 0.9 / 0.95: within 1.25x of the actual drift.
TEST(AdamWValueBound, ConstantGradientIsBoundedTightly) {
  nn::NamedParams params = tracked_param(false);
  Variable& p = params[0].second;
  const double p0 = p.data().at(0);
  AdamW opt(params, AdamWOptions{1e-3, 0.9, 0.95, 1e-8, 0.0});
  opt.anchor_value_bounds();
  for (int t = 0; t < 50; ++t) {
    p.grad() = Tensor::full({5}, 2.0);
    opt.step(1e-3);
    opt.zero_grad();
  }
  const ValueBound* vb = known_value_bound(*p.impl());
  ASSERT_NE(vb, nullptr);
  const double drift = p0 - p.data().at(0);  // element 0 holds the smallest value: lo's
  EXPECT_NEAR(drift, 50 * 1e-3, 1e-5);
  EXPECT_LE(p0 - vb->lo, 1.25 * drift) << "lo " << vb->lo;
  EXPECT_GE(p0 - vb->lo, drift);
}

// A write by anyone but the optimizer (a checkpoint load, a user's copy) retires the bound: the
// leaf promises nothing, the optimizer stops keeping it, until the next anchor.
TEST(AdamWValueBound, AnotherWriteRetiresItUntilTheNextAnchor) {
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "per-tensor");
    nn::NamedParams params = tracked_param(false);
    Variable& p = params[0].second;
    AdamW opt(params, AdamWOptions{1e-3, 0.9, 0.99, 1e-8, 0.0, fused});
    EXPECT_EQ(opt.value_bounds().kept(), 0) << "nothing before the first anchor";
    opt.anchor_value_bounds();
    const ValueBound* vb = known_value_bound(*p.impl());
    ASSERT_NE(vb, nullptr);
    EXPECT_FLOAT_EQ(vb->lo, -0.3f);
    EXPECT_FLOAT_EQ(vb->hi, 0.5f);
    p.grad() = Tensor::full({5}, 1.0);
    opt.step(1e-3);
    ASSERT_NE(known_value_bound(*p.impl()), nullptr);
    p.data().copy_from(Tensor::full({5}, 3.0));  // outside any bound kept so far
    EXPECT_EQ(known_value_bound(*p.impl()), nullptr);
    opt.step(1e-3);
    EXPECT_EQ(opt.value_bounds().kept(), 0);
    EXPECT_EQ(known_value_bound(*p.impl()), nullptr);
    opt.anchor_value_bounds();
    ASSERT_NE(known_value_bound(*p.impl()), nullptr);
    EXPECT_LE(known_value_bound(*p.impl())->lo, p.data().at(0));
    EXPECT_GE(known_value_bound(*p.impl())->lo, 2.9);
  }
}

// Moments with no bound on m / sqrt(v) (v = 0 where m is not), or a value that is not finite:
// the anchor promises nothing (the decisions that need a bound take their safe path).
TEST(AdamWValueBound, AnchorOnUnboundedStatePromisesNothing) {
  nn::NamedParams params = tracked_param(false);
  Variable& p = params[0].second;
  AdamW opt(params, AdamWOptions{});
  std::map<std::string, Tensor> s{{"exp_avg.blocks.0.attn.pe.L_multiplier", Tensor::full({5}, 0.1)},
                                  {"exp_avg_sq.blocks.0.attn.pe.L_multiplier", Tensor::full({5}, 0.0)}};
  opt.load_state(s, "test");
  opt.anchor_value_bounds();
  EXPECT_EQ(opt.value_bounds().kept(), 0);
  EXPECT_EQ(known_value_bound(*p.impl()), nullptr);
  s["exp_avg.blocks.0.attn.pe.L_multiplier"] = Tensor::full({5}, 0.0);  // m = 0: nothing to bound
  opt.load_state(s, "test");
  opt.anchor_value_bounds();
  EXPECT_EQ(opt.value_bounds().kept(), 1);
  p.data().data<float>()[2] = std::nanf("");
  opt.anchor_value_bounds();
  EXPECT_EQ(opt.value_bounds().kept(), 0);
}

// Moments loaded from elsewhere may hold a ratio |m| / sqrt(v) no AdamW run from zero reaches
// (100 here): the bound after k steps shrinks from it, but a parameter whose first step had no
// gradient has seen fewer updates than steps, so the bound takes the largest of R_1 .. R_k.
TEST(AdamWValueBound, HoldsFromLoadedMomentsWhenAStepHadNoGradient) {
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "per-tensor");
    nn::NamedParams params = tracked_param(false);
    Variable& p = params[0].second;
    AdamW opt(params, AdamWOptions{1e-3, 0.9, 0.999, 1e-8, 0.0, fused});
    std::map<std::string, Tensor> s{{"exp_avg.blocks.0.attn.pe.L_multiplier", Tensor::full({5}, 1.0)},
                                    {"exp_avg_sq.blocks.0.attn.pe.L_multiplier", Tensor::full({5}, 1e-4)}};
    opt.load_state(s, "test");
    opt.anchor_value_bounds();
    opt.step(1e-9);  // no gradient: nothing moves, the step counts (its lr: no widening to spare)
    p.grad() = Tensor::full({5}, 1e-12);
    opt.step(0.1);  // the moments' first update: m / sqrt(v) = 0.9 / sqrt(0.999) 100
    const ValueBound* vb = known_value_bound(*p.impl());
    ASSERT_NE(vb, nullptr);
    for (int64_t i = 0; i < 5; ++i) {
      EXPECT_GE(p.data().at(i), vb->lo);
      EXPECT_LE(p.data().at(i), vb->hi);
    }
  }
}

// A fresh optimizer carries a bound published on the leaf (Module::to's, after an upload) across
// its flat buffer's copy of the values, its moments being zero: bounded from the first step
// without a read. A state loaded into the moments afterwards retires it (the ratio it assumed no
// longer holds) until the next anchor.
TEST(AdamWValueBound, AFreshOptimizerCarriesAPublishedBoundUntilItsMomentsAreLoaded) {
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "per-tensor");
    nn::NamedParams params = tracked_param(false);
    Variable& p = params[0].second;
    publish_value_bound(*p.impl(), -0.3, 0.5);
    AdamW opt(params, AdamWOptions{1e-3, 0.9, 0.99, 1e-8, 0.0, fused});
    EXPECT_EQ(opt.value_bounds().kept(), 1);
    const ValueBound* vb = known_value_bound(*p.impl());
    ASSERT_NE(vb, nullptr) << "published again on the optimizer's copy of the values";
    EXPECT_EQ(vb->lo, -0.3);
    EXPECT_EQ(vb->hi, 0.5);
    p.grad() = Tensor::full({5}, 1.0);
    opt.step(1e-3);
    ASSERT_NE(known_value_bound(*p.impl()), nullptr);
    EXPECT_LE(known_value_bound(*p.impl())->lo, p.data().at(0));
    std::map<std::string, Tensor> s{{"exp_avg.blocks.0.attn.pe.L_multiplier", Tensor::full({5}, 1.0)},
                                    {"exp_avg_sq.blocks.0.attn.pe.L_multiplier", Tensor::full({5}, 1e-6)}};
    opt.load_state(s, "test");
    p.grad() = Tensor::full({5}, 1e-9);
    opt.step(1e-3);  // m / sqrt(v) ~ 1000 at this step: far past the bound a fresh run allows
    EXPECT_EQ(opt.value_bounds().kept(), 0);
    EXPECT_EQ(known_value_bound(*p.impl()), nullptr);
    opt.anchor_value_bounds();
    EXPECT_EQ(opt.value_bounds().kept(), 1);
  }
}

// Only the leaves that ask are tracked; the others cost nothing and promise nothing.
TEST(AdamWValueBound, OnlyLeavesThatAskAreTracked) {
  nn::NamedParams params = tracked_param(false);
  params.emplace_back("w", Variable(Tensor::full({3}, 1.0), true));
  AdamW opt(params, AdamWOptions{});
  opt.anchor_value_bounds();
  EXPECT_EQ(opt.value_bounds().kept(), 1);
  EXPECT_NE(known_value_bound(*params[0].second.impl()), nullptr);
  EXPECT_EQ(known_value_bound(*params[1].second.impl()), nullptr);
}

}  // namespace
