// tests/test_posenc_survey.cpp — the survey's encodings (POSENC_SPEC §5: rnn, floater,
// complex-order) and their ops (autograd/ops_position_gen.h): f64 finite-difference gradchecks of
// gru_sequence, ode_positions and complex_order_embed (every input); each is one graph node;
// properties: complex-order with all frequencies 0 is the token embedding, FLOATER with zero
// dynamics gives p0 at every position and with constant dynamics a straight line, FLOATER at an
// offset equals the rows of the longer integration, the GRU's first state against the closed
// form; the encodings' key errors (one line naming posenc.<key>), rnn's pos0 refusal, parameter
// names / shapes and the spec's initialisation.
// (The model-level gradchecks are the posenc_gradcheck_{rnn,floater,complex_order} CLI tests;
// torch.nn.GRU and the reference: pytorch_parity / pytorch_selftest_ref.) Runs in about a second.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "autograd/gradcheck.h"
#include "autograd/kernels/gru_cell.h"
#include "autograd/kernels/ode_rk4.h"
#include "autograd/ops_position_gen.h"
#include "core/precision.h"
#include "core/team.h"
#include "core/threads.h"
#include "core/rng.h"
#include "nn/gpt.h"

using namespace ctx;
using ctx::testing_util::expect_error;

namespace {

using testing_util::randn;

Tensor ids(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> v((size_t)(B * T));
  for (auto& x : v) x = (int32_t)rng.below((uint64_t)V);
  return Tensor::from_vector<int32_t>(v, {B, T});
}

struct SingleThread {
  int saved = ctx::num_threads();
  SingleThread() { ctx::set_num_threads(1); }
  ~SingleThread() { ctx::set_num_threads(saved); }
};

void expect_pass(const GradcheckResult& r, size_t n_inputs) {
  EXPECT_TRUE(r.pass) << r.summary();
  EXPECT_EQ(r.tensors.size(), n_inputs) << r.summary();
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.numel(), b.numel());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.at(i) - b.at(i)));
  return m;
}

OdeSpec ode(int64_t n, double dt, int64_t substeps) {
  OdeSpec s;
  s.n = n;
  s.dt = dt;
  s.substeps = substeps;
  return s;
}

ModelConfig tiny(const nlohmann::json& posenc) {
  ModelConfig c = testing_util::two_head_cfg(11, 8, 1, 16, 8, posenc);
  return c;
}

// Fused against composed: every output / gradient within 1e-12 (f64) or 2e-5 (f32) of the
// reference, relative to its largest element (at least 1).
void expect_same_outputs(const std::vector<Tensor>& fused, const std::vector<Tensor>& ref, DType dt,
                         const std::string& what) {
  const double tol = dt == DType::F64 ? 1e-12 : 2e-5;
  ASSERT_EQ(fused.size(), ref.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    const Tensor x = fused[i].to(DType::F64), y = ref[i].to(DType::F64);
    double worst = 0, scale = 0;
    for (int64_t e = 0; e < x.numel(); ++e) {
      worst = std::max(worst, std::abs(x.data<double>()[e] - y.data<double>()[e]));
      scale = std::max(scale, std::abs(y.data<double>()[e]));
    }
    EXPECT_LE(worst, tol * std::max(scale, 1.0)) << what << " " << dtype_name(dt) << " output/grad #" << i;
  }
}

}  // namespace

// ---- gradchecks of the ops (f64, every input) ------------------------------------------------
TEST(PosencSurvey, GradcheckGruSequence) {
  SingleThread one;
  const int64_t B = 2, T = 5, In = 3, H = 4;
  GradFn f = [](const std::vector<Variable>& v) { return gru_sequence(v[0], v[1], v[2], v[3], v[4]); };
  expect_pass(gradcheck(f, {randn({B, T, In}, 1, 1.0), randn({3 * H, In}, 2), randn({3 * H, H}, 3),
                            randn({3 * H}, 4), randn({3 * H}, 5)},
                        {"x", "weight_ih", "weight_hh", "bias_ih", "bias_hh"}),
              5);
}

