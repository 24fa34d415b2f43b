// tests/test_kv_cache.cpp — incremental decoding (nn/kv_cache.h, GPT::forward_cached): for every
// encoding (the survey's rnn, floater, complex-order included) and every rotary scaling, a prompt then 64 teacher-forced tokens fed one at a time
// through the cache give the logits of the full recompute over the whole sequence so far (fp32:
// |cached - full| <= 1e-4 (1 + max |full|) per step), past the trained context (L = 16) where the
// scalings act (dynamic NTK: up to L, past which forward_cached refuses and sample recomputes),
// with a sliding window, with attention sinks (a rolling cache), and with Transformer-XL memory (reference: the segment recurrence).
// And `sample` with and without the cache gives the same tokens; learned positions past L follow
// the context shift (a hand computation).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/test_util.h"
#include "autograd/variable.h"
#include "core/allocator.h"
#include "core/cpu/bf16_convert.h"
#include "core/fast_paths.h"
#include "core/threads.h"
#include "core/precision.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "train/sample.h"

using namespace ctx;

namespace {

constexpr int64_t kPrompt = 5, kSteps = 64;

// Tiny shapes and thousands of small ops: one thread is fastest and keeps OpenMP's wake-ups on a
// loaded machine from stretching the test (as tests/test_posenc_content.cpp).
class KVCacheTest : public ::testing::Test {
 protected:
  void SetUp() override { ctx::set_num_threads(1); }
  void TearDown() override { ctx::set_num_threads(saved_); }
  int saved_ = ctx::num_threads();
};

struct Case {
  std::string name;
  nlohmann::json posenc;
  int64_t context = 16;
  int64_t window = 0;
  int64_t sinks = 0;  // with window: attention sinks, a rolling cache of sinks + window rows
};

std::vector<Case> cases() {
  auto rope = [](nlohmann::json sc) {
    nlohmann::json p = {{"type", "rope"}};
    if (!sc.is_null()) p["scaling"] = sc;
    return p;
  };
  return {
      {"none", {{"type", "none"}}},
      {"learned", {{"type", "learned"}}, 80},  // learned / tupe cannot pass L: L covers all 69
      {"learned_hier", {{"type", "learned"}, {"hierarchical", true}}},
      {"sinusoidal", {{"type", "sinusoidal"}}},
      {"rope", rope(nullptr)},
      {"rope_interleaved", {{"type", "rope"}, {"pairing", "interleaved"}}},
      {"rope_pi", rope({{"type", "pi"}, {"factor", 4}})},
      {"rope_ntk", rope({{"type", "ntk"}, {"factor", 4}})},
      {"rope_dynamic_ntk", rope({{"type", "dynamic-ntk"}, {"factor", 2}})},
      {"rope_yarn", rope({{"type", "yarn"}, {"factor", 4}})},
      {"rope_rerope", rope({{"type", "rerope"}, {"window", 6}})},
      {"rope_leaky_rerope", rope({{"type", "leaky-rerope"}, {"window", 6}, {"factor", 8}})},
      {"rope_log_n", rope({{"type", "ntk"}, {"factor", 2}, {"log_n", true}})},
      {"xpos", {{"type", "xpos"}}},
      {"alibi", {{"type", "alibi"}}},
      {"kerple_log", {{"type", "kerple"}}},
      {"kerple_power", {{"type", "kerple"}, {"variant", "power"}}},
      {"sandwich", {{"type", "sandwich"}}},
      {"t5", {{"type", "t5"}, {"num_buckets", 8}, {"max_distance", 20}}},
      {"shaw", {{"type", "shaw"}, {"max_relative_position", 4}}},
      {"xl", {{"type", "xl"}}},
      {"deberta", {{"type", "deberta"}, {"position_buckets", 8}, {"max_relative_positions", 20}}},
      {"tupe", {{"type", "tupe"}}, 80},
      {"rnn", {{"type", "rnn"}}},
      {"floater", {{"type", "floater"}, {"hidden", 8}, {"dt", 0.05}}},
      {"complex_order", {{"type", "complex-order"}}},
      {"rope_window", rope(nullptr), 16, 7},
      {"alibi_window", {{"type", "alibi"}}, 16, 7},
      {"xl_window", {{"type", "xl"}}, 16, 7},
      {"rope_llama3", rope({{"type", "llama3"}, {"factor", 4}, {"original_context", 8}})},
      {"rope_longrope", rope({{"type", "longrope"}, {"short_factor", nlohmann::json(std::vector<double>(8, 1.5))},
                              {"long_factor", nlohmann::json(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8})}})},
      {"rope_self_extend", rope({{"type", "self-extend"}, {"window", 6}, {"group", 3}})},
      // sinks: the cache rolls past sinks + window = 10 positions (the prompt is 5)
      {"rope_sinks", rope(nullptr), 16, 7, 3},
      {"rope_yarn_sinks", rope({{"type", "yarn"}, {"factor", 4}}), 16, 7, 3},
      {"alibi_sinks", {{"type", "alibi"}}, 16, 7, 3},
      {"t5_sinks", {{"type", "t5"}, {"num_buckets", 8}, {"max_distance", 20}}, 16, 7, 3},
      {"none_sinks", {{"type", "none"}}, 16, 7, 3},
      {"sinusoidal_sinks", {{"type", "sinusoidal"}}, 16, 6, 1},
      {"learned_sinks", {{"type", "learned"}}, 80, 7, 3},
      // cope: the gates count the keys the window and the sinks leave visible, which the rolling
      // cache holds (positions saturate at npos_max - 1 = 16 on the long steps)
      {"cope", {{"type", "cope"}}},
      {"cope_window", {{"type", "cope"}}, 16, 7},
      {"cope_sinks", {{"type", "cope"}}, 16, 7, 3},
  };
}

