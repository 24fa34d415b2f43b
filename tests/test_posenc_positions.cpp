// tests/test_posenc_positions.cpp — explicit and randomized positions (POSENC_SPEC §7.3):
// f64 gradchecks of a whole GPT of every encoding that takes positions, at gapped, per-row
// positions; positions 0..T-1 give exactly the run without them; gapped positions change the
// output (and the relative encodings only by the differences); a batch of distinct rows equals
// each row alone (the per-row, composed path); the fused attention agrees with the composed one
// at one shared row; the randomized sampler's properties; the errors of §7.3. ~2 s.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "autograd/gradcheck.h"
#include "core/fast_paths.h"
#include "core/rng.h"
#include "nn/gpt.h"

using namespace ctx;
using ctx::testing_util::expect_error;

namespace {

// Every encoding (and rope scaling) of §7.3's list, as posenc configs.
std::vector<nlohmann::json> encodings() {
  auto rope = [](const nlohmann::json& sc) { return nlohmann::json{{"type", "rope"}, {"scaling", sc}}; };
  const nlohmann::json halves = std::vector<double>{1.0, 1.5, 2.0, 3.0};
  return {{{"type", "none"}},
          {{"type", "learned"}},
          {{"type", "sinusoidal"}},
          {{"type", "rope"}},
          {{"type", "rope"}, {"pairing", "interleaved"}},
          rope({{"type", "pi"}, {"factor", 2}}),
          rope({{"type", "ntk"}, {"factor", 2}}),
          rope({{"type", "dynamic-ntk"}, {"factor", 2}, {"original_context", 4}}),
          rope({{"type", "yarn"}, {"factor", 4}}),
          rope({{"type", "llama3"}, {"factor", 8}, {"original_context", 4}}),
          rope({{"type", "longrope"}, {"short_factor", halves}, {"long_factor", halves}, {"original_context", 4}}),
          rope({{"type", "pi"}, {"factor", 2}, {"log_n", true}, {"original_context", 4}}),
          {{"type", "alibi"}},
          {{"type", "kerple"}},
          {{"type", "kerple"}, {"variant", "power"}},
          {{"type", "sandwich"}},
          {{"type", "t5"}, {"num_buckets", 4}, {"max_distance", 5}},
          {{"type", "fire"}, {"init_L", 3}}};
}

// One layer, two heads of d = 8 (longrope's lists: d/2 = 4), context 24.
ModelConfig cfg(const nlohmann::json& pe, int64_t layers = 1) {
  return testing_util::two_head_cfg(11, 16, layers, 32, 24, pe);
}

// An f64 model with weights N(0, 0.5) (so that the position terms matter), kerple away from its clamp.
std::unique_ptr<nn::GPT> model(const nlohmann::json& pe, int64_t layers = 1) {
  auto m = std::make_unique<nn::GPT>(cfg(pe, layers), DType::F64);
  m->init_weights(3);
  Rng rng(11);
  for (auto& [name, p] : m->named_parameters()) {
    if (name.find("r1") != std::string::npos || name.find("r2") != std::string::npos)
      rng.fill_uniform(p.data(), 0.2, 1.5);
    else if (name.find("norm") == std::string::npos && name.compare(name.size() - 2, 2, ".c") != 0 &&
             name.find("L_multiplier") == std::string::npos)  // fire's c and L_multiplier as initialised
      rng.fill_normal(p.data(), 0.0, 0.5);
  }
  m->eval();
  return m;
}

Tensor tokens(int64_t B, int64_t T, uint64_t seed) {
  Tensor t = Tensor::empty({B, T}, DType::I64);
  Rng r(seed);
  for (int64_t i = 0; i < B * T; ++i) t.host<int64_t>()[i] = (int64_t)r.below(11);
  return t;
}

double max_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(a.at(i) - b.at(i)));
  return m;
}

// Two different gapped rows (a query at 3 = FIRE's threshold init_L: the tie), T = 5.
const std::vector<int64_t> kRows = {0, 3, 4, 9, 17, 2, 3, 7, 8, 20};

Positions rows2() { return make_positions(kRows, 2, 5, "test"); }
Positions shared(std::vector<int64_t> row) { return make_positions(row, 1, (int64_t)row.size(), "test"); }

}  // namespace

TEST(PosencPositions, GradcheckEveryEncodingAtGappedPerRowPositions) {
  for (const nlohmann::json& pe : encodings()) {
    auto m = model(pe);
    const Tensor x = tokens(2, 5, 1), y = tokens(2, 5, 2);
    const Positions p = rows2();
    ASSERT_EQ(p.rows, 2);
    GradcheckOptions o;
    o.atol = 1e-6;
    o.max_elements = 6;  // per tensor, spread evenly: every parameter tensor, ~0.1 s per encoding
    GradcheckResult r = gradcheck_params(m->named_parameters(), [&] { return m->loss(x, y, false, &p); }, nullptr, o);
    EXPECT_TRUE(r.pass) << pe.dump() << "\n" << r.summary();
  }
}

