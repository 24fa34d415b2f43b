// tests/test_decode_engine.cpp — the graph-free decoder (nn/decode_engine.h) and what it stands on:
// its logits are the graph path's (GPT::forward_cached) step by step for every encoding it serves,
// with a window, for one sequence on a team of threads and for several rows, through a prompt
// longer than its chunk, whether a step is one backend call or runs op by op (and the two agree bit
// for bit); the models it does not serve are named with their reason; a warm step
// takes nothing from any allocator; core/team.h's shares, barrier and failure; the CPU kernels'
// scratch arena (core/cpu/scratch_arena.h); and sample_many's rows.
#include <atomic>
#include <cmath>
#include <thread>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "autograd/variable.h"
#include "core/allocator.h"
#include "core/backend.h"
#include "core/cpu/fused.h"  // decode_packs_made
#include "core/cpu/scratch_arena.h"
#include "core/fast_paths.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/team.h"
#include "core/threads.h"
#include "nn/decode_engine.h"
#include "nn/gpt.h"
#include "train/sample.h"

using namespace ctx;

namespace {

class DecodeEngineTest : public ::testing::Test {
 protected:
  void TearDown() override {
    ctx::set_num_threads(saved_);
    reset_fast_path(FastPath::Decode);
    reset_fast_path(FastPath::DecodeStep);
  }
  int saved_ = ctx::num_threads();
};

nlohmann::json rope(nlohmann::json sc) {
  nlohmann::json p = {{"type", "rope"}};
  if (!sc.is_null()) p["scaling"] = sc;
  return p;
}

// Weights larger than the default init, so that logits depend strongly on positions and context.
std::unique_ptr<nn::GPT> model_for(const nlohmann::json& posenc, int64_t context = 128) {
  auto m = std::make_unique<nn::GPT>(testing_util::two_head_cfg(61, 32, 2, 64, context, posenc));
  m->init_weights(5);
  testing_util::randomize_weights(*m, 11, 0.3);
  m->eval();
  return m;
}

std::vector<int32_t> ids(int64_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t((size_t)n);
  for (auto& x : t) x = (int32_t)rng.below(61);
  return t;
}

// max |a - b| / (1 + max |b|) over two [B, V] f32 host tensors
double rel(const Tensor& a, const Tensor& b) {
  double e = 0, mx = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    e = std::max(e, std::fabs(a.at(i) - b.at(i)));
    mx = std::max(mx, std::fabs(b.at(i)));
  }
  return e / (1 + mx);
}

// The graph path's last-row logits [B, V] of forward_cached(tokens [B, T]).
Tensor graph_step(nn::GPT& m, nn::KVCache& cache, const std::vector<int32_t>& tok, int64_t B, int64_t T) {
  Tensor x = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) x.set(i, tok[(size_t)i]);
  const Tensor z = m.forward_cached(x, cache).data();  // [B, T, V]
  const int64_t V = z.size(2);
  Tensor r = Tensor::empty({B, V});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t v = 0; v < V; ++v) r.set(b * V + v, z.at((b * T + T - 1) * V + v));
  return r;
}

// A prompt of `prompt` tokens per row, then `steps` one-token steps: the engine against the graph
// path, every step. Returns the worst error.
double engine_vs_graph(const nlohmann::json& posenc, int64_t B, int64_t window, int64_t prompt, int64_t steps,
                       int64_t context = 128) {
  auto m = model_for(posenc, context);
  NoGradGuard g;
  m->set_attention_window(window);
  const int64_t cap = prompt + steps;
  std::string why;
  auto e = nn::DecodeEngine::make(*m, B, cap, window, &why);
  EXPECT_TRUE(e) << posenc.dump() << ": " << why;
  if (!e) return 1;
  nn::KVCache cache = m->make_cache(B, cap, window);
  const auto seq = ids(B * cap, 23);  // row b: seq[b cap ..]
  std::vector<int32_t> in;
  for (int64_t b = 0; b < B; ++b) in.insert(in.end(), seq.begin() + b * cap, seq.begin() + b * cap + prompt);
  double worst = rel(e->step(in.data(), prompt), graph_step(*m, cache, in, B, prompt));
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int32_t> one;
    for (int64_t b = 0; b < B; ++b) one.push_back(seq[(size_t)(b * cap + prompt + s)]);
    const Tensor got = e->step(one.data());
    const Tensor want = graph_step(*m, cache, one, B, 1);
    worst = std::max(worst, rel(got, want));
    EXPECT_EQ(e->length(), prompt + s + 1);
  }
  m->set_attention_window(0);
  return worst;
}

}  // namespace

