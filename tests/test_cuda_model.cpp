// tests/test_cuda_model.cpp — the CUDA backend end to end: a tiny GPT (several positional
// encodings) trained for two AdamW steps on the cpu and on the cuda device from the same
// weights and batch must agree (loss, every gradient, the updated parameters), and the second
// step on cuda must not reach cudaMalloc (the caching allocator serves a warm step). Runs under
// the CUDA emulator (always) and on a real GPU; without one: "skipped: no GPU".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/fast_paths.h"
#include "core/precision.h"
#include "core/step_graph.h"
#include "nn/attention.h"
#include "nn/decode_engine.h"
#include "nn/gpt.h"
#include "tests/test_util.h"
#include "train/optim.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/attention.h"     // attention_calls: the fused path ran on the device
#include "core/cuda/attention_tc.h"  // tc_attention_calls: the tensor-core kernels ran
#include "core/cuda/cuda_runtime.h"
#endif
#ifdef CTXLAB_CUDA_EMULATOR
#include "core/cuda/emu/emu_counters.h"  // cuemu::counter_records: the launches of a step and their bytes
#include "core/cuda/emu/emu_runtime.h"   // cuemu::access_checks: whether the counters see the accesses
#endif

namespace {
using namespace ctx;
using ctx::testing_util::rel_err;
using ctx::testing_util::tiny_cfg;
using json = nlohmann::json;

#ifdef CTXLAB_WITH_CUDA
struct StepResult {
  double loss = 0;
  std::vector<std::pair<std::string, Tensor>> grads, params;  // on the host
};

// One training step on `m` (already on its device): loss, backward, clipped AdamW step.
StepResult train_step(nn::GPT& m, Optimizer& opt, const Tensor& in, const Tensor& tg) {
  m.zero_grad();
  Variable loss = m.loss(in, tg);
  StepResult r;
  r.loss = loss.data().to(Device::CPU).item();
  loss.backward();
  for (auto& [name, p] : m.named_parameters())
    r.grads.emplace_back(name, p.grad().defined() ? p.grad().to(Device::CPU) : Tensor());
  opt.clip_and_step(1e-2, 1.0);
  for (auto& [name, p] : m.named_parameters()) r.params.emplace_back(name, p.data().to(Device::CPU));
  return r;
}

// Loss and gradients agree to `tol` (relative to each tensor's size); the updated parameters
// agree elementwise where the gradient is more than rounding noise: the gradient of the key
// bias, zero in exact arithmetic (softmax ignores a constant added to every key), comes out as
// noise of either sign on each device, and Adam's g / sqrt(v) turns noise into a full step.
void expect_same_step(const StepResult& c, const StepResult& g, double tol) {
  EXPECT_LE(std::fabs(g.loss - c.loss), tol * std::fabs(c.loss)) << "loss cpu " << c.loss << " cuda " << g.loss;
  ASSERT_EQ(c.grads.size(), g.grads.size());
  int64_t checked = 0, total = 0;
  auto absmax = [](const Tensor& t) {
    double m = 0;
    for (int64_t e = 0; t.defined() && e < t.numel(); ++e) m = std::max(m, std::fabs(t.at(e)));
    return m;
  };
  double model_gmax = 0;
  for (auto& [n, t] : c.grads) model_gmax = std::max(model_gmax, absmax(t));
  for (size_t i = 0; i < c.grads.size(); ++i) {
    SCOPED_TRACE(c.grads[i].first);
    const Tensor &gc = c.grads[i].second, &pc = c.params[i].second, &pg = g.params[i].second;
    ASSERT_EQ(gc.defined(), g.grads[i].second.defined());
    if (!gc.defined()) continue;
    const double gmax = absmax(gc);
    if (gmax <= 1e-5 * model_gmax) {
      // a whole tensor zero in exact arithmetic (FIRE's mlp.fc2.bias shifts every softmax row,
      // POSENC_SPEC §7.1): rounding noise on both devices, measured against the model's largest
      // gradient; its parameters take Adam's noise-driven steps and are not compared
      double d = 0;
      for (int64_t e = 0; e < gc.numel(); ++e) d = std::max(d, std::fabs(g.grads[i].second.at(e) - gc.at(e)));
      EXPECT_LE(d, tol * model_gmax);
      continue;
    }
    EXPECT_LE(rel_err(g.grads[i].second, gc), tol);
    int bad = 0;
    for (int64_t e = 0; e < pc.numel(); ++e, ++total) {
      if (std::fabs(gc.at(e)) <= 1e-4 * gmax) continue;
      ++checked;
      if (std::fabs(pg.at(e) - pc.at(e)) > tol * (1 + std::fabs(pc.at(e))) && bad++ < 3)
        ADD_FAILURE() << "parameter element " << e << ": cpu " << pc.at(e) << " cuda " << pg.at(e);
    }
  }
  EXPECT_GT(checked, total * 9 / 10) << "too few parameter elements with a real gradient to compare";
}

class CudaModel : public ::testing::TestWithParam<json> {};

// Two training steps of the tiny GPT with `posenc` (and a sliding attention window when
// window > 0) on cpu and on cuda agree; see expect_same_step. `fused`: the device's attention
// runs the fused kernels (forced, as CTXLAB_FUSED_ATTENTION=1), else the backend's own choice,
// which for this training shape is the composed path (Backend::prefers_fused_attention).
void check_training_steps_with(const json& posenc, int64_t window, bool fused, int64_t sinks = 0) {
  SCOPED_TRACE(fused ? "fused attention (forced)" : "the backend's choice: composed attention");
  if (fused) set_fast_path(FastPath::Attention, true);
  struct Reset {
    ~Reset() { reset_fast_path(FastPath::Attention); }
  } reset;
  nn::GPT mc(tiny_cfg(posenc)), mg(tiny_cfg(posenc));
  mc.init_weights(7);
  mg.init_weights(7);
  if (window > 0) {
    mc.set_attention_window(window, sinks);
    mg.set_attention_window(window, sinks);
  }
  mg.to(Device::CUDA);
  for (auto& [name, p] : mg.named_parameters()) ASSERT_EQ(p.data().device(), Device::CUDA) << name;
  AdamWOptions o;
  AdamW oc(mc.named_parameters(), o), og(mg.named_parameters(), o);
  const int64_t B = 2, T = 9;
  Rng r(11);
  Tensor in = Tensor::empty({B, T}, DType::I64), tg = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) {
    in.set(i, (double)r.below(17));
    tg.set(i, (double)r.below(17));
  }
  const Tensor in_g = in.to(Device::CUDA), tg_g = tg.to(Device::CUDA);
  // f32 on both sides, different summation orders: agreement to a few 1e-5. Forced, every layer
  // runs the fused attention kernels on the device (forward and backward once per layer and
  // step); by the backend's choice none does.
  const cuda::AttentionCalls calls0 = cuda::attention_calls();
  expect_same_step(train_step(mc, oc, in, tg), train_step(mg, og, in_g, tg_g), 2e-5);
  const cuda::AttentionCalls calls1 = cuda::attention_calls();
  // an encoding that owns its logits (cope), self-extend and attention sinks (two-branch logits)
  // never take the fused attention
  const json sc = posenc.contains("scaling") ? posenc["scaling"] : json::object();
  const bool fusable = sinks == 0 && sc.value("type", std::string()) != "self-extend";
  const uint64_t want = fused && fusable && mg.pe->fused_attention_ok(AttnState{}) ? (uint64_t)mg.cfg.n_layers : 0;
  EXPECT_EQ(calls1.forward - calls0.forward, want) << "fused attention forward calls on cuda";
  EXPECT_EQ(calls1.backward - calls0.backward, want) << "fused attention backward calls on cuda";
  const uint64_t mallocs = cuda::device_alloc_stats().device_mallocs;
  expect_same_step(train_step(mc, oc, in, tg), train_step(mg, og, in_g, tg_g), 5e-5);
  EXPECT_EQ(cuda::device_alloc_stats().device_mallocs, mallocs) << "the second (warm) step reached cudaMalloc";
}