// The fused GRU (the gru_cell extension kernels, the default) against the composed reference loop
// (CTXLAB_FUSED_GRU=0): the same output and the same gradient of every input, f64 and f32; the
// composed loop is gradchecked too.
TEST(PosencSurvey, FusedGruEqualsTheComposedLoop) {
  ASSERT_TRUE(kernels::gru_cell_forward.has(Device::CPU));  // else both runs would be the composed loop
  const int64_t B = 3, T = 7, In = 5, H = 6;
  for (DType dt : {DType::F64, DType::F32}) {
    std::vector<Tensor> ins = {randn({B, T, In}, 1, 1.0), randn({3 * H, In}, 2), randn({3 * H, H}, 3),
                               randn({3 * H}, 4), randn({3 * H}, 5)};
    if (dt == DType::F32)
      for (auto& t : ins) t = t.to(DType::F32);
    const Tensor gy = randn({B, T, H}, 6, 1.0).to(dt);
    auto run = [&](bool fused) {
      set_fast_path(FastPath::GruCell, fused);
      std::vector<Variable> v;
      for (auto& t : ins) v.emplace_back(t.clone(), true);
      Variable h = gru_sequence(v[0], v[1], v[2], v[3], v[4]);
      h.backward(gy);
      std::vector<Tensor> out = {h.data()};
      for (auto& x : v) out.push_back(x.grad());
      return out;
    };
    const auto a = run(true), b = run(false);
    reset_fast_path(FastPath::GruCell);
    expect_same_outputs(a, b, dt, "gru");
  }
  SingleThread one;
  set_fast_path(FastPath::GruCell, false);
  GradFn f = [](const std::vector<Variable>& v) { return gru_sequence(v[0], v[1], v[2], v[3], v[4]); };
  expect_pass(gradcheck(f, {randn({2, 4, 3}, 1, 1.0), randn({12, 3}, 2), randn({12, 4}, 3), randn({12}, 4),
                            randn({12}, 5)},
                        {"x", "weight_ih", "weight_hh", "bias_ih", "bias_hh"}),
              5);
  reset_fast_path(FastPath::GruCell);
}

// One gru_sequence forward and backward (output and every input's gradient) with `threads` threads,
// counting the team regions (core/team.h) the two directions started.
struct GruRun {
  std::vector<Tensor> out;
  int64_t regions_forward = 0, regions_backward = 0;
};
GruRun run_gru(const std::vector<Tensor>& ins, const Tensor& gy, int threads) {
  const int saved = num_threads();
  set_num_threads(threads);
  std::vector<Variable> v;
  for (auto& t : ins) v.emplace_back(t.clone(), true);
  GruRun r;
  const int64_t r0 = team_regions_started();
  Variable h = gru_sequence(v[0], v[1], v[2], v[3], v[4]);
  const int64_t r1 = team_regions_started();
  h.backward(gy);
  r.regions_forward = r1 - r0;
  r.regions_backward = team_regions_started() - r1;
  set_num_threads(saved);
  r.out = {h.data()};
  for (auto& x : v) r.out.push_back(x.grad());
  return r;
}
std::vector<Tensor> gru_inputs(int64_t B, int64_t T, int64_t In, int64_t H, DType dt) {
  std::vector<Tensor> ins = {randn({B, T, In}, 1, 1.0), randn({3 * H, In}, 2, 0.1), randn({3 * H, H}, 3, 0.1),
                             randn({3 * H}, 4), randn({3 * H}, 5)};
  for (auto& t : ins) t = t.to(dt);
  return ins;
}