// Every encoding the engine serves, with and without a window, one row on a team of two threads and
// three rows: each step's logits are the graph path's (the same kernels; only the output head's
// products are summed by another kernel, a Linear's).
TEST_F(DecodeEngineTest, LogitsEqualTheGraphPathForEveryEncodingItServes) {
  ctx::set_num_threads(2);
  const std::vector<std::pair<std::string, nlohmann::json>> encs = {
      {"none", {{"type", "none"}}},
      {"learned", {{"type", "learned"}}},
      {"sinusoidal", {{"type", "sinusoidal"}}},
      {"rope", rope(nullptr)},
      {"rope_interleaved", {{"type", "rope"}, {"pairing", "interleaved"}}},
      {"rope_pi", rope({{"type", "pi"}, {"factor", 4}})},
      {"rope_yarn", rope({{"type", "yarn"}, {"factor", 4}})},
      {"rope_llama3", rope({{"type", "llama3"}, {"factor", 4}, {"original_context", 8}})},
      {"rope_dynamic_ntk_within_L", rope({{"type", "dynamic-ntk"}, {"factor", 2}})},
  };
  for (bool whole : {true, false}) {  // one backend call a step (the CPU's default), op by op
    set_fast_path(FastPath::DecodeStep, whole);
    for (const auto& [name, pe] : encs)
      for (int64_t B : {1, 3})
        for (int64_t window : {0, 6}) {
          const double e = engine_vs_graph(pe, B, window, 5, 40);
          EXPECT_LE(e, 1e-5) << name << " B " << B << " window " << window << (whole ? " one call" : " op by op");
        }
  }
}

// The whole step as one backend call (Backend::make_decode_step; the CPU's core/cpu/decode_step.cpp)
// against the engine's op-by-op step on the same model: the same bits for one sequence, every
// step, for every kind of table it reads (none, an additive table, rotary pairs of both kinds), both
// norms, a window, sizes that leave every kernel a tail (Dh 20 and 15, K 40, F 72, V 61), one to three
// threads, fp32 and bf16 GEMM inputs. With three sequences the op-by-op step's layer norms run
// oneDNN's kernel over the rows, so there the two agree to rounding (1e-5 in fp32, bf16's 1e-2;
// rmsnorm: the same loop, bits):
// the whole step keeps the plain loop, which a team's threads run without oneDNN's lock.
TEST_F(DecodeEngineTest, OneCallAStepGivesTheOpByOpStepsBits) {
  struct Case {
    std::string name;
    nlohmann::json pe;
    std::string norm;
    int64_t d_model, d_ff, window;
  };
  const std::vector<Case> cases = {
      {"none", {{"type", "none"}}, "layernorm", 32, 64, 0},
      {"learned", {{"type", "learned"}}, "rmsnorm", 32, 64, 6},
      {"rope", rope(nullptr), "layernorm", 40, 72, 0},
      {"rope_interleaved", {{"type", "rope"}, {"pairing", "interleaved"}}, "rmsnorm", 40, 72, 5},
      {"sinusoidal", {{"type", "sinusoidal"}}, "layernorm", 40, 72, 7},
      {"learned_odd_head_dim", {{"type", "learned"}}, "layernorm", 30, 56, 0},  // Dh 15
  };
  auto logits = [](const Case& c, bool whole, int threads, int64_t B) {
    set_fast_path(FastPath::DecodeStep, whole);
    ctx::set_num_threads(threads);
    ModelConfig cfg = testing_util::two_head_cfg(61, c.d_model, 2, c.d_ff, 64, c.pe);
    cfg.norm = c.norm;
    nn::GPT m(cfg);
    m.init_weights(5);
    testing_util::randomize_weights(m, 11, 0.3);
    m.eval();
    NoGradGuard g;
    m.set_attention_window(c.window);
    auto e = nn::DecodeEngine::make(m, B, 40, c.window, nullptr);
    EXPECT_TRUE(e);
    if (!e) return std::vector<float>();
    EXPECT_STREQ(e->step_kind(), whole ? "one backend call" : "op by op");
    const auto tok = ids(40 * B, 3);
    std::vector<float> all;
    const Tensor& p = e->step(tok.data(), 4);  // a prompt: op by op either way (the chunk path)
    all.insert(all.end(), p.host<float>(), p.host<float>() + p.numel());
    for (int64_t s = 4; s < 40; ++s) {
      const Tensor& z = e->step(&tok[(size_t)(s * B)]);
      all.insert(all.end(), z.host<float>(), z.host<float>() + z.numel());
    }
    return all;
  };
  for (bool bf16 : {false, true}) {
    if (bf16 && !testing_util::cpu_runs_bf16_else_check_refusal()) continue;
    PrecisionScope ps(bf16 ? Precision::BF16 : Precision::FP32);
    for (const Case& c : cases)
      for (int threads : {1, 2, 3})
        for (int64_t B : {1, 3}) {
          SCOPED_TRACE(c.name + (bf16 ? " bf16" : " fp32") + " threads " + std::to_string(threads) + " B " +
                       std::to_string(B));
          const auto one = logits(c, true, threads, B), ops = logits(c, false, threads, B);
          ASSERT_EQ(one.size(), ops.size());
          ASSERT_FALSE(one.empty());
          double worst = 0;
          size_t differ = 0;
          for (size_t i = 0; i < one.size(); ++i) {
            worst = std::max(worst, (double)std::fabs(one[i] - ops[i]) / (1 + std::fabs(ops[i])));
            differ += one[i] != ops[i];
          }
          if (B == 1 || c.norm == "rmsnorm") EXPECT_EQ(differ, 0u) << "of " << one.size() << ", worst " << worst;
          // (a norm's last bit moves a bf16 rounding of the next input, and 36 steps carry it on:
          // up to 4.2e-3 seen in the sanitizer build; the bf16 GEMV's own bound is 1e-2, test_gemv)
          else EXPECT_LE(worst, bf16 ? 1e-2 : 1e-5);
        }
  }
}