void check_training_steps(const json& posenc, int64_t window) {
  check_training_steps_with(posenc, window, true);
  check_training_steps_with(posenc, window, false);
}

// The CUDA backend's attention policy (measured on an H200, docs/results/gpu.md): composed for
// training shapes up to 2^27 scores, fused past that and for decoding (one query row); under
// --precision bf16 the tensor-core kernels for every plain call (no bias, no content-position
// terms, no dropout) or call whose only term is a distance table (dist_table) whose head dim they
// have, unless CTXLAB_BF16_ATTENTION=0.
TEST(CudaModelAttention, ComposedForTrainingShapesFusedForLargeScoresAndDecoding) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  const Backend& be = backend(Device::CUDA);
  ASSERT_TRUE(be.has(Fused::Attention));
  for (const bool plain : {false, true}) {  // fp32: plain or not, the same policy
    SCOPED_TRACE(plain ? "plain" : "with score terms");
    EXPECT_FALSE(be.prefers_fused_attention({8, 12, 1024, 1024, 64, plain})) << "GPT-2 small, T 1024: measured 2.2x faster composed";
    EXPECT_FALSE(be.prefers_fused_attention({8, 4, 256, 256, 32, plain})) << "small: measured 1.6x faster composed";
    EXPECT_FALSE(be.prefers_fused_attention({8, 16, 1024, 1024, 64, plain})) << "exactly 2^27 scores";
    EXPECT_TRUE(be.prefers_fused_attention({8, 16, 1024, 1025, 64, plain})) << "past 2^27 scores";
    EXPECT_TRUE(be.prefers_fused_attention({8, 12, 4096, 4096, 64, plain})) << "long context";
    EXPECT_TRUE(be.prefers_fused_attention({4, 12, 1, 300, 64, plain})) << "decoding one token";
  }
  EXPECT_FALSE(be.prefers_fused_attention({8, 12, 1024, 1024, 64, false, true})) << "fp32, a distance table: composed";
  EXPECT_TRUE(backend(Device::CPU).prefers_fused_attention({8, 12, 1024, 1024, 64, false}))
      << "the CPU always prefers its fused kernel";
  PrecisionScope bf16(Precision::BF16);
  EXPECT_TRUE(be.prefers_fused_attention({8, 12, 1024, 1024, 64, true})) << "bf16, plain: the tensor cores";
  EXPECT_TRUE(be.prefers_fused_attention({8, 4, 256, 256, 32, true}));
  EXPECT_FALSE(be.prefers_fused_attention({8, 12, 1024, 1024, 64, false})) << "a bias or relative terms: composed";
  EXPECT_FALSE(be.prefers_fused_attention({8, 12, 1024, 1024, 48, true})) << "no tensor-core kernel for Dh 48";
  EXPECT_TRUE(be.prefers_fused_attention({8, 12, 1024, 1024, 64, false, true})) << "bf16, a distance table alone";
  EXPECT_FALSE(be.prefers_fused_attention({8, 12, 1024, 1024, 48, false, true})) << "a distance table, Dh 48";
  set_fast_path(FastPath::Bf16Attention, false);  // as CTXLAB_BF16_ATTENTION=0
  EXPECT_FALSE(be.prefers_fused_attention({8, 12, 1024, 1024, 64, true})) << "switched off: composed";
  EXPECT_FALSE(be.prefers_fused_attention({8, 12, 1024, 1024, 64, false, true})) << "switched off, a table: composed";
  reset_fast_path(FastPath::Bf16Attention);
}