ModelConfig config(const nlohmann::json& posenc, int64_t context) {
  ModelConfig c = testing_util::two_head_cfg(256, 32, 2, 64, context, posenc);
  return c;
}

// Larger-than-default weights, so that the logits depend strongly on positions and context.
std::unique_ptr<nn::GPT> model_for(const nlohmann::json& posenc, int64_t context, uint64_t seed = 3) {
  auto m = std::make_unique<nn::GPT>(config(posenc, context));
  m->init_weights(seed);
  Rng rng(seed + 7);
  for (auto& [name, p] : m->named_parameters())
    if (name.find("norm") == std::string::npos) rng.fill_normal(p.data(), 0.0, 0.3);
  m->eval();
  return m;
}

std::vector<int32_t> tokens(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = (int32_t)rng.below(256);
  return t;
}

Tensor as_tensor(const std::vector<int32_t>& t, size_t begin, size_t end) {
  Tensor x = Tensor::empty({1, (int64_t)(end - begin)}, DType::I64);
  for (size_t i = begin; i < end; ++i) x.set((int64_t)(i - begin), t[i]);
  return x;
}

// Last row [V] of logits [1, n, V] as doubles.
std::vector<double> last(const Variable& z) {
  const Tensor d = z.data();
  const int64_t n = d.size(1), V = d.size(2);
  std::vector<double> r((size_t)V);
  for (int64_t v = 0; v < V; ++v) r[(size_t)v] = d.at((n - 1) * V + v);
  return r;
}

// max |a - b| / (1 + max |b|)
double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  double e = 0, mx = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::fabs(a[i] - b[i]));
    mx = std::max(mx, std::fabs(b[i]));
  }
  return e / (1 + mx);
}

constexpr double kTol = 1e-4;

// Prompt through the cache, then kSteps tokens one at a time; each step's logits against the
// full forward over the whole sequence so far (with the same window). Returns the worst error.
double max_cache_error(const Case& c, bool* positions_matter = nullptr, double tol = kTol) {
  auto m = model_for(c.posenc, c.context);
  NoGradGuard g;
  const auto seq = tokens(kPrompt + kSteps, 17);
  nn::KVCache cache = m->make_cache(1, kPrompt + kSteps, c.window, c.sinks);
  m->set_attention_window(c.window, c.sinks);
  double worst = 0;
  std::vector<double> prev;
  bool varies = false;
  const int64_t limit = m->pe->decode_limit();
  for (int64_t s = 0; s <= kSteps; ++s) {
    const size_t end = (size_t)(kPrompt + s), begin = s == 0 ? 0 : end - 1;
    if (limit > 0 && (int64_t)end > limit) {  // dynamic NTK past L: refused (sample recomputes)
      testing_util::expect_error([&] { m->forward_cached(as_tensor(seq, begin, end), cache); },
                                 {"at most " + std::to_string(limit) + " positions", "recompute"});
      break;
    }
    Variable zc = m->forward_cached(as_tensor(seq, begin, end), cache);
    EXPECT_EQ(zc.size(1), (int64_t)(end - begin));  // only the new positions are computed
    EXPECT_EQ(cache.length(), (int64_t)end);
    if (c.sinks > 0) {
      EXPECT_EQ(cache.rows(), std::min<int64_t>((int64_t)end, c.sinks + c.window));
    }
    const auto full = last(m->forward(as_tensor(seq, 0, end)));
    const auto cached = last(zc);
    const double e = rel_err(cached, full);
    EXPECT_LE(e, tol) << c.name << ": step " << s << " (position " << end - 1 << ")";
    worst = std::max(worst, e);
    if (!prev.empty() && rel_err(prev, full) > 1e-3) varies = true;
    prev = full;
  }
  m->set_attention_window(0);
  if (positions_matter) *positions_matter = varies;
  return worst;
}