// The CPU step's pack of the weights is kept by the model (core/decode_step.h, DecodeKeep): a second
// engine over the same weights makes none and gives the first one's logits; a write to one weight
// retires it (the next engine packs again and follows the new weight, bit for bit with the op-by-op
// step, which reads the weights themselves); so does a change of precision.
TEST_F(DecodeEngineTest, TheStepsPackIsKeptWhileTheWeightsAreUnchanged) {
  auto m = model_for({{"type", "learned"}});
  NoGradGuard g;
  const auto tok = ids(12, 7);
  auto run = [&](bool whole) {
    set_fast_path(FastPath::DecodeStep, whole);
    auto e = nn::DecodeEngine::make(*m, 1, 16, 0, nullptr);
    EXPECT_STREQ(e->step_kind(), whole ? "one backend call" : "op by op");
    std::vector<float> all;
    for (int32_t t : tok) {
      const Tensor& z = e->step(&t);
      all.insert(all.end(), z.host<float>(), z.host<float>() + z.numel());
    }
    return all;
  };
  const int64_t n0 = cpu::decode_packs_made();
  const auto first = run(true);
  EXPECT_EQ(cpu::decode_packs_made(), n0 + 1);
  EXPECT_EQ(run(true), first) << "the kept pack gives the first engine's logits";
  EXPECT_EQ(cpu::decode_packs_made(), n0 + 1) << "a second engine over the same weights packed them again";
  // one weight written: the pack is retired, the next engine packs the new weight
  m->blocks[1]->mlp->fc->weight.data().data<float>()[5] += 0.75f;
  const auto after = run(true);
  EXPECT_EQ(cpu::decode_packs_made(), n0 + 2) << "a written weight did not retire the kept pack";
  EXPECT_NE(after, first);
  EXPECT_EQ(after, run(false)) << "the new pack against the op-by-op step (the weights themselves)";
  if (testing_util::cpu_runs_bf16_else_check_refusal()) {
    {
      PrecisionScope ps(Precision::BF16);
      run(true);
    }
    EXPECT_EQ(cpu::decode_packs_made(), n0 + 3) << "bf16 took the fp32 pack";
    EXPECT_EQ(run(true), after);
    EXPECT_EQ(cpu::decode_packs_made(), n0 + 4) << "fp32 took the bf16 pack";
  }
}