// The same policy end to end: a GPT with Dh 32 trained on cuda under --precision bf16 runs every
// layer's attention on the tensor-core kernels for a plain encoding (learned, rope), with the
// switch unset, reading q, k, v and dout from the bf16 copies the kernels that produce them write
// (the backward reads the forward's); so does a distance-table encoding (alibi: the table read in
// the kernels' tiles); CTXLAB_BF16_ATTENTION=0 keeps the composed path (no fused kernel at all).
TEST(CudaModelAttention, TensorCoresByDefaultForPlainCallsUnderBf16) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  PrecisionScope bf16(Precision::BF16);
  struct Case {
    json pe;
    bool switched_off, want_tc;
    uint64_t kept, converted;  // bf16 inputs of one layer's forward + backward
  };
  // every input kept: q | k | v and dout written in bf16 by split_heads and merge_heads' backward
  // (rope: q and k rotated into storages of their own, converted once and kept, v from the split)
  for (const Case& c : {Case{json{{"type", "learned"}}, false, true, 7, 0},
                        Case{json{{"type", "rope"}}, false, true, 7, 0}, Case{json{{"type", "alibi"}}, false, true, 7, 0},
                        Case{json{{"type", "learned"}}, true, false, 0, 0}}) {
    SCOPED_TRACE(c.pe.dump() + (c.switched_off ? " with CTXLAB_BF16_ATTENTION=0" : ""));
    if (c.switched_off) set_fast_path(FastPath::Bf16Attention, false);
    nn::GPT m(testing_util::two_head_cfg(17, 64, 2, 64, 24, c.pe));  // 2 heads of 32
    m.init_weights(3);
    m.to(Device::CUDA);
    const Tensor in = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 11, 5}, {2, 6})
                          .to(Device::CUDA);
    const cuda::TcAttentionCalls tc0 = cuda::tc_attention_calls();
    const cuda::AttentionCalls simt0 = cuda::attention_calls();
    const cuda::KeptCopyStats kept0 = cuda::kept_copy_stats();
    Variable loss = m.loss(in, in);
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.data().to(Device::CPU).item()));
    const uint64_t want = c.want_tc ? (uint64_t)m.cfg.n_layers : 0;
    EXPECT_EQ(cuda::tc_attention_calls().forward - tc0.forward, want) << "tensor-core forward calls";
    EXPECT_EQ(cuda::tc_attention_calls().backward - tc0.backward, want) << "tensor-core backward calls";
    EXPECT_EQ(cuda::attention_calls().forward, simt0.forward) << "no call may take the SIMT kernels";
    const uint64_t L = (uint64_t)m.cfg.n_layers;
    EXPECT_EQ(cuda::tc_attention_calls().kept_inputs - tc0.kept_inputs, c.kept * L) << "inputs read from kept copies";
    EXPECT_EQ(cuda::tc_attention_calls().converted_inputs - tc0.converted_inputs, c.converted * L)
        << "inputs converted for the call";
    // bf16 copies written by the kernels that produce them: each layer's split (q | k | v) and its
    // backward (dqkv), merge (the projection's input) and its backward (dout), two layer_norms, the
    // GELU both ways; the final layer_norm and the loss's dlogits
    EXPECT_EQ(cuda::kept_copy_stats().written - kept0.written, 8 * L + 2);
    reset_fast_path(FastPath::Bf16Attention);
  }
}