TEST_F(KVCacheTest, CachedLogitsEqualFullRecomputeForEveryEncoding) {
  for (const Case& c : cases()) {
    bool varies = false;
    const double e = max_cache_error(c, &varies);
    EXPECT_TRUE(varies) << c.name << ": the logits do not change between steps (degenerate model)";
    std::printf("  %-18s max |cached - full| / (1 + max|full|) = %.2e\n", c.name.c_str(), e);
  }
}

// A warm decode reaches no system allocator: once a generation has run (every size class of its
// growing [.., S] intermediates seen once), a second generation over the same positions after
// KVCache::clear() takes every buffer from the host pool (core/allocator.h) — per token only
// pool requests, no malloc and no fresh pages. Prints the pool requests per token.
TEST_F(KVCacheTest, WarmDecodeAllocatesNothingFromTheSystem) {
  for (const char* type : {"rope", "alibi", "xl"}) {
    auto m = model_for({{"type", type}}, 16);
    NoGradGuard g;
    const auto seq = tokens(kPrompt + kSteps, 29);
    nn::KVCache cache = m->make_cache(1, kPrompt + kSteps);
    auto generation = [&] {
      m->forward_cached(as_tensor(seq, 0, kPrompt), cache);
      const PoolStats before = BufferPool::host().stats();
      for (int64_t s = 1; s <= kSteps; ++s) {
        const size_t end = (size_t)(kPrompt + s);
        m->forward_cached(as_tensor(seq, end - 1, end), cache);
      }
      const PoolStats after = BufferPool::host().stats();
      cache.clear();
      return std::make_pair(after.system_allocs - before.system_allocs, after.requests - before.requests);
    };
    generation();
    const auto [system, requests] = generation();
    EXPECT_EQ(system, 0u) << type << ": a warm generation of " << kSteps << " tokens reached malloc";
    EXPECT_GT(requests, 0u);  // the counter does count this path
    std::printf("  %-6s pool requests per token: %.1f, system allocations: %llu\n", type,
                (double)requests / kSteps, (unsigned long long)system);
  }
}

// --precision bf16 decoding (the one-row Linear on the bf16 GEMV, weights converted once): each
// cached step follows the bf16 full forward, the weights are converted once for the whole
// generation (not per token), and bf16 was used (the logits differ from fp32's).
// The bound, 2^-7: both paths round the same weights and Linear inputs to bf16 and sum in fp32,
// in a different order (GEMV against oneDNN's GEMM), so an activation differs by ~1e-7 relative
// between them; one that lies that close to a bf16 rounding boundary rounds to the two
// neighbouring bf16 values, one bf16 ulp (2^-8..2^-7 of it) apart, and that flip reaches the
// logits. With ~350 rounded activations per token over 69 tokens and a ~2.5e-5 chance each,
// about 0.6 flips are expected per generation: whether one happens is chance, decided by the last
// bits of the fp32 arithmetic around the GEMMs. That is the -O1 / -O3 gap (2.29e-3 at -O1, 1.07e-6
// at -O3: the compiler changes those bits, not the kernels' correctness). Measured over 12
// model / token seeds at -O3: 6 generations without a flip (<= 1e-6), 6 with (5.9e-5 .. 3.97e-3).
// One flip at full weight moves the logits by at most one bf16 ulp of the input, 2^-7 relative;
// a wrong rounding or a wrong operand layout is off by far more (Gemv.*, Bf16.*).
TEST_F(KVCacheTest, Bf16DecodeConvertsEachWeightOnce) {
  if (!testing_util::cpu_runs_bf16_else_check_refusal()) return;
  const Case c{"rope", {{"type", "rope"}}};
  const size_t params = model_for(c.posenc, c.context)->named_parameters().size();
  const size_t before = cpu::bf16_copies_made();
  double e = 0;
  {
    PrecisionScope bf16(Precision::BF16);
    e = max_cache_error(c, nullptr, 0x1p-7);
  }
  const size_t made = cpu::bf16_copies_made() - before;
  EXPECT_GT(made, 0u) << "no weight was converted: the bf16 path was not taken";
  EXPECT_LE(made, params) << "weights converted per token (" << made << " copies for " << params
                          << " parameters over " << kSteps << " tokens)";
  const double fp32 = max_cache_error(c);
  std::printf("  bf16 decode: %zu weight copies for %lld tokens, worst cached-vs-full %.2e (fp32 %.2e)\n", made,
              (long long)(kPrompt + kSteps), e, fp32);
  // bf16 was used: the bf16 logits differ from the fp32 ones
  auto m = model_for(c.posenc, c.context);
  NoGradGuard g;
  const auto seq = tokens(kPrompt, 17);
  const auto z32 = last(m->forward(as_tensor(seq, 0, kPrompt)));
  PrecisionScope bf16(Precision::BF16);
  EXPECT_GT(rel_err(last(m->forward(as_tensor(seq, 0, kPrompt))), z32), 1e-5);
}