TEST(PosencPositions, GradcheckAtOneSharedGappedRowThroughTwoLayers) {
  for (const char* t : {"rope", "alibi", "t5", "fire", "learned"}) {
    nlohmann::json pe = {{"type", t}};
    if (std::string(t) == "t5") pe = {{"type", "t5"}, {"num_buckets", 4}, {"max_distance", 5}};
    auto m = model(pe, 2);
    const Tensor x = tokens(2, 4, 5), y = tokens(2, 4, 6);
    const Positions p = shared({1, 4, 6, 13});
    GradcheckOptions o;
    o.atol = 1e-6;
    o.max_elements = 6;  // per tensor, spread evenly: every parameter tensor, ~0.1 s per encoding
    GradcheckResult r = gradcheck_params(m->named_parameters(), [&] { return m->loss(x, y, false, &p); }, nullptr, o);
    EXPECT_TRUE(r.pass) << t << "\n" << r.summary();
  }
}

TEST(PosencPositions, ContiguousPositionsGiveExactlyTheRunWithout) {
  for (const nlohmann::json& pe : encodings()) {
    auto m = model(pe);
    const Tensor x = tokens(2, 6, 7);
    const Positions p = make_positions({0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}, 2, 6, "test");
    EXPECT_EQ(p.rows, 1);  // equal rows collapse: one table, the fused attention
    EXPECT_EQ(max_diff(m->forward(x).data(), m->forward(x, 0, false, &p).data()), 0.0) << pe.dump();
  }
}

TEST(PosencPositions, GappedPositionsChangeTheOutputRelativeOnesOnlyByDifferences) {
  const Tensor x = tokens(1, 5, 9);
  const Positions gapped = shared({0, 3, 4, 9, 17}), moved = shared({6, 9, 10, 15, 23});
  for (const nlohmann::json& pe : encodings()) {
    const std::string t = pe["type"];
    auto m = model(pe);
    const Tensor plain = m->forward(x).data(), g = m->forward(x, 0, false, &gapped).data();
    if (t == "none") {
      EXPECT_EQ(max_diff(plain, g), 0.0);
      continue;
    }
    EXPECT_GT(max_diff(plain, g), 1e-6) << pe.dump() << ": the positions were ignored";
    // rope without T- or position-dependent terms and the distance biases see only p_i - p_j
    const bool relative = (t == "rope" && !pe.contains("scaling")) || t == "alibi" || t == "kerple" ||
                          t == "sandwich" || t == "t5";
    if (relative) {  // rope: float32 angles float(p) theta_k, so equal up to their rounding
      EXPECT_LT(max_diff(g, m->forward(x, 0, false, &moved).data()), t == "rope" ? 1e-5 : 1e-9) << pe.dump();
    }
  }
}

TEST(PosencPositions, DistinctRowsEqualEachRowAlone) {
  const Tensor x = tokens(2, 5, 4);
  const Positions both = rows2();
  for (const nlohmann::json& pe : encodings()) {
    // dynamic NTK's base follows max(p) + 1 over the whole batch (§7.3): a row alone differs
    if (pe.contains("scaling") && pe["scaling"]["type"] == "dynamic-ntk") continue;
    auto m = model(pe);
    const Tensor z = m->forward(x, 0, false, &both).data();  // [2, 5, V]
    for (int64_t b = 0; b < 2; ++b) {
      const Positions one = shared(std::vector<int64_t>(kRows.begin() + b * 5, kRows.begin() + b * 5 + 5));
      const Tensor zb = m->forward(x.slice0(b, b + 1).clone(), 0, false, &one).data();
      EXPECT_LT(max_diff(z.slice0(b, b + 1).clone(), zb), 1e-10) << pe.dump() << " row " << b;
    }
  }
}

TEST(PosencPositions, FusedAndComposedAttentionAgreeAtASharedGappedRow) {
  const Tensor x = tokens(2, 5, 8);
  const Positions p = shared({0, 3, 4, 9, 17});
  for (const nlohmann::json& pe : encodings()) {
    auto m = model(pe);
    set_fast_path(FastPath::Attention, true);
    const Tensor fused = m->forward(x, 0, false, &p).data();
    set_fast_path(FastPath::Attention, false);
    const Tensor composed = m->forward(x, 0, false, &p).data();
    reset_fast_path(FastPath::Attention);
    EXPECT_LT(max_diff(fused, composed), 1e-10) << pe.dump();
  }
}