// The distance-table encodings under --precision bf16 on cuda: every layer's attention takes the
// tensor-core kernels with the table read in their tiles (counted), and the loss and every
// gradient, the tables' parameters included (kerple's r1 / r2, t5's bucket weights, FIRE's c,
// L_multiplier and MLP, through AttnRelGrad::ddist_bias), agree with the cpu's fp32 result within
// the bf16 bound of this model (bf16 products throughout, the GEMMs and the attention: the largest
// gradient error, relative to the tensor's largest element, measured 0.55-0.71% per encoding under
// the emulator; the bound, 2%, is about 3x it). FIRE (per layer and shared; init_L 24 keeps every
// query below thr, init_c 1 spreads x over [0, 0.93] so that the MLP's ReLUs turn within the range)
// takes the table only where CTXLAB_FIRE_TABLE is set on CUDA (its decision reads L_multiplier on
// the host): set here. FIRE's own gradients are sums of dL/dlogit by distance contracted with an
// MLP Jacobian that varies slowly with the distance, and every row of dL/dlogit sums to zero: they
// cancel, so bf16 rounding shows more. Measured under the emulator, each against the tensor's
// largest element (or a tenth of the module's largest gradient, where that is larger: fc1.bias's
// units whose ReLU is on over the whole range get only rounding): up to 6.9% through the table
// (fc2.weight of layer 1), 2.5% through today's per-pair bias on the same device; held to 10%.
// With the default init (x in [0, 0.3]) both paths are worse (13% / 5%). mlp.fc2.bias shifts whole
// softmax rows: its gradient is zero but for rounding (POSENC_SPEC §7.1), bf16's (dS rows that do
// not quite sum to 0) several % of the module's largest against fp32's ~1e-9: only checked finite.
TEST(CudaModelAttention, DistanceTablesTakeTheTensorCoresAndMatchTheCpu) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  const std::vector<int64_t> toks = {1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 11, 5, 16, 0, 3, 3, 7, 12, 1, 9,
                                     4, 4, 10, 2, 6, 13, 8, 1, 15, 5, 2, 7, 9, 14, 3, 6, 11, 0, 2, 8};
  const Tensor in = Tensor::from_vector(toks, {2, 20});
  for (const json& pe : {json{{"type", "alibi"}}, json{{"type", "sandwich"}}, json{{"type", "kerple"}},
                         json{{"type", "kerple"}, {"variant", "power"}}, json{{"type", "t5"}},
                         json{{"type", "fire"}, {"init_L", 24}, {"init_c", 1.0}},
                         json{{"type", "fire"}, {"shared", true}, {"init_L", 24}, {"init_c", 1.0}}}) {
    SCOPED_TRACE(pe.dump());
    set_fast_path(FastPath::FireTable, true);
    struct Reset {
      ~Reset() { reset_fast_path(FastPath::FireTable); }
    } reset;
    nn::GPT cpu(testing_util::two_head_cfg(17, 64, 2, 64, 24, pe));  // 2 heads of 32
    cpu.init_weights(3);
    nn::GPT gpu(cpu.cfg);
    gpu.init_weights(3);
    gpu.to(Device::CUDA);
    Variable cpu_loss = cpu.loss(in, in);  // fp32 on the cpu
    cpu_loss.backward();
    PrecisionScope bf16(Precision::BF16);
    const cuda::TcAttentionCalls tc0 = cuda::tc_attention_calls();
    const Tensor din = in.to(Device::CUDA);
    Variable loss = gpu.loss(din, din);
    loss.backward();
    const uint64_t L = (uint64_t)gpu.cfg.n_layers;
    EXPECT_EQ(cuda::tc_attention_calls().dist_forward - tc0.dist_forward, L) << "forwards reading the table";
    EXPECT_EQ(cuda::tc_attention_calls().backward - tc0.backward, L) << "tensor-core backward calls";
    const double lc = cpu_loss.data().item(), lg = loss.data().to(Device::CPU).item();
    EXPECT_LE(std::fabs(lg - lc), 2e-3 * std::fabs(lc)) << "loss cpu " << lc << " cuda bf16 " << lg;
    const auto pc = cpu.named_parameters(), pg = gpu.named_parameters();
    ASSERT_EQ(pc.size(), pg.size());
    auto amax = [](const Tensor& t) {
      double m = 0;
      for (int64_t x = 0; x < t.numel(); ++x) m = std::max(m, std::fabs(t.at(x)));
      return m;
    };
    const std::string type = pe["type"];
    auto is_pe = [](const std::string& n) { return n.rfind("pe.", 0) == 0 || n.find(".attn.pe.") != std::string::npos; };
    auto module_of = [](const std::string& n) { return n.substr(0, n.find("pe.") + 3); };  // "blocks.1.attn.pe."
    double worst = 0, worst_fire = 0;
    int table_params = 0;
    for (size_t i = 0; i < pc.size(); ++i) {
      const std::string& name = pc[i].first;
      SCOPED_TRACE(name);
      const Tensor gc = pc[i].second.grad(), gg = pg[i].second.grad().to(Device::CPU);
      if (type == "fire" && is_pe(name)) {  // FIRE's own: the cancelling sums (above)
        ++table_params;
        if (name.find("fc2.bias") != std::string::npos) {  // zero but for rounding: bf16's is larger
          EXPECT_TRUE(std::isfinite(amax(gg)));
          continue;
        }
        double floor = 0;
        for (const auto& [n, p] : pc)
          if (n.rfind(module_of(name), 0) == 0) floor = std::max(floor, 0.1 * amax(p.grad()));
        double diff = 0;
        for (int64_t x = 0; x < gc.numel(); ++x) diff = std::max(diff, std::fabs(gg.at(x) - gc.at(x)));
        worst_fire = std::max(worst_fire, diff / std::max(amax(gc), floor));
        EXPECT_LE(diff / std::max(amax(gc), floor), 0.1);
        continue;
      }
      const double e = rel_err(gg, gc);
      worst = std::max(worst, e);
      EXPECT_LE(e, 2e-2);
      if (is_pe(name)) {
        ++table_params;
        EXPECT_GT(amax(gc), 0.0) << "the table's parameters get a gradient";
      }
    }
    EXPECT_EQ(table_params, type == "kerple" ? 2 : type == "t5" ? 1 : type == "fire" ? (pe.contains("shared") ? 6 : 12) : 0);
    std::printf("%s: bf16 tensor-core vs cpu fp32, largest gradient rel_err %.3g (fire's own %.3g)\n",
                pe.dump().c_str(), worst, worst_fire);
  }
}