// The whole step is the backend's to offer: where it has none (an f64 model; CUDA) or the switch is
// off the engine runs op by op; a stack that does not fit its description is refused naming the
// tensor.
TEST_F(DecodeEngineTest, WhereTheBackendHasNoWholeStepTheEngineRunsOpByOp) {
  {
    ModelConfig cfg = testing_util::two_head_cfg(61, 32, 2, 64, 64, rope(nullptr));
    nn::GPT m(cfg, DType::F64);
    m.init_weights(5);
    m.eval();
    NoGradGuard g;
    auto e = nn::DecodeEngine::make(m, 1, 16, 0, nullptr);
    ASSERT_TRUE(e);
    EXPECT_STREQ(e->step_kind(), "op by op");
  }
  auto m = model_for(rope(nullptr));
  NoGradGuard g;
  EXPECT_STREQ(nn::DecodeEngine::make(*m, 1, 16, 0, nullptr)->step_kind(), "one backend call");
  set_fast_path(FastPath::DecodeStep, false);
  EXPECT_STREQ(nn::DecodeEngine::make(*m, 1, 16, 0, nullptr)->step_kind(), "op by op");
  // a stack whose cache has the wrong number of rows, or a missing weight
  DecodeStack s;
  s.B = 1, s.H = 2, s.Dh = 16, s.capacity = 8;
  auto blk = [&] {
    DecodeLayer l;
    auto t = [](const Shape& sh) { return Tensor::zeros(sh, DType::F32); };
    l.norm1_w = t({32}), l.norm1_b = t({32}), l.norm2_w = t({32}), l.norm2_b = t({32});
    l.qkv_w = t({96, 32}), l.qkv_b = t({96}), l.proj_w = t({32, 32}), l.proj_b = t({32});
    l.fc_w = t({64, 32}), l.fc_b = t({64}), l.mproj_w = t({32, 64}), l.mproj_b = t({32});
    l.k_cache = t({1, 2, 8, 16}), l.v_cache = t({1, 2, 7, 16});
    return l;
  };
  s.layers = {blk()};
  s.wte = Tensor::zeros({61, 32}, DType::F32);
  s.head_w = s.wte;
  s.norm_f_w = Tensor::zeros({32}, DType::F32), s.norm_f_b = Tensor::zeros({32}, DType::F32);
  Backend& be = backend(Device::CPU);
  testing_util::expect_error([&] { be.make_decode_step(s, 2); },
                             {"make_decode_step", "layer 0 v_cache", "[1, 2, 7, 16]", "[1, 2, 8, 16]"});
  s.layers[0].v_cache = Tensor::zeros({1, 2, 8, 16}, DType::F32);
  EXPECT_TRUE(be.make_decode_step(s, 2));
  s.layers[0].fc_b = Tensor();
  testing_util::expect_error([&] { be.make_decode_step(s, 2); }, {"make_decode_step", "layer 0 fc_b", "undefined"});
}

// A prompt longer than the engine's chunk (64 positions) goes through in chunks and the cache is
// the same afterwards.
TEST_F(DecodeEngineTest, PromptsLongerThanAChunk) {
  EXPECT_LE(engine_vs_graph(rope(nullptr), 2, 0, 150, 8, 256), 1e-5);
  EXPECT_LE(engine_vs_graph({{"type", "learned"}}, 1, 0, 70, 8, 128), 1e-5);
}

// The team splits every weight by rows and the heads among its threads: one thread and two give
// the same bits.
TEST_F(DecodeEngineTest, ATeamOfThreadsGivesOneThreadsBits) {
  auto run = [](int threads, int64_t B) {
    ctx::set_num_threads(threads);
    auto m = model_for(rope(nullptr));
    NoGradGuard g;
    auto e = nn::DecodeEngine::make(*m, B, 40, 0, nullptr);
    EXPECT_TRUE(e);
    std::vector<float> all;
    const auto tok = ids(40 * B, 3);
    for (int64_t s = 0; s < 40; ++s) {
      const Tensor z = e->step(&tok[(size_t)(s * B)]);
      all.insert(all.end(), z.host<float>(), z.host<float>() + z.numel());
    }
    return all;
  };
  for (bool whole : {true, false})
    for (int64_t B : {1, 3}) {  // one row: column views; three: each thread's columns scattered
    set_fast_path(FastPath::DecodeStep, whole);
    const auto one = run(1, B), two = run(2, B), three = run(3, B);
    ASSERT_EQ(one.size(), two.size());
    for (size_t i = 0; i < one.size(); ++i) {
      ASSERT_EQ(one[i], two[i]) << "B " << B << " " << i;
      ASSERT_EQ(one[i], three[i]) << "B " << B << " " << i;
    }
  }
}