TEST(PosencPositions, RandomizedSamplerIsInRangeDistinctSortedAndSeeded) {
  Rng a(5), b(5);
  std::vector<int> hits(40, 0);
  for (int draw = 0; draw < 200; ++draw) {
    const Positions p = randomized_positions(a, 40, 12);
    EXPECT_EQ(p.rows, 1);  // one draw shared by the batch
    ASSERT_EQ(p.T, 12);
    for (int64_t t = 0; t < 12; ++t) {
      EXPECT_GE(p.at(0, t), 0);
      EXPECT_LT(p.at(0, t), 40);
      if (t > 0) {
        EXPECT_GT(p.at(0, t), p.at(0, t - 1));  // sorted and distinct
      }
      ++hits[(size_t)p.at(0, t)];
    }
    EXPECT_EQ(p.p, randomized_positions(b, 40, 12).p);  // the same seed, the same draws
  }
  // uniform over 0..M-1: every position drawn (expected 60 each); the last one too (not 0..T-1)
  for (int v = 0; v < 40; ++v) EXPECT_GT(hits[(size_t)v], 25) << "position " << v;
  EXPECT_EQ(randomized_positions(a, 12, 12).p, (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(PosencPositions, RandomizedLearnedTableHasMRowsAndAcceptsSequencesUpToM) {
  nn::GPT m(cfg({{"type", "learned"}, {"randomized", 40}}));
  bool found = false;
  for (auto& [name, p] : m.named_parameters())
    if (name == "wpe.weight") {
      found = true;
      EXPECT_EQ(p.shape(), (Shape{40, 16}));
    }
  EXPECT_TRUE(found);
  m.eval();
  EXPECT_EQ(m.forward(tokens(1, 40, 3)).data().size(1), 40);  // beyond context 24
  expect_error([&] { m.forward(tokens(1, 41, 3)); }, {"posenc learned", "41", "40 rows"});
  nn::GPT plain(cfg({{"type", "learned"}}));
  const Positions beyond = shared({0, 5, 24});
  expect_error([&] { plain.forward(tokens(1, 3, 3), 0, false, &beyond); }, {"posenc learned", "24", "24 rows"});
}

TEST(PosencPositions, ConfigErrorsOfRandomized) {
  auto build = [](const nlohmann::json& pe) { nn::GPT m(cfg(pe), DType::F32, "run.json"); };
  expect_error([&] { build({{"type", "rope"}, {"randomized", 10}}); }, {"run.json", "posenc.randomized", "context (24) <= M", "got 10"});
  expect_error([&] { build({{"type", "rope"}, {"randomized", 30.5}}); }, {"posenc.randomized", "integer", "30.5"});
  expect_error([&] { build({{"type", "rope"}, {"randomized", "64"}}); }, {"posenc.randomized", "integer"});
  expect_error([&] { build({{"type", "cope"}, {"randomized", 64}}); }, {"unknown key 'posenc.randomized'", "cope"});
  expect_error([&] { build({{"type", "xl"}, {"randomized", 64}}); }, {"unknown key 'posenc.randomized'", "xl"});
  expect_error([&] { build({{"type", "rope"}, {"scaling", {{"type", "rerope"}, {"window", 2}}}, {"randomized", 64}}); },
               {"unknown key 'posenc.randomized'", "rerope"});
  expect_error([&] { build({{"type", "learned"}, {"hierarchical", true}, {"randomized", 64}}); },
               {"run.json", "randomized", "hierarchical"});
  build({{"type", "fire"}, {"randomized", 64}});  // fire's key list: randomized is one of them
  build({{"type", "rope"}, {"randomized", nullptr}});  // null = off
}

TEST(PosencPositions, ExplicitPositionErrors) {
  auto m = model({{"type", "rope"}});
  const Tensor x = tokens(2, 3, 1);
  expect_error([] { make_positions({0, 2, 2}, 1, 3, "P.npy"); }, {"P.npy", "strictly increasing", "p[0, 2] = 2"});
  expect_error([] { make_positions({0, -1, 2}, 1, 3, "P.npy"); }, {"P.npy", "-1", "0 <= p < 2^24"});
  expect_error([] { make_positions({0, 1, 16777216}, 1, 3, "P.npy"); }, {"P.npy", "16777216", "2^24"});
  const Positions four = shared({0, 1, 2, 3});
  expect_error([&] { m->forward(x, 0, false, &four); }, {"positions of shape [1, 4]", "[2, 3]"});
  const Positions three = make_positions({0, 1, 2, 0, 1, 5, 0, 2, 4}, 3, 3, "P.npy");
  expect_error([&] { m->forward(x, 0, false, &three); }, {"[3, 3]", "[2, 3]"});
  const Positions ok = shared({0, 4, 9});
  for (const nlohmann::json& pe : std::vector<nlohmann::json>{
           {{"type", "cope"}}, {{"type", "xpos"}}, {{"type", "shaw"}}, {{"type", "learned"}, {"hierarchical", true}},
           {{"type", "rope"}, {"scaling", {{"type", "self-extend"}, {"window", 2}, {"group", 2}}}}}) {
    nn::GPT g(cfg(pe));
    expect_error([&] { g.forward(x, 0, false, &ok); }, {"does not take explicit positions", "§7.3"});
  }
  for (const char* t : {"rope", "alibi"}) {  // sinks with explicit positions (§6, §7.3)
    nn::GPT g(cfg({{"type", t}}));
    g.set_attention_window(2, 1);
    expect_error([&] { g.forward(x, 0, false, &ok); }, {"explicit positions", "--sinks"});
  }
}