// FIRE on cuda decides on the distance table from L_multiplier's host-side bound, never its value
// (docs/posenc.md, "FIRE's threshold without a host copy"): a bf16 forward and backward of a FIRE
// GPT whose queries are all below thr copy nothing to the host. Module::to publishes the uploaded
// values as the bound, so the model takes the table; a write by anyone else retires the bound and
// the model keeps the per-pair bias, still without a copy; a bound that settles the question either
// way (every lm in it below, or none) is taken as the answer, one that does not is the per-pair
// bias, or with CTXLAB_FIRE_TABLE=1 a read of the value (one copy a layer); 0 is the per-pair bias.
TEST(CudaModelAttention, FireDecidesFromTheBoundWithoutAHostCopy) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  // the default is what is checked: the variable must be unset (as in CI)
  ASSERT_EQ(std::getenv("CTXLAB_FIRE_TABLE"), nullptr) << "unset CTXLAB_FIRE_TABLE: this test checks its default";
  reset_fast_path(FastPath::FireTable);
  struct Reset {
    ~Reset() { reset_fast_path(FastPath::FireTable); }
  } reset;
  nn::GPT m(testing_util::two_head_cfg(17, 64, 2, 64, 24, json{{"type", "fire"}, {"init_L", 24}}));
  m.init_weights(3);
  m.to(Device::CUDA);
  const uint64_t L = (uint64_t)m.cfg.n_layers;
  PrecisionScope bf16(Precision::BF16);
  // host tokens, as the trainer's batches: 12 queries, the largest position 11 (thr = 24 lm)
  const Tensor in = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 11, 5}, {1, 12});
  // one forward and backward: (tables taken, device -> host copies)
  auto step = [&] {
    const uint64_t copies = cuda::host_copy_stats().to_host;
    const cuda::TcAttentionCalls tc0 = cuda::tc_attention_calls();
    Variable loss = m.loss(in, in);
    loss.backward();
    m.zero_grad();
    const std::pair<uint64_t, uint64_t> r{cuda::tc_attention_calls().dist_forward - tc0.dist_forward,
                                          cuda::host_copy_stats().to_host - copies};
    EXPECT_TRUE(std::isfinite(loss.data().to(Device::CPU).item()));  // (a copy, after the count)
    return r;
  };
  step();  // warm-up (tables, plans)
  Tensor din = in.to(Device::CUDA);  // (a recording copies nothing from the host: ids checked here)
  din.set_checked_bound(m.cfg.vocab_size);
  std::vector<VarImpl*> lms;
  for (auto& [name, p] : m.named_parameters())
    if (name.find("L_multiplier") != std::string::npos) lms.push_back(p.impl().get());
  ASSERT_EQ(lms.size(), (size_t)L);
  for (VarImpl* v : lms) {
    ASSERT_NE(known_value_bound(*v), nullptr) << "Module::to publishes the uploaded value";
    EXPECT_EQ(known_value_bound(*v)->lo, 1.0);
    EXPECT_EQ(known_value_bound(*v)->hi, 1.0);
  }
  using Taken = std::pair<uint64_t, uint64_t>;
  EXPECT_EQ(step(), (Taken{L, 0})) << "the uploaded bound: the table in every layer, no copy";
  // bounds that settle it: [0.5, 2] (thr >= 12 > 11) yes; [0.1, 0.45] (thr <= 10.8) no; [0.3, 1.5] neither
  auto bound_all = [&](double lo, double hi) {
    for (VarImpl* v : lms) publish_value_bound(*v, lo, hi);
  };
  bound_all(0.5, 2);
  EXPECT_EQ(step(), (Taken{L, 0}));
  bound_all(-2, -0.5);  // |lm| counts
  EXPECT_EQ(step(), (Taken{L, 0}));
  bound_all(0.1, 0.45);
  EXPECT_EQ(step(), (Taken{0, 0})) << "a bound below the queries: the per-pair bias";
  bound_all(0.3, 1.5);
  EXPECT_EQ(step(), (Taken{0, 0})) << "an undecided bound: the per-pair bias without a copy";
  set_fast_path(FastPath::FireTable, true);
  EXPECT_EQ(step(), (Taken{L, L})) << "undecided with the switch set: the value read, one copy a layer";
  bound_all(0.1, 0.45);
  EXPECT_EQ(step(), (Taken{0, 0})) << "a settled bound needs no read even with the switch set";
  set_fast_path(FastPath::FireTable, false);
  bound_all(1, 1);
  EXPECT_EQ(step(), (Taken{0, 0})) << "switched off";
  reset_fast_path(FastPath::FireTable);
  EXPECT_EQ(step(), (Taken{L, 0}));
  // recorded into a CUDA Graph, each layer's choice is frozen with a check: the recording holds
  // while the bound gives the same answer, not once it gives another (the trainer records again)
  {
    StepGraph g(backend(Device::CUDA));
    g.capture([&] {
      Variable loss = m.loss(din, din);
      loss.backward();
      m.zero_grad();
    });
    EXPECT_EQ(g.recorded_decisions(), (int64_t)L);
    EXPECT_TRUE(g.decisions_hold());
    bound_all(0.6, 1.4);  // still settled below
    EXPECT_TRUE(g.decisions_hold());
    bound_all(0.3, 1.5);
    EXPECT_FALSE(g.decisions_hold());
    bound_all(1, 1);
    g.replay();
  }
  // a write by anyone else retires the bound (the same value written: the host cannot know)
  for (auto& [name, p] : m.named_parameters())
    if (name.find("L_multiplier") != std::string::npos) p.data().copy_from(Tensor::full({1}, 1.0));
  for (VarImpl* v : lms) EXPECT_EQ(known_value_bound(*v), nullptr);
  EXPECT_EQ(step(), (Taken{0, 0})) << "no bound: the per-pair bias, no copy";
}

// A batch that lives on the device without a host mirror (the trainer's device ring) and carries
// its host range check (Tensor::checked_bound = vocab_size): a warm forward and backward of a GPT
// reads none of it on the host and uploads nothing (GPT's token check, the embedding's
// index_select, its backward's index_add planned on the device, the cross-entropy's checks and its
// count of non-ignored targets), and gives the host batch's loss and gradients bit for bit.
TEST(CudaModelDeviceBatch, ProvenBatchMakesNoHostCopy) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  for (const char* pe : {"learned", "rope"}) {
    SCOPED_TRACE(pe);
    nn::GPT m(tiny_cfg(json{{"type", pe}}));
    m.init_weights(3);
    m.to(Device::CUDA);
    const std::vector<int64_t> tok = {1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 11, 5, 16, 0, 5, 5};
    const Tensor in = Tensor::from_vector(tok, {2, 8});
    std::vector<int64_t> next(tok.begin() + 1, tok.end());
    next.push_back(4);
    const Tensor tg = Tensor::from_vector(next, {2, 8});
    auto step = [&m](const Tensor& i, const Tensor& t, std::vector<Tensor>* grads) {
      m.zero_grad();
      Variable loss = m.loss(i, t);
      loss.backward();
      if (grads)
        for (auto& [name, p] : m.named_parameters()) grads->push_back(p.grad());
      return loss.data();
    };
    step(in, tg, nullptr);  // warms the tables (positions, cos/sin) and the allocator
    std::vector<Tensor> want_g, got_g;
    const Tensor want = step(in, tg, &want_g).to(Device::CPU);
    Tensor din = in.to(Device::CUDA), dtg = tg.to(Device::CUDA);
    din.set_checked_bound(m.cfg.vocab_size);
    dtg.set_checked_bound(m.cfg.vocab_size);
    std::vector<Tensor> want_h;
    for (const Tensor& g : want_g) want_h.push_back(g.to(Device::CPU));
    cuda::synchronize();
    const cuda::HostCopyStats c0 = cuda::host_copy_stats();
    const Tensor got_d = step(din, dtg, &got_g);
    const cuda::HostCopyStats c1 = cuda::host_copy_stats();
    EXPECT_EQ(c1.to_host, c0.to_host) << "a device -> host copy in the step";
    EXPECT_EQ(c1.to_device, c0.to_device) << "a synchronous upload in the step";
    EXPECT_EQ(c1.to_device_queued, c0.to_device_queued) << "a queued upload in the step";
    EXPECT_EQ(got_d.to(Device::CPU).item(), want.item());
    ASSERT_EQ(got_g.size(), want_h.size());
    for (size_t k = 0; k < got_g.size(); ++k) {
      ASSERT_EQ(got_g[k].defined(), want_h[k].defined());
      if (!want_h[k].defined()) continue;
      const Tensor g = got_g[k].to(Device::CPU);
      int64_t diff = 0;
      for (int64_t e = 0; e < g.numel(); ++e) diff += g.at(e) != want_h[k].at(e);
      EXPECT_EQ(diff, 0) << "gradient " << k << " differs from the host batch's";
    }
  }
}