TEST_F(DecodeEngineTest, ModelsItDoesNotServeAreNamedWithTheirReason) {
  auto why = [](const nlohmann::json& pe, int64_t window = 0, int64_t sinks = 0, int64_t cap = 40) {
    auto m = model_for(pe);
    m->set_attention_window(window, sinks);
    std::string w;
    auto e = nn::DecodeEngine::make(*m, 1, cap, window, &w);
    EXPECT_FALSE(e) << pe.dump();
    return w;
  };
  EXPECT_NE(why({{"type", "alibi"}}).find("posenc alibi decodes through its hooks"), std::string::npos);
  EXPECT_NE(why({{"type", "t5"}}).find("posenc t5"), std::string::npos);
  EXPECT_NE(why(rope({{"type", "rerope"}, {"window", 6}})).find("posenc rope"), std::string::npos);
  EXPECT_NE(why(rope({{"type", "ntk"}, {"factor", 2}, {"log_n", true}})).find("posenc rope"), std::string::npos);
  // dynamic NTK past its original context re-encodes every position: only within L
  EXPECT_NE(why(rope({{"type", "dynamic-ntk"}, {"factor", 2}}), 0, 0, 200).find("posenc rope"), std::string::npos);
  EXPECT_NE(why({{"type", "learned"}}, 0, 0, 200).find("posenc learned"), std::string::npos);  // past L
  EXPECT_NE(why(rope(nullptr), 8, 2).find("attention sinks"), std::string::npos);
  set_fast_path(FastPath::Decode, false);
  EXPECT_NE(why(rope(nullptr)).find("CTXLAB_FUSED_DECODE=0"), std::string::npos);
}

// A warm one-token step allocates nothing: no pool request, no block of the scratch arena.
TEST_F(DecodeEngineTest, AWarmStepAllocatesNothing) {
  for (bool bf16 : {false, true})
    for (bool whole : {true, false}) {
    if (bf16 && !testing_util::cpu_runs_bf16_else_check_refusal()) continue;
    PrecisionScope p(bf16 ? Precision::BF16 : Precision::FP32);
    set_fast_path(FastPath::DecodeStep, whole);
    ctx::set_num_threads(1);
    auto m = model_for(rope(nullptr));
    NoGradGuard g;
    auto e = nn::DecodeEngine::make(*m, 1, 64, 0, nullptr);
    ASSERT_TRUE(e);
    const auto tok = ids(64, 9);
    for (int i = 0; i < 8; ++i) e->step(&tok[(size_t)i]);  // warm: bf16 copies, the arena grown
    const PoolStats before = BufferPool::host().stats();
    const size_t arena = cpu::ScratchArena::mine().system_allocs();
    for (int i = 8; i < 64; ++i) e->step(&tok[(size_t)i]);
    const PoolStats after = BufferPool::host().stats();
    EXPECT_EQ(after.requests, before.requests) << (bf16 ? "bf16" : "fp32") << " " << e->step_kind();
    EXPECT_EQ(after.system_allocs, before.system_allocs);
    EXPECT_EQ(cpu::ScratchArena::mine().system_allocs(), arena);
  }
}

// A warm step enters the OpenMP runtime at most once: its team's region (none for a team of one).
// Every kernel it calls inside runs on its caller's thread without a region of its own
// (CTX_OMP_IF, core/cpu/parallel.h): an `if (false)` region per kernel cost the decoder ~200
// futex calls a token.
TEST_F(DecodeEngineTest, AWarmStepEntersTheOpenMpRuntimeAtMostOnce) {
  for (bool whole : {true, false})
    for (int threads : {1, 2}) {
    set_fast_path(FastPath::DecodeStep, whole);
    ctx::set_num_threads(threads);
    auto m = model_for(rope(nullptr));
    NoGradGuard g;
    auto e = nn::DecodeEngine::make(*m, 1, 64, 0, nullptr);
    ASSERT_TRUE(e);
    const auto tok = ids(64, 9);
    for (int i = 0; i < 8; ++i) e->step(&tok[(size_t)i]);
    const int64_t before = testing_util::gomp_parallel_calls(), teams = team_regions_started();
    for (int i = 8; i < 64; ++i) e->step(&tok[(size_t)i]);
    const int64_t regions = testing_util::gomp_parallel_calls() - before;
    EXPECT_EQ(regions, team_regions_started() - teams) << threads << " threads: only the team's regions";
    EXPECT_LE(regions, 56) << threads << " threads " << e->step_kind();
  }
}