// The CPU runs the recurrence as one parallel region per sequence each way (the sequence kernels,
// a barrier a step), not a fork per step; the per-step loop (CTXLAB_FUSED_GRU=0) starts none. And
// its bits do not depend on the thread count: 1, 2 and 3 threads, f32 (fp32 and bf16 products)
// and f64. B 66 and H 88 cut partial row tiles (of 4 and 8 rows) and a partial block of units
// (16 each), and a step's work, 66 x 264 x 88 / 16 multiply-add vectors, passes the fork threshold
// (core/cpu/parallel.h); B 3 does not (one thread however many are asked).
TEST(PosencSurvey, GruIsOneRegionPerSequenceAndItsBitsDoNotDependOnTheThreadCount) {
  ASSERT_TRUE(kernels::gru_sequence_forward.has(Device::CPU) && kernels::gru_sequence_backward.has(Device::CPU));
  const int64_t T = 6, In = 5, H = 88;
  for (DType dt : {DType::F32, DType::F64})
    for (Precision p : {Precision::FP32, Precision::BF16}) {
      if (dt == DType::F64 && p == Precision::BF16) continue;  // (f64 products are never rounded)
      PrecisionScope scope(p);
      const std::string what = std::string(dtype_name(dt)) + " " + precision_name(p);
      for (int64_t B : {66, 3}) {
        const auto ins = gru_inputs(B, T, In, H, dt);
        const Tensor gy = randn({B, T, H}, 6, 1.0).to(dt);
        const GruRun one = run_gru(ins, gy, 1);
        EXPECT_EQ(one.regions_forward + one.regions_backward, 0) << what;
        for (int threads : {2, 3}) {
          const GruRun many = run_gru(ins, gy, threads);
          EXPECT_EQ(many.regions_forward, B == 66 ? 1 : 0) << what << " threads " << threads;
          EXPECT_EQ(many.regions_backward, B == 66 ? 1 : 0) << what << " threads " << threads;
          for (size_t i = 0; i < one.out.size(); ++i)
            EXPECT_TRUE(testing_util::same_bits(many.out[i], one.out[i]))
                << what << " B " << B << " threads " << threads << " output/grad #" << i;
        }
      }
    }
  // The per-step loop: a fork per GEMM where it pays, never a team.
  set_fast_path(FastPath::GruCell, false);
  const GruRun composed = run_gru(gru_inputs(66, T, In, H, DType::F32), randn({66, T, H}, 6, 1.0).to(DType::F32), 2);
  reset_fast_path(FastPath::GruCell);
  EXPECT_EQ(composed.regions_forward + composed.regions_backward, 0);
}

// The sequence kernels against the composed loop at shapes with several blocks of units, partial
// tiles and a team of 2 (FusedGruEqualsTheComposedLoop's shapes are one block on one thread); under
// bf16 products the two round different sums to bf16, so only near each other (and away from fp32).
TEST(PosencSurvey, GruSequenceKernelsEqualTheComposedLoop) {
  const int64_t B = 66, T = 6, In = 5, H = 88;
  for (DType dt : {DType::F64, DType::F32}) {
    const auto ins = gru_inputs(B, T, In, H, dt);
    const Tensor gy = randn({B, T, H}, 6, 1.0).to(dt);
    set_fast_path(FastPath::GruCell, true);
    const GruRun a = run_gru(ins, gy, 2);
    set_fast_path(FastPath::GruCell, false);
    const GruRun b = run_gru(ins, gy, 2);
    reset_fast_path(FastPath::GruCell);
    EXPECT_EQ(a.regions_forward, 1);
    expect_same_outputs(a.out, b.out, dt, "gru sequence kernels");
  }
  const auto ins = gru_inputs(B, T, In, H, DType::F32);
  const Tensor gy = randn({B, T, H}, 6, 1.0).to(DType::F32);
  const GruRun fp32 = run_gru(ins, gy, 2);
  PrecisionScope scope(Precision::BF16);
  const GruRun bf16 = run_gru(ins, gy, 2);
  set_fast_path(FastPath::GruCell, false);
  const GruRun composed = run_gru(ins, gy, 2);
  reset_fast_path(FastPath::GruCell);
  for (size_t i = 0; i < fp32.out.size(); ++i)
    EXPECT_LE(testing_util::rel_err(bf16.out[i], composed.out[i]), 0.25 * testing_util::rel_err(fp32.out[i], composed.out[i])) << "bf16 #" << i;
}