// What a warm bf16 training step still converts to bf16 (issue 33 item 3: no cast pass before a
// GEMM): a GPT with Dh 32 (tensor-core attention), two AdamW steps on cuda, the second counted.
// Every kernel that produces a Linear layer's input or output gradient writes its bf16 copy in its
// own pass (split_heads and merge_heads both ways, layer_norm, the GELU both ways, the
// cross-entropy's dlogits), and the flat AdamW writes the parameters' copy with their update, which
// every weight's GEMMs then read (a weight is a view of the flat buffer). What is still converted
// by a pass of its own, per layer: the residual stream's gradient where it enters the two Linear
// layers that end a block (gemm_operand_reused), 2 a layer; gemm_lt converts nothing. The numbers
// pin the count so that a change that removes (or adds) a pass shows here.
TEST(CudaModelAttention, WarmBf16StepConversionPasses) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  PrecisionScope bf16(Precision::BF16);
  nn::GPT m(testing_util::two_head_cfg(17, 64, 2, 64, 24, json{{"type", "learned"}}));
  m.init_weights(5);
  m.to(Device::CUDA);
  AdamWOptions o;
  AdamW opt(m.named_parameters(), o);
  const Tensor in = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 11, 5}, {2, 6})
                        .to(Device::CUDA);
  auto step = [&] {
    m.zero_grad();
    Variable loss = m.loss(in, in);
    loss.backward();
    opt.clip_and_step(1e-2, 1.0);
  };
  step();  // cold: plans, the allocator's blocks
  const cuda::KeptCopyStats k0 = cuda::kept_copy_stats();
  const cuda::GemmLtStats g0 = cuda::gemm_lt_stats();
  const cuda::TcAttentionCalls t0 = cuda::tc_attention_calls();
  step();
  const cuda::KeptCopyStats k1 = cuda::kept_copy_stats();
  const cuda::GemmLtStats g1 = cuda::gemm_lt_stats();
  const uint64_t L = (uint64_t)m.cfg.n_layers;
  std::printf("warm bf16 step, %llu layers: kept copies converted %llu, written by kernels %llu; gemm_lt "
              "conversions %llu, kept operands %llu, matmuls %llu\n",
              (unsigned long long)L, (unsigned long long)(k1.converted - k0.converted),
              (unsigned long long)(k1.written - k0.written), (unsigned long long)(g1.conversions - g0.conversions),
              (unsigned long long)(g1.kept_operands - g0.kept_operands), (unsigned long long)(g1.matmuls - g0.matmuls));
  EXPECT_EQ(cuda::tc_attention_calls().converted_inputs - t0.converted_inputs, 0u);
  EXPECT_EQ(k1.written - k0.written, 8 * L + 3)
      << "a layer: split_heads both ways, merge_heads both ways, two layer_norms, the GELU both ways; "
         "the final layer_norm, dlogits, and the optimizer's flat parameters";
  EXPECT_EQ(k1.converted - k0.converted, 2 * L)
      << "the residual stream's gradient into the two Linear layers that end a block";
  EXPECT_EQ(g1.conversions - g0.conversions, 0u) << "a weight (or the tied wte) converted by its GEMM";
  EXPECT_EQ(g1.matmuls - g0.matmuls, 12 * L + 3);
  EXPECT_EQ(g1.kept_operands - g0.kept_operands, 2 * (12 * L + 3));
}