// Transformer-XL with memory: the reference is the segment recurrence (the prompt as one segment,
// then one token per call with use_memory), which the cache reproduces with a window of mem + 1.
TEST_F(KVCacheTest, XLMemoryEqualsSegmentRecurrence) {
  for (int64_t mem : {3, 10}) {
    auto m = model_for({{"type", "xl"}, {"mem_len", mem}}, 16);
    NoGradGuard g;
    const auto seq = tokens(kPrompt + kSteps, 23);
    nn::KVCache cache = m->make_cache(1, kPrompt + kSteps);
    Variable zc = m->forward_cached(as_tensor(seq, 0, kPrompt), cache);
    Variable zr = m->forward(as_tensor(seq, 0, kPrompt), 0, false);
    EXPECT_LE(rel_err(last(zc), last(zr)), kTol);
    double worst_full = 0;
    for (int64_t s = 1; s <= kSteps; ++s) {
      const size_t end = (size_t)(kPrompt + s);
      zc = m->forward_cached(as_tensor(seq, end - 1, end), cache);
      zr = m->forward(as_tensor(seq, end - 1, end), 0, true);
      EXPECT_LE(rel_err(last(zc), last(zr)), kTol) << "mem_len " << mem << " step " << s;
      // the memory bounds what a token sees: not the same as attending over everything
      const std::vector<Tensor> mem_state = m->memory_state();  // forward() without memory resets it
      worst_full = std::max(worst_full, rel_err(last(zc), last(m->forward(as_tensor(seq, 0, end)))));
      m->set_memory_state(mem_state);
    }
    EXPECT_GT(worst_full, 1e-3) << "mem_len " << mem << ": the memory made no difference";
  }
}

// The window of the cache is the window of the full recompute: a prompt then one token at a time
// through a cache of window 7 gives, at every step, the logits of the full forward with exactly
// window 7 (kTol), and those differ from full attention's and from windows 6 and 8 (by more than
// 10 kTol at some step: a window off by one is seen); with the fused attention and the composed.
TEST_F(KVCacheTest, WindowChangesTheLogits) {
  constexpr int64_t kWindow = 7, kLen = 40;
  for (const bool fused : {true, false}) {  // the fused attention's window, and the composed one's
    SCOPED_TRACE(fused ? "fused attention" : "composed attention");
    set_fast_path(FastPath::Attention, fused);
    auto m = model_for({{"type", "rope"}}, 16);
    NoGradGuard g;
    const auto seq = tokens(kLen, 5);
    nn::KVCache cache = m->make_cache(1, kLen, kWindow);
    auto full_with_window = [&](int64_t window, size_t end) {
      m->set_attention_window(window);
      const auto z = last(m->forward(as_tensor(seq, 0, end)));
      m->set_attention_window(0);
      return z;
    };
    double worst = 0, off_by_one = INFINITY, vs_full = 0;
    for (size_t end = kPrompt; end <= (size_t)kLen; ++end) {
      const auto zc = last(m->forward_cached(as_tensor(seq, end == kPrompt ? 0 : end - 1, end), cache));
      worst = std::max(worst, rel_err(zc, full_with_window(kWindow, end)));
      if (end > (size_t)kWindow + 1)  // windows 6, 7 and 8 coincide until the sequence passes 8
        off_by_one = std::min(off_by_one, std::max(rel_err(zc, full_with_window(kWindow - 1, end)),
                                                   rel_err(zc, full_with_window(kWindow + 1, end))));
      vs_full = std::max(vs_full, rel_err(zc, full_with_window(0, end)));
    }
    EXPECT_LE(worst, kTol);
    EXPECT_GT(vs_full, 10 * kTol);
    EXPECT_GT(off_by_one, 10 * kTol);
  }
  reset_fast_path(FastPath::Attention);
}