// The fused RK4 (the ode_rk4 extension kernels, the CPU default) against the composed reference loop
// (CTXLAB_FUSED_ODE=0): the same positions and the same gradient of every input, f64 and f32,
// with substeps 1 and 3; and the fused op gradchecked.
TEST(PosencSurvey, FusedOdeEqualsTheComposedLoop) {
  ASSERT_TRUE(kernels::ode_rk4_forward.has(Device::CPU));  // else both runs would be the composed loop
  const int64_t D = 6, F = 4;
  for (DType dt : {DType::F64, DType::F32})
    for (const OdeSpec& sp : {ode(9, 0.3, 1), ode(5, 0.2, 3)}) {
      std::vector<Tensor> ins = {randn({D}, 1), randn({F, D}, 2, 1.0), randn({F}, 3), randn({F}, 4, 1.0),
                                 randn({D, F}, 5, 1.0), randn({D}, 6)};
      for (auto& t : ins) t = t.to(dt);
      const Tensor gy = randn({sp.n, D}, 7, 1.0).to(dt);
      auto run = [&](bool fused) {
        set_fast_path(FastPath::OdeRk4, fused);
        std::vector<Variable> v;
        for (auto& t : ins) v.emplace_back(t.clone(), true);
        Variable P = ode_positions(v[0], v[1], v[2], v[3], v[4], v[5], sp);
        P.backward(gy);
        std::vector<Tensor> out = {P.data()};
        for (auto& x : v) out.push_back(x.grad());
        return out;
      };
      const auto a = run(true), b = run(false);
      reset_fast_path(FastPath::OdeRk4);
      expect_same_outputs(a, b, dt, "ode substeps " + std::to_string(sp.substeps));
    }
}

TEST(PosencSurvey, GradcheckOdePositions) {
  SingleThread one;
  const int64_t D = 4, F = 3;
  for (const OdeSpec& s : {ode(5, 0.3, 2), ode(4, 0.5, 1), ode(1, 0.1, 3)}) {
    GradFn f = [s](const std::vector<Variable>& v) {
      return ode_positions(v[0], v[1], v[2], v[3], v[4], v[5], s);
    };
    expect_pass(gradcheck(f, {randn({D}, 1), randn({F, D}, 2, 1.0), randn({F}, 3), randn({F}, 4, 1.0),
                              randn({D, F}, 5, 1.0), randn({D}, 6)},
                          {"p0", "fc.weight", "fc.bias", "time", "proj.weight", "proj.bias"}),
                6);
  }
}

TEST(PosencSurvey, GradcheckComplexOrderEmbed) {
  SingleThread one;
  const int64_t V = 7, D = 6;
  const Tensor tok = ids(2, 5, V, 3);
  for (int64_t pos0 : {0, 3}) {
    GradFn f = [&](const std::vector<Variable>& v) { return complex_order_embed(v[0], v[1], tok, pos0); };
    expect_pass(gradcheck(f, {randn({V, D}, 1), randn({V, D / 2}, 2)}, {"wte", "freq"}), 2);
  }
}

// The fused complex-order rotation (Fused::Rope, the default) against its composed twin
// (complex_order_embed_composed: what runs where use_fused(FastPath::Rope) says no, e.g. a backend
// without rope_rotate, instead of throwing): the same output and the same gradient of both inputs,
// f64 and f32; the switch routes complex_order_embed to the twin; the twin gradchecked.
TEST(PosencSurvey, FusedComplexOrderEqualsTheComposedTwin) {
  ASSERT_TRUE(backend(Device::CPU).has(Fused::Rope));  // else both runs would be the composed twin
  const int64_t V = 7, D = 6;
  const Tensor tok = ids(3, 5, V, 4);
  for (DType dt : {DType::F64, DType::F32})
    for (int64_t pos0 : {0, 11}) {
      const Tensor w = randn({V, D}, 1, 1.0).to(dt), fr = randn({V, D / 2}, 2).to(dt);
      const Tensor gy = randn({3, 5, D}, 3, 1.0).to(dt);
      auto run = [&](bool composed, bool switched_off) {
        if (switched_off) set_fast_path(FastPath::Rope, false);
        Variable vw(w.clone(), true), vf(fr.clone(), true);
        Variable e = composed ? complex_order_embed_composed(vw, vf, tok, pos0)
                              : complex_order_embed(vw, vf, tok, pos0);
        reset_fast_path(FastPath::Rope);
        e.backward(gy);
        EXPECT_EQ(e.op_name() == "complex_order_embed", !composed && !switched_off) << e.op_name();
        return std::vector<Tensor>{e.data(), vw.grad(), vf.grad()};
      };
      const auto fused = run(false, false), twin = run(true, false), off = run(false, true);
      expect_same_outputs(fused, twin, dt, "complex_order pos0 " + std::to_string(pos0));
      for (size_t i = 0; i < twin.size(); ++i)
        EXPECT_EQ(max_abs_diff(off[i], twin[i]), 0.0) << "the switched-off op is not the twin, #" << i;
    }
  SingleThread one;
  for (int64_t pos0 : {0, 3}) {
    GradFn f = [&](const std::vector<Variable>& v) { return complex_order_embed_composed(v[0], v[1], tok, pos0); };
    expect_pass(gradcheck(f, {randn({V, D}, 1), randn({V, D / 2}, 2)}, {"wte", "freq"}), 2);
  }
}