// KERPLE clamps r1 / r2 in place before each layer's table; as a write to the optimizer's flat
// buffer, a clamp would drop the buffer's kept bf16 copy and every Linear after it would convert
// its weight again. On the device the clamp is skipped where the parameters' host-side bounds
// (anchored as the trainer does, then kept through AdamW's updates) show every value inside: a
// warm bf16 step converts what a learned model's does (2 tensors a layer, no weight), copies
// nothing to the host, and leaves r1 / r2 inside their bounds. Retiring the bounds (a write by
// someone else) brings the clamps, and the weights' conversions, back.
TEST(CudaModelAttention, WarmBf16KerpleKeepsTheFlatCopy) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  PrecisionScope bf16(Precision::BF16);
  nn::GPT m(testing_util::two_head_cfg(17, 64, 2, 64, 24, json{{"type", "kerple"}}));
  m.init_weights(5);
  m.to(Device::CUDA);
  AdamW opt(m.named_parameters(), AdamWOptions{});
  Tensor in = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 11, 5}, {2, 6}).to(Device::CUDA);
  in.set_checked_bound(m.cfg.vocab_size);
  auto step = [&] {
    m.zero_grad();
    Variable loss = m.loss(in, in);
    loss.backward();
    opt.clip_and_step_deferred(1e-3, 1.0);
  };
  step();  // cold: plans, the allocator's blocks, a first clamp of the init's values below 0.01
  opt.anchor_value_bounds();  // as the trainer at a report
  const uint64_t L = (uint64_t)m.cfg.n_layers;
  auto warm_step = [&] {
    const cuda::KeptCopyStats k0 = cuda::kept_copy_stats();
    const cuda::GemmLtStats g0 = cuda::gemm_lt_stats();
    const uint64_t copies = cuda::host_copy_stats().to_host;
    step();
    EXPECT_EQ(cuda::host_copy_stats().to_host, copies) << "a device -> host copy in the step";
    return std::pair<uint64_t, uint64_t>{cuda::kept_copy_stats().converted - k0.converted,
                                         cuda::gemm_lt_stats().conversions - g0.conversions};
  };
  for (int s = 0; s < 3; ++s) {
    SCOPED_TRACE("warm step " + std::to_string(s));
    const auto [converted, gemm_conversions] = warm_step();
    EXPECT_EQ(converted, 2 * L) << "the residual stream's gradient into the two Linear layers that end a block";
    EXPECT_EQ(gemm_conversions, 0u) << "a weight converted by its GEMM: the flat copy was dropped";
  }
  for (auto& [name, p] : m.named_parameters())
    if (name.rfind("pe.r", 0) == 0) {
      const Tensor h = p.data().to(Device::CPU);
      for (int64_t i = 0; i < h.numel(); ++i) EXPECT_GE(h.at(i), 0.01f) << name;
    }
  // a write by someone else: the bounds retire, the clamps run and drop the flat copy
  for (auto& [name, p] : m.named_parameters())
    if (name == "pe.r1") p.data().copy_from(p.data().to(Device::CPU).to(Device::CUDA));
  const auto [converted, gemm_conversions] = warm_step();
  EXPECT_GT(converted + gemm_conversions, 2 * L) << "clamps that write must drop the copy (the test's premise)";
}

// The residual adds fused into the norms (FastPath::AddNorm): three AdamW steps of a two-layer
// model (LayerNorm and RMSNorm, fp32 and bf16) give the bits of the composed path: the add kernel
// in front of the norm and the gradient add behind it, replaced by the norm kernels' own add
// (never contracted into an fma). Under the emulator's counters a warm step has 4 launches fewer a
// layer (the block's two adds, and the two gradient sums of its norms' backward), the norm kernels
// as many as before, and moves 6 N C floats fewer a layer (N rows of C = d_model): the forward
// does not read h back (1 a norm), the backward neither writes nor reads dx on its own (2 a norm).
TEST(CudaModelAddNorm, OneKernelEachWayWithTheComposedBits) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  for (const char* norm : {"layernorm", "rmsnorm"})
    for (Precision prec : {Precision::FP32, Precision::BF16}) {
      SCOPED_TRACE(str(norm, prec == Precision::BF16 ? " bf16" : " fp32"));
      PrecisionScope scope(prec);
      ModelConfig cfg = testing_util::two_head_cfg(17, 64, 2, 64, 24, json{{"type", "rope"}});
      cfg.norm = norm;
      const Tensor in = Tensor::from_vector(std::vector<int64_t>{1, 5, 7, 2, 9, 4, 3, 8, 6, 2, 11, 5}, {2, 6})
                            .to(Device::CUDA);
      struct Run {
        std::vector<Tensor> params;
        int64_t adds = 0, norms = 0, launches = 0;
        double bytes = 0;
      };
      auto run = [&](bool fused) {
        set_fast_path(FastPath::AddNorm, fused);
        nn::GPT m(cfg);
        m.init_weights(5);
        m.to(Device::CUDA);
        AdamW opt(m.named_parameters(), AdamWOptions{});
        Run r;
        for (int step = 0; step < 3; ++step) {
#ifdef CTXLAB_CUDA_EMULATOR
          const bool count = step == 2;  // warm
          if (count) cuemu::reset_counters(), cuemu::set_counters(true);
#endif
          m.zero_grad();
          m.loss(in, in).backward();
          opt.clip_and_step(1e-2, 1.0);
#ifdef CTXLAB_CUDA_EMULATOR
          if (!count) continue;
          cuemu::set_counters(false);
          for (const cuemu::LaunchCounters& c : cuemu::counter_records()) {
            if (c.grid[0] == 0) continue;  // a library call, copy or memset
            ++r.launches;
            r.adds += c.kernel.find("binary") != std::string::npos;
            r.norms += c.kernel.find("norm") != std::string::npos;
            r.bytes += (double)(c.dram_read_bytes + c.dram_write_bytes);
          }
#endif
        }
        for (auto& [name, p] : m.named_parameters()) r.params.push_back(p.data().to(Device::CPU));
        return r;
      };
      const Run composed = run(false), fused = run(true);
      reset_fast_path(FastPath::AddNorm);
      ASSERT_EQ(fused.params.size(), composed.params.size());
      for (size_t i = 0; i < fused.params.size(); ++i) {
        const Tensor& a = fused.params[i];
        const Tensor& b = composed.params[i];
        int64_t differ = 0;
        for (int64_t k = 0; k < a.numel(); ++k) differ += a.at(k) != b.at(k);
        EXPECT_EQ(differ, 0) << "parameter " << i << ": elements that differ from the composed path's";
      }
#ifdef CTXLAB_CUDA_EMULATOR
      const int64_t L = cfg.n_layers, NC = 12 * cfg.d_model;
      std::printf("%s %s warm step: launches %lld -> %lld, adds %lld -> %lld, norm kernels %lld -> %lld, "
                  "DRAM %.0f -> %.0f bytes\n",
                  norm, prec == Precision::BF16 ? "bf16" : "fp32", (long long)composed.launches,
                  (long long)fused.launches, (long long)composed.adds, (long long)fused.adds, (long long)composed.norms,
                  (long long)fused.norms, composed.bytes, fused.bytes);
      EXPECT_EQ(composed.launches - fused.launches, 4 * L);
      EXPECT_EQ(composed.adds - fused.adds, 4 * L);
      EXPECT_EQ(fused.norms, composed.norms);
      // (bytes need the access hooks, which a sanitizer build of the emulator does not compile in)
      if (cuemu::access_checks()) {
        EXPECT_NEAR(composed.bytes - fused.bytes, 6.0 * L * NC * sizeof(float), 0.02 * 6.0 * L * NC * sizeof(float));
      } else {
        std::printf("(no access hooks in this build: the DRAM bytes are not counted)\n");
      }
#endif
    }
}