TEST_F(KVCacheTest, CapacityAndBadUseAreErrors) {
  auto m = model_for({{"type", "rope"}}, 16);
  NoGradGuard g;
  nn::KVCache cache = m->make_cache(1, 4);
  m->forward_cached(as_tensor(tokens(4, 1), 0, 4), cache);
  testing_util::expect_error([&] { m->forward_cached(as_tensor(tokens(1, 2), 0, 1), cache); },
                             {"5 positions", "capacity 4"});
  m->train();
  nn::KVCache c2 = m->make_cache(1, 4);
  testing_util::expect_error([&] { m->forward_cached(as_tensor(tokens(1, 2), 0, 1), c2); }, {"eval mode"});
}

// sample(): the cached and the recomputing paths give the same tokens, greedy and seeded, past
// the trained context (rope, alibi: extrapolation; learned: recompute of the last L; xl memory:
// segment recurrence) and with a window.
TEST_F(KVCacheTest, SampleSameTokensWithAndWithoutCache) {
  struct S {
    nlohmann::json posenc;
    int64_t window;
    int64_t sinks = 0;
  };
  const std::vector<S> ss = {{{{"type", "rope"}}, 0},
                             {{{"type", "rope"}, {"scaling", {{"type", "yarn"}, {"factor", 4}}}}, 0},
                             {{{"type", "rope"}, {"scaling", {{"type", "dynamic-ntk"}, {"factor", 2}}}}, 0},
                             {{{"type", "xpos"}}, 0},
                             {{{"type", "alibi"}}, 6},
                             {{{"type", "alibi"}}, 6, 2},  // 2 sinks: a rolling cache
                             {{{"type", "rope"}}, 5, 2},
                             {{{"type", "deberta"}}, 0},
                             {{{"type", "rnn"}}, 0},
                             {{{"type", "floater"}, {"hidden", 8}, {"dt", 0.05}}, 0},
                             {{{"type", "learned"}}, 0},
                             {{{"type", "xl"}, {"mem_len", 4}}, 0}};
  for (const S& s : ss) {
    auto m = model_for(s.posenc, 16, 9);
    const auto prompt = tokens(6, 31);
    for (double temp : {0.0, 1.0}) {
      SampleOptions o;
      o.max_tokens = 40;  // past the context of 16
      o.temperature = temp;
      o.top_k = 0;
      o.seed = 5;
      o.window = s.window;
      o.sinks = s.sinks;
      o.use_cache = true;
      const auto a = sample(*m, prompt, o);
      o.use_cache = false;
      const auto b = sample(*m, prompt, o);
      ASSERT_EQ(a.size(), 40u);
      EXPECT_EQ(a, b) << s.posenc.dump() << " temperature " << temp;
      // not a constant stream (the seeded draws at temperature 1 differ from step to step)
      if (temp > 0) {
        EXPECT_GT(std::set<int32_t>(a.begin(), a.end()).size(), 3u) << s.posenc.dump();
      }
    }
  }
}

// Learned positions past L: the context shift. Greedy tokens equal a hand computation that
// forwards seq[start..] with start moved to keep the last `keep` tokens whenever the model would
// see more than L; keep = L is the crop of every step.
TEST_F(KVCacheTest, LearnedContextShiftMatchesHandComputation) {
  auto m = model_for({{"type", "learned"}}, 16, 11);
  const auto prompt = tokens(6, 41);
  for (int64_t keep : {0, 5, 16}) {
    const int64_t k = keep == 0 ? 8 : keep;
    std::vector<int32_t> seq = prompt, hand;
    size_t start = 0;
    {
      NoGradGuard g;
      for (int s = 0; s < 50; ++s) {
        if ((int64_t)(seq.size() - start) > 16) start = seq.size() - (size_t)k;
        const auto z = last(m->forward(as_tensor(seq, start, seq.size())));
        const int32_t best = (int32_t)(std::max_element(z.begin(), z.end()) - z.begin());
        seq.push_back(best);
        hand.push_back(best);
      }
    }
    SampleOptions o;
    o.max_tokens = 50;
    o.temperature = 0;
    o.keep = keep;
    for (bool cache : {true, false}) {
      o.use_cache = cache;
      EXPECT_EQ(sample(*m, prompt, o), hand) << "keep " << keep << (cache ? " cached" : " recomputed");
    }
  }
  SampleOptions o;
  o.keep = 17;
  testing_util::expect_error([&] { sample(*m, prompt, o); }, {"--keep", "16", "17"});
}

}  // namespace