// ---- one node each -------------------------------------------------------------------------
TEST(PosencSurvey, EachOpIsOneGraphNode) {
  Variable x(randn({2, 6, 4}, 1), true), wi(randn({12, 4}, 2), true), wh(randn({12, 4}, 3), true),
      bi(randn({12}, 4), true), bh(randn({12}, 5), true);
  Variable h = gru_sequence(x, wi, wh, bi, bh);
  EXPECT_EQ(h.op_name(), "gru_sequence");
  EXPECT_EQ(h.impl()->node->inputs.size(), 5u);  // the leaves themselves: no inner nodes
  Variable p0(randn({4}, 1), true), w1(randn({3, 4}, 2), true), b1(randn({3}, 3), true),
      wt(randn({3}, 4), true), w2(randn({4, 3}, 5), true), b2(randn({4}, 6), true);
  Variable P = ode_positions(p0, w1, b1, wt, w2, b2, ode(50, 0.1, 2));
  EXPECT_EQ(P.op_name(), "ode_positions");
  EXPECT_EQ(P.impl()->node->inputs.size(), 6u);
  Variable wte(randn({7, 4}, 1), true), fr(randn({7, 2}, 2), true);
  Variable e = complex_order_embed(wte, fr, ids(2, 3, 7, 1), 0);
  EXPECT_EQ(e.op_name(), "complex_order_embed");
  EXPECT_EQ(e.impl()->node->inputs.size(), 2u);
}

// ---- properties ----------------------------------------------------------------------------
TEST(PosencSurvey, ComplexOrderZeroFrequenciesIsTheTokenEmbedding) {
  const Tensor w = randn({7, 6}, 1), tok = ids(2, 5, 7, 2);
  Variable zero(Tensor::zeros({7, 3}, DType::F64));
  for (int64_t pos0 : {0, 9}) {
    Tensor got = complex_order_embed(Variable(w), zero, tok, pos0).data();
    Tensor want = embedding(Variable(w), tok).data();
    EXPECT_EQ(max_abs_diff(got, want), 0.0);
  }
  // and a nonzero frequency does turn the pairs (|z| kept, phase t * omega)
  Tensor fr = Tensor::full({7, 3}, 0.7, DType::F64);
  Tensor got = complex_order_embed(Variable(w), Variable(fr), tok, 0).data();
  const int64_t t = 4, k = 1;
  const int64_t word = (int64_t)tok.at(t);  // batch 0, position 4
  const double a = w.at(word * 6 + 2 * k), b = w.at(word * 6 + 2 * k + 1), phi = 0.7 * t;
  EXPECT_NEAR(got.at(t * 6 + 2 * k), a * std::cos(phi) - b * std::sin(phi), 1e-12);
  EXPECT_NEAR(got.at(t * 6 + 2 * k + 1), a * std::sin(phi) + b * std::cos(phi), 1e-12);
}