TEST_P(CudaModel, TrainingStepsMatchTheCpu) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  check_training_steps(GetParam(), 0);
}

// Sliding-window attention (window 4 < T = 9) through the fused kernels, with a bias encoding and
// a content-position one.
TEST(CudaModelWindow, TrainingStepsMatchTheCpu) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  for (const json& pe : {json{{"type", "alibi"}}, json{{"type", "shaw"}, {"max_relative_position", 4}}}) {
    SCOPED_TRACE(pe.dump());
    check_training_steps(pe, 4);
  }
}

// The 2023-24 RoPE scalings past their L = 4 (T = 9), and attention sinks (window 4, 2 sinks) with
// rope and a bias (the composed attention: POSENC_SPEC §2, §6).
TEST(CudaModel2024, ScalingsAndSinksTrainingStepsMatchTheCpu) {
  if (!cuda::emulated() && cuda::device_count() == 0) GTEST_SKIP() << "skipped: no GPU (cuda::device_count() is 0)";
  auto rope = [](const json& sc) { return json{{"type", "rope"}, {"scaling", sc}}; };
  for (const json& pe : {rope({{"type", "llama3"}, {"factor", 4}, {"original_context", 4}}),
                         rope({{"type", "longrope"}, {"original_context", 4}, {"short_factor", {1, 1, 2, 2}},
                               {"long_factor", {1, 2, 4, 8}}}),
                         rope({{"type", "self-extend"}, {"window", 3}, {"group", 2}})}) {
    SCOPED_TRACE(pe.dump());
    check_training_steps(pe, 0);
  }
  for (const json& pe : {json{{"type", "rope"}}, json{{"type", "alibi"}}}) {
    SCOPED_TRACE(pe.dump() + " with 2 sinks");
    check_training_steps_with(pe, 4, true, 2);
    check_training_steps_with(pe, 4, false, 2);
  }
}

// The graph-free decoder on the device (nn/decode_engine.h): each step's logits are the device's
// graph path's (GPT::forward_cached: the same kernels but the output head's) and the CPU decoder's
// (f32, other summation orders), for one row and two; a warm step reaches no cudaMalloc.
TEST(CudaModelDecode, LogitsMatchTheGraphPathAndTheCpu) {
  CTX_SKIP_WITHOUT_GPU(cuda::emulated() || cuda::device_count() > 0);
  for (const json& pe : {json{{"type", "learned"}}, json{{"type", "rope"}}})
    for (int64_t B : {1, 2}) {
      SCOPED_TRACE(pe.dump() + " B " + std::to_string(B));
      nn::GPT mc(tiny_cfg(pe)), mg(tiny_cfg(pe));
      mc.init_weights(3), mg.init_weights(3);
      mg.to(Device::CUDA);
      mc.eval(), mg.eval();
      NoGradGuard g;
      const int64_t cap = 24, V = mc.cfg.vocab_size;
      std::string why;
      auto ec = nn::DecodeEngine::make(mc, B, cap, 0, &why), eg = nn::DecodeEngine::make(mg, B, cap, 0, &why);
      ASSERT_TRUE(ec && eg) << why;
      nn::KVCache cache = mg.make_cache(B, cap);
      Rng r(5);
      uint64_t warm_mallocs = 0;  // by the device engine's steps after the first four
      for (int64_t s = 0; s < cap; ++s) {
        std::vector<int32_t> tok((size_t)B);
        Tensor in = Tensor::empty({B, 1}, DType::I64);
        for (int64_t b = 0; b < B; ++b) in.set(b, (double)(tok[(size_t)b] = (int32_t)r.below((uint64_t)V)));
        const Tensor zc = ec->step(tok.data()).clone();
        const uint64_t m0 = cuda::device_alloc_stats().device_mallocs;
        const Tensor& zd = eg->step(tok.data());
        if (s >= 4) warm_mallocs += cuda::device_alloc_stats().device_mallocs - m0;
        const Tensor zg = zd.to(Device::CPU);
        const Tensor graph = mg.forward_cached(in, cache).data().to(Device::CPU).view({B, V});
        EXPECT_LE(rel_err(zg, graph), 1e-5) << "step " << s << ": the device's graph path";
        EXPECT_LE(rel_err(zg, zc), 1e-4) << "step " << s << ": the CPU's decoder";
      }
      EXPECT_EQ(warm_mallocs, 0u) << "a warm step reached cudaMalloc";
    }
}

INSTANTIATE_TEST_SUITE_P(Encodings, CudaModel,
                         ::testing::Values(json{{"type", "learned"}}, json{{"type", "rope"}}, json{{"type", "alibi"}},
                                           json{{"type", "sinusoidal"}},
                                           json{{"type", "t5"}, {"num_buckets", 8}, {"max_distance", 16}},
                                           json{{"type", "shaw"}, {"max_relative_position", 4}}, json{{"type", "xl"}},
                                           json{{"type", "deberta"}, {"position_buckets", 4}, {"max_relative_positions", 8}},
                                           json{{"type", "tupe"}}, json{{"type", "fire"}, {"init_L", 4}},
                                           json{{"type", "cope"}, {"npos_max", 5}}),
                         [](const ::testing::TestParamInfo<json>& i) { return i.param["type"].get<std::string>(); });
#endif

}  // namespace