TEST(Team, SharesCoverTheRangeInAlignedBlocks) {
  for (int size : {1, 2, 3, 4})
    for (int64_t n : {0, 1, 15, 16, 17, 100, 768}) {
      int64_t next = 0;
      for (int r = 0; r < size; ++r) {
        const auto s = Team(r, size).share(n, 16);
        EXPECT_EQ(s.first, std::min(next, n)) << size << " " << n;
        EXPECT_LE(s.first, s.second);
        if (s.second < n) {
          EXPECT_EQ(s.second % 16, 0);
        }
        next = s.second;
      }
      EXPECT_EQ(next, n);
    }
}

// Each stage sees what every thread wrote before the barrier; a thread that throws releases the
// others (no hang) and the caller gets its exception.
TEST(Team, BarrierOrdersStagesAndAFailureReachesTheCaller) {
  std::vector<int> a(2, 0), seen(2, -1);
  std::atomic<int> size{0};
  run_team(2, [&](const Team& t) {
    size = t.size();
    a[(size_t)t.rank()] = t.rank() + 1;
    t.barrier();
    if (t.size() == 2) seen[(size_t)t.rank()] = a[(size_t)(1 - t.rank())];
  });
  if (size == 2) {  // (the runtime gave two threads: each saw what the other wrote before the barrier)
    EXPECT_EQ(seen[0], 2);
    EXPECT_EQ(seen[1], 1);
  }
  testing_util::expect_error(
      [] {
        run_team(2, [](const Team& t) {
          if (t.rank() == t.size() - 1) throw Error("stage failed on the last rank");
          for (int i = 0; i < 3; ++i) t.barrier();
        });
      },
      {"stage failed on the last rank"});
}

TEST(ScratchArena, ReleasedInReverseOrderAndReusedWithoutNewBlocks) {
  std::thread([] {  // a fresh thread: its own arena
    cpu::ScratchArena& a = cpu::ScratchArena::mine();
    EXPECT_EQ(a.system_allocs(), 0u);
    auto round = [] {
      cpu::Scratch<float> x(1000), y(200000), z(10);  // past the first 64 KiB block: a second one
      x[999] = 1, y[199999] = 2, z[9] = 3;
      EXPECT_EQ((reinterpret_cast<uintptr_t>(y.data()) % 64), 0u);
      EXPECT_EQ(x[999] + y[199999] + z[9], 6.f);
    };
    round();
    const size_t grown = a.system_allocs();
    EXPECT_GE(grown, 2u);
    for (int i = 0; i < 5; ++i) round();  // everything released: one block holds it all now
    EXPECT_LE(a.system_allocs(), grown + 1);
    const size_t warm = a.system_allocs();
    for (int i = 0; i < 5; ++i) round();
    EXPECT_EQ(a.system_allocs(), warm);
  }).join();
}

// Several samples in one batch: each row draws with seed + b (sample 0 is sample()'s), deterministic;
// a model the graph-free decoder does not serve refuses more than one sample, naming why.
TEST_F(DecodeEngineTest, SampleManyDrawsEachRowWithItsSeed) {
  auto m = model_for(rope(nullptr));
  SampleOptions o;
  o.max_tokens = 20;
  o.temperature = 1.0;
  o.top_k = 0;
  o.seed = 4;
  o.num_samples = 3;
  const std::vector<int32_t> prompt = {1, 2, 3};
  const SampleResult a = sample_many(*m, prompt, o), b = sample_many(*m, prompt, o);
  EXPECT_EQ(a.path, "kv cache, graph-free decoder, one backend call a step");
  ASSERT_EQ(a.tokens.size(), 3u);
  EXPECT_EQ(a.tokens, b.tokens);
  for (const auto& t : a.tokens) EXPECT_EQ(t.size(), 20u);
  EXPECT_NE(a.tokens[0], a.tokens[1]);
  EXPECT_NE(a.tokens[1], a.tokens[2]);
  auto alibi = model_for({{"type", "alibi"}});
  testing_util::expect_error([&] { sample_many(*alibi, prompt, o); },
                             {"--num-samples 3", "graph-free decoder", "posenc alibi"});
  o.num_samples = 0;
  testing_util::expect_error([&] { sample_many(*m, prompt, o); }, {"--num-samples", ">= 1", "0"});
}