TEST(PosencSurvey, FloaterZeroDynamicsIsP0AndConstantDynamicsALine) {
  const int64_t D = 4, F = 3, n = 7;
  const double dt = 0.25;
  Variable p0(randn({D}, 1)), w1(randn({F, D}, 2)), b1(randn({F}, 3)), wt(randn({F}, 4));
  Variable w2(Tensor::zeros({D, F}, DType::F64)), zero_b2(Tensor::zeros({D}, DType::F64));
  Tensor P = ode_positions(p0, w1, b1, wt, w2, zero_b2, ode(n, dt, 3)).data();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d) EXPECT_EQ(P.at(i * D + d), p0.data().at(d)) << i << "," << d;
  Variable c(randn({D}, 9));
  P = ode_positions(p0, w1, b1, wt, w2, c, ode(n, dt, 3)).data();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t d = 0; d < D; ++d)
      EXPECT_NEAR(P.at(i * D + d), p0.data().at(d) + (double)i * dt * c.data().at(d), 1e-13) << i;
  // with real dynamics the positions move away from the line
  Tensor Q = ode_positions(p0, w1, b1, wt, Variable(randn({D, F}, 5, 1.0)), c, ode(n, dt, 3)).data();
  EXPECT_GT(max_abs_diff(Q, P), 1e-3);
}

TEST(PosencSurvey, FloaterOffsetIsTheLongerIntegrationsRows) {
  nn::GPT m(tiny({{"type", "floater"}, {"hidden", 4}, {"dt", 0.2}}), DType::F64);
  m.init_weights(1);
  Variable x(randn({1, 5, 8}, 3));
  Tensor full = m.pe->embed(Variable(Tensor::zeros({1, 9, 8}, DType::F64)), 0).data();
  Tensor off = m.pe->embed(x, 4).data();
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t d = 0; d < 8; ++d)
      EXPECT_NEAR(off.at(t * 8 + d) - x.data().at(t * 8 + d), full.at((t + 4) * 8 + d), 1e-14);
}

TEST(PosencSurvey, GruFirstStateMatchesTheEquations) {
  // h_1 = (1 - z) n with h_0 = 0: r, z, n from x_1 alone (biases of both sides included)
  const int64_t In = 3, H = 2;
  Tensor x = randn({1, 2, In}, 1, 1.0), wi = randn({3 * H, In}, 2), wh = randn({3 * H, H}, 3),
         bi = randn({3 * H}, 4), bh = randn({3 * H}, 5);
  Tensor h = gru_sequence(Variable(x), Variable(wi), Variable(wh), Variable(bi), Variable(bh)).data();
  auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
  for (int64_t j = 0; j < H; ++j) {
    double a[3];
    for (int g = 0; g < 3; ++g) {
      a[g] = bi.at(g * H + j);
      for (int64_t i = 0; i < In; ++i) a[g] += wi.at((g * H + j) * In + i) * x.at(i);
    }
    const double r = sig(a[0] + bh.at(j)), z = sig(a[1] + bh.at(H + j));
    const double n = std::tanh(a[2] + r * bh.at(2 * H + j));
    EXPECT_NEAR(h.at(j), (1 - z) * n, 1e-14);
  }
}

// ---- configuration -------------------------------------------------------------------------
TEST(PosencSurvey, KeyErrorsAreOneLineNamingTheKey) {
  auto bad = [](nlohmann::json pe, std::initializer_list<std::string> needles) {
    expect_error([&] { nn::GPT m(tiny(pe)); }, needles);
  };
  for (const char* type : {"rnn", "floater", "complex-order"}) bad({{"type", type}, {"bogus", 1}}, {"posenc.bogus", type});
  bad({{"type", "floater"}, {"hidden", 0}}, {"posenc.hidden", ">= 1"});
  bad({{"type", "floater"}, {"hidden", 2.5}}, {"posenc.hidden", "integer"});
  bad({{"type", "floater"}, {"substeps", 0}}, {"posenc.substeps", ">= 1"});
  bad({{"type", "floater"}, {"dt", 0}}, {"posenc.dt", "> 0"});
  bad({{"type", "floater"}, {"dt", -0.5}}, {"posenc.dt", "> 0"});
  bad({{"type", "floater"}, {"dt", "0.1"}}, {"posenc.dt", "number"});
  ModelConfig odd = tiny({{"type", "complex-order"}});
  odd.d_model = 9;
  odd.n_heads = 3;
  expect_error([&] { nn::GPT m(odd); }, {"complex-order", "even d_model", "9"});
}

TEST(PosencSurvey, RnnStartsEverySequenceAtPositionZero) {
  nn::GPT m(tiny({{"type", "rnn"}}));
  m.init_weights(1);
  EXPECT_NO_THROW(m.forward(ids(1, 20, 11, 1)));  // longer than the context: recurs further
  expect_error([&] { m.pe->embed(Variable(Tensor::zeros({1, 3, 8})), 2); }, {"posenc rnn", "position 2", "expected 0"});
}

TEST(PosencSurvey, ParameterNamesAndShapes) {
  auto names = [](const nlohmann::json& pe) {
    nn::GPT m(tiny(pe));
    std::vector<std::string> v;
    for (auto& [n, p] : m.named_parameters())
      if (n.rfind("pe.", 0) == 0) v.push_back(n + ":" + p.data().str());
    return v;
  };
  EXPECT_EQ(names({{"type", "rnn"}}),
            (std::vector<std::string>{"pe.weight_ih:f32[24, 8]", "pe.weight_hh:f32[24, 8]", "pe.bias_ih:f32[24]",
                                      "pe.bias_hh:f32[24]"}));
  EXPECT_EQ(names({{"type", "floater"}, {"hidden", 5}}),
            (std::vector<std::string>{"pe.p0:f32[8]", "pe.time:f32[5]", "pe.fc.weight:f32[5, 8]", "pe.fc.bias:f32[5]",
                                      "pe.proj.weight:f32[8, 5]", "pe.proj.bias:f32[8]"}));
  EXPECT_EQ(names({{"type", "complex-order"}}), (std::vector<std::string>{"pe.freq.weight:f32[11, 4]"}));
}

TEST(PosencSurvey, InitialisationFollowsTheSpec) {
  auto params = [](const nlohmann::json& pe) {
    ModelConfig c = tiny(pe);
    c.d_model = 64;
    c.n_heads = 4;
    auto m = std::make_shared<nn::GPT>(c);
    m->init_weights(7);
    return m;
  };
  auto range = [](const Variable& v, double& lo, double& hi, double& sd) {
    const Tensor t = v.data();
    lo = 1e300, hi = -1e300;
    double s = 0, s2 = 0;
    for (int64_t i = 0; i < t.numel(); ++i) {
      lo = std::min(lo, t.at(i)), hi = std::max(hi, t.at(i));
      s += t.at(i), s2 += t.at(i) * t.at(i);
    }
    sd = std::sqrt(s2 / (double)t.numel() - (s / (double)t.numel()) * (s / (double)t.numel()));
  };
  double lo, hi, sd;
  const double a = 1.0 / 8.0;  // 1/sqrt(D)
  auto rnn = params({{"type", "rnn"}});
  for (auto& [n, p] : rnn->named_parameters())
    if (n.rfind("pe.", 0) == 0) {
      range(p, lo, hi, sd);
      EXPECT_TRUE(lo >= -a && hi <= a && hi > 0.9 * a && lo < -0.9 * a) << n;  // U(-1/sqrt(D), 1/sqrt(D))
    }
  auto fl = params({{"type", "floater"}});
  for (auto& [n, p] : fl->named_parameters()) {
    if (n.rfind("pe.", 0) != 0) continue;
    range(p, lo, hi, sd);
    if (n == "pe.time") {
      EXPECT_TRUE(lo >= -1 && hi <= 1 && hi - lo > 1.5) << n;
    } else if (n == "pe.fc.weight") {
      EXPECT_TRUE(lo >= -a && hi <= a && hi - lo > 1.8 * a) << n;
    } else if (n == "pe.p0" || n == "pe.proj.weight") {
      EXPECT_NEAR(sd, 0.02, 0.006) << n;
    } else if (n == "pe.proj.bias") {
      EXPECT_TRUE(lo == 0 && hi == 0) << n;
    }
  }
  auto co = params({{"type", "complex-order"}});
  Tensor f;
  for (auto& [n, p] : co->named_parameters())
    if (n == "pe.freq.weight") f = p.data();
  ASSERT_TRUE(f.defined());
  ASSERT_EQ(f.shape(), (Shape{11, 32}));
  for (int64_t w : {0, 10})
    for (int64_t k : {0, 1, 31})
      EXPECT_EQ((float)f.at(w * 32 + k), 1.0f / std::pow(10000.0f, (float)(2 * k) / 64.0f)) << w << "," << k;
}
