// tests/test_cuda_graph_step.cpp — the warm training step as a CUDA Graph (CTXLAB_CUDA_GRAPH=1,
// train/trainer.cpp, core/step_graph.h; docs/cuda.md "A CUDA Graph of the warm step"): a run that
// replays its recorded step gives the same bits as the same run stepping eagerly (weights, AdamW's
// moments, every logged loss), through the learning-rate warm-up (the step constants come from
// the device), gradient accumulation, bf16, dropout (each replay's seeds drawn from the model's
// Rng and written to the device first) and a validation pass between replays (which makes the
// next step record afresh); runs that cannot be recorded say why and train eagerly to the same
// bits. Runs under the CUDA emulator (always) and on a real GPU; without one: "skipped: no GPU".
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/device_table.h"
#include "core/fast_paths.h"
#include "core/precision.h"
#include "nn/gpt.h"
#include "tests/test_util.h"
#include "train/trainer.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/attention_tc.h"
#include "core/cuda/cuda_runtime.h"
#endif
#ifdef CTXLAB_CUDA_EMULATOR
#include "core/cuda/emu/emu_runtime.h"  // cuemu::fail_next_capture_end
#endif

namespace {
using namespace ctx;
using ctx::testing_util::tiny_cfg;
using json = nlohmann::json;

#ifdef CTXLAB_WITH_CUDA
bool has_gpu() { return cuda::emulated() || cuda::device_count() > 0; }

// CTXLAB_CUDA_GRAPH for the scope of one run (on: unset, the default; off: 0).
struct GraphSwitch {
  explicit GraphSwitch(bool on) {
    if (on)
      unsetenv("CTXLAB_CUDA_GRAPH");
    else
      setenv("CTXLAB_CUDA_GRAPH", "0", 1);
  }
  ~GraphSwitch() { unsetenv("CTXLAB_CUDA_GRAPH"); }
};

struct Case {
  std::string pe;
  double dropout = 0;
  int64_t accum = 1;
  bool bf16 = false;
  bool fire_table = false;  // FIRE's table switch: its decision copies to the host
  bool deterministic = false;
  bool fused = false;  // the fused attention forced on (its dropout inside the kernel)
  double init_L = 24;  // FIRE's: thr = 24 L_multiplier against the largest query position 23
  int64_t d_model = 16;  // 2 heads: 32 gives heads of 32, the tensor-core kernels' smallest
  int64_t log_interval = 3;  // reports: where FIRE's bound is anchored again
};

struct Outcome {
  std::map<std::string, std::string> params;  // name -> bytes (host copy)
  std::string train_csv;                      // the logged losses, lr, norms (the ms column cut)
  cuda::GraphStats graphs;                    // captures and replays during the run
  uint64_t dist_forward = 0;                  // tensor-core forwards the host launched reading a distance table
  std::vector<double> bounds;                 // FIRE: the host's bound on L_multiplier after each step (lo, hi)
  std::string stderr_text;
};

std::string read_losses(const std::string& csv_path) {
  std::ifstream in(csv_path);
  std::stringstream out;
  std::string line;
  while (std::getline(in, line)) {  // step,loss,lr,grad_norm,ms,...: keep the first four columns
    size_t cut = 0;
    for (int c = 0; c < 4 && cut != std::string::npos; ++c) cut = line.find(',', cut + 1);
    out << line.substr(0, cut) << "\n";
  }
  return out.str();
}

// 8 steps of the tiny model on cuda (warm-up 4 steps: lr changes every step), a report every 3
// steps and a validation pass every 4: the recorded step is replayed at steps 3, 4, 6, 7, 8 and
// recorded again after step 4's validation.
Outcome train_once(const Case& c, bool graph, const std::string& tag) {
  GraphSwitch sw(graph);
  clear_table_cache();
  if (c.fire_table) set_fast_path(FastPath::FireTable, true);
  if (c.fused) set_fast_path(FastPath::Attention, true);
  struct Reset {
    ~Reset() {
      reset_fast_path(FastPath::FireTable);
      reset_fast_path(FastPath::Attention);
    }
  } reset;
  PrecisionScope prec(c.bf16 ? Precision::BF16 : Precision::FP32);
  json pe = json{{"type", c.pe}};
  if (c.pe == "fire") pe = json{{"type", "fire"}, {"init_L", c.init_L}, {"init_c", 1.0}};
  ModelConfig cfg = tiny_cfg(pe);
  cfg.vocab_size = 256;  // the shipped corpus is bytes
  cfg.d_model = c.d_model;
  cfg.d_ff = 2 * c.d_model;
  cfg.dropout = c.dropout;
  nn::GPT m(cfg);
  m.init_weights(5);
  m.to(Device::CUDA);
  TrainOptions o;
  o.out = (std::filesystem::temp_directory_path() / ("ctxlab_graph_" + tag)).string();
  std::filesystem::remove_all(o.out);
  o.steps = 8;
  o.batch = 2;
  o.accum = c.accum;
  o.warmup = 4;
  o.log_interval = c.log_interval;
  o.eval_interval = 4;
  o.ckpt_interval = 0;
  o.eval_batches = 1;
  o.plot = false;
  o.quiet = true;
  o.seed = 77;
  o.deterministic = c.deterministic;
  const cuda::GraphStats before = cuda::graph_stats();
  const uint64_t dist0 = cuda::tc_attention_calls().dist_forward;
  ::testing::internal::CaptureStderr();
  std::vector<double> bounds;
  train(m, o, 0, "", -1, [&](int64_t, bool) {
    for (auto& [name, p] : m.named_parameters())
      if (name.find("L_multiplier") != std::string::npos) {
        const ValueBound* b = known_value_bound(*p.impl());
        bounds.push_back(b ? b->lo : -1);
        bounds.push_back(b ? b->hi : -1);
      }
  });
  Outcome r;
  r.bounds = bounds;
  r.stderr_text = ::testing::internal::GetCapturedStderr();
  const cuda::GraphStats after = cuda::graph_stats();
  r.graphs = {after.captures - before.captures, after.replays - before.replays};
  r.dist_forward = cuda::tc_attention_calls().dist_forward - dist0;
  for (auto& [name, p] : m.named_parameters()) {
    const Tensor h = to_host(p.data());
    r.params[name] = std::string((const char*)h.raw(), h.nbytes());
  }
  r.train_csv = read_losses(o.out + "/train.csv");
  std::filesystem::remove_all(o.out);
  return r;
}

void expect_same(const Outcome& eager, const Outcome& graph) {
  EXPECT_EQ(eager.train_csv, graph.train_csv) << "the logged losses / lr / norms differ";
  // the host's bounds step by step: a replay, a recording and a refused one count as eager steps
  EXPECT_EQ(eager.bounds, graph.bounds) << "the bounds on FIRE's L_multiplier differ";
  ASSERT_EQ(eager.params.size(), graph.params.size());
  for (const auto& [name, bytes] : eager.params) EXPECT_TRUE(graph.params.at(name) == bytes) << name << " differs";
}

// Recorded and replayed: the same bits as eager; 2 recordings (step 3, and step 5 after step 4's
// validation) and 6 replays (steps 3-8); the eager run records nothing.
TEST(CudaGraphStep, ReplayGivesTheEagerBits) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  Case fused_drop{"alibi", 0.1};
  fused_drop.fused = true;
  for (const Case& c : {Case{"learned"}, Case{"rope"}, Case{"alibi", 0, 1, true}, Case{"rope", 0, 2, false},
                        Case{"learned", 0, 1, true}, Case{"rope", 0.1}, Case{"learned", 0.1, 2, false}, fused_drop,
                        Case{"cope"}}) {
    SCOPED_TRACE(c.pe + " accum " + std::to_string(c.accum) + (c.bf16 ? " bf16" : " fp32") + " dropout " +
                 std::to_string(c.dropout) + (c.fused ? " fused attention" : ""));
    const std::string tag = c.pe + std::to_string(c.accum) + (c.bf16 ? "b" : "f") + (c.dropout > 0 ? "d" : "") +
                            (c.fused ? "u" : "");
    const Outcome eager = train_once(c, false, tag + "_eager");
    const Outcome graph = train_once(c, true, tag + "_graph");
    EXPECT_EQ(eager.graphs.captures, 0u);
    EXPECT_EQ(graph.graphs.captures, 2u) << "step 3, and step 5 after the validation pass";
    EXPECT_EQ(graph.graphs.replays, 6u) << "steps 3 to 8";
    EXPECT_EQ(graph.stderr_text, "") << "a recordable run printed a warning";
    expect_same(eager, graph);
  }
}

// Runs that cannot be recorded: --deterministic (its gradient tree is summed on the host's
// schedule) is refused up front with its reason. FIRE with its table switch set, whose threshold
// (init_L 23.01: thr 23.01 against the largest query position 23) its host-side bound no longer
// settles two steps after the anchor, reads L_multiplier inside the step: the recording is refused
// by the copy itself, that step trains eagerly (with dropout: the abandoned recording's seeds are
// drawn again) and the next step records again; with a report every 3 steps the bound is exact
// again there and the step records; with one report at the end, the second refusal in a row ends
// the recording for the run. Either way the bits are the eager run's.
TEST(CudaGraphStep, UnrecordableRunsSayWhyAndTrainEagerly) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  {
    Case c{"rope"};
    c.deterministic = true;
    const Outcome eager = train_once(c, false, "det_eager");
    const Outcome graph = train_once(c, true, "det_graph");
    EXPECT_EQ(graph.graphs.captures, 0u);
    EXPECT_NE(graph.stderr_text.find("no CUDA Graph (CTXLAB_CUDA_GRAPH): --deterministic"), std::string::npos)
        << graph.stderr_text;
    expect_same(eager, graph);
  }
  for (const int64_t reports : {3, 8}) {
    SCOPED_TRACE("a report every " + std::to_string(reports) + " steps");
    Case c{"fire", 0.1, 1, false, true};
    c.init_L = 23.01;
    c.log_interval = reports;
    const std::string tag = "fire_" + std::to_string(reports);
    const Outcome eager = train_once(c, false, tag + "_eager");
    const Outcome graph = train_once(c, true, tag + "_graph");
    const std::string& err = graph.stderr_text;
    EXPECT_NE(err.find("step 3 could not be recorded into a CUDA Graph"), std::string::npos) << err;
    EXPECT_NE(err.find("device -> host copy"), std::string::npos) << err;
    if (reports == 3) {
      EXPECT_NE(err.find("it trains eagerly and the next step records again"), std::string::npos) << err;
      EXPECT_EQ(err.find("training goes on without it"), std::string::npos) << err;
      EXPECT_GE(graph.graphs.captures, 1u) << "recorded after the report made the bound exact again";
    } else {
      EXPECT_NE(err.find("step 4 could not be recorded into a CUDA Graph"), std::string::npos) << err;
      EXPECT_NE(err.find("training goes on without it"), std::string::npos) << err;
      EXPECT_EQ(graph.graphs.captures, 0u);
    }
    expect_same(eager, graph);
  }
}

#ifdef CTXLAB_CUDA_EMULATOR
// A recording refused at its end, after its host code ran the whole step: AdamW's update counted
// on the host (the bounds it widened for an update that never ran), the dropout seeds drawn, the
// weights' bf16 copy attached for the update to write (never written). The trainer undoes it,
// trains that step eagerly and records at the next: the eager run's bits, logged rows and bounds
// step by step. FIRE fp32 with dropout and one report (at the end: nothing re-anchors the bound
// in between), and `learned` bf16 (the flat AdamW's copy of the weights, which every Linear
// reads); the emulator fails the capture on demand (cuemu::fail_next_capture_end), which a GPU
// cannot be asked to do.
TEST(CudaGraphStep, ARecordingRefusedAtItsEndLeavesNoTrace) {
  Case fire{"fire", 0.1};
  fire.d_model = 64;
  fire.log_interval = 8;
  for (const Case& c : {fire, Case{"learned", 0, 1, true}}) {
    SCOPED_TRACE(c.pe + (c.bf16 ? " bf16" : " fp32"));
    const std::string tag = "refused_end_" + c.pe;
    const Outcome eager = train_once(c, false, tag + "_eager");
    cuemu::fail_next_capture_end();
    const Outcome graph = train_once(c, true, tag + "_graph");
    cuemu::clear_faults();
    const std::string& err = graph.stderr_text;
    EXPECT_NE(err.find("step 3 could not be recorded into a CUDA Graph"), std::string::npos) << err;
    EXPECT_NE(err.find("cudaErrorStreamCaptureInvalidated"), std::string::npos) << err;
    EXPECT_NE(err.find("it trains eagerly and the next step records again"), std::string::npos) << err;
    EXPECT_EQ(graph.graphs.captures, 2u) << "step 4, and step 5 after the validation pass";
    EXPECT_EQ(graph.graphs.replays, 5u) << "steps 4 to 8";
    expect_same(eager, graph);
  }
}
#endif

// FIRE's choice between the distance table and the per-pair bias is made on the host from
// L_multiplier's bound (train/value_bounds.h) and frozen in the recording; before each replay the
// trainer asks whether it would choose the same now (StepGraph::decisions_hold) and records afresh
// when not (that step runs eagerly, the next records). init_L 24 (bf16, the tensor-core kernels):
// the bound settles it the whole run, the table in every training forward (counted on the eager
// run: a replay launches from the device), 2 recordings as for any encoding. init_L 23.03: the
// bound, exact at each report, widens with every step until it no longer settles thr > 23, and
// settles it again at the next report: the recording follows (3 recordings, steps between them
// eager); with thr 23.05 and one report at the end, the replays must widen the bound as eager
// updates do for the recording to follow. All give the eager run's bits: the eager steps take
// the same choices from the same bounds.
TEST(CudaGraphStep, FireChoicesFromTheBoundAreCheckedBeforeEachReplay) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  ASSERT_EQ(std::getenv("CTXLAB_FIRE_TABLE"), nullptr) << "unset CTXLAB_FIRE_TABLE: this test checks its default";
  {
    Case c{"fire", 0, 1, true};
    c.d_model = 64;
    const Outcome eager = train_once(c, false, "fire24_eager");
    const Outcome graph = train_once(c, true, "fire24_graph");
    EXPECT_GE(eager.dist_forward, 8u * 2u) << "every training forward of both layers took the table";
    EXPECT_EQ(graph.graphs.captures, 2u);
    EXPECT_EQ(graph.graphs.replays, 6u);
    EXPECT_EQ(graph.stderr_text, "");
    expect_same(eager, graph);
  }
  // reports every 3 steps; then one report, at the end: the bound widens through the replays
  // as through eager steps (each replay's update counted on the host, AdamW::replayed_update)
  for (const auto& [init_L, reports] : {std::pair<double, int64_t>{23.03, 3}, {23.05, 8}}) {
    SCOPED_TRACE("init_L " + std::to_string(init_L) + ", a report every " + std::to_string(reports) + " steps");
    Case c{"fire", 0, 1, true};
    c.init_L = init_L;
    c.log_interval = reports;
    c.d_model = 64;
    const std::string tag = "fire_follows_" + std::to_string(reports);
    const Outcome eager = train_once(c, false, tag + "_eager");
    const Outcome graph = train_once(c, true, tag + "_graph");
    EXPECT_GT(graph.graphs.captures, 2u) << "the recording follows the bound's choice";
    EXPECT_EQ(graph.stderr_text, "");
    expect_same(eager, graph);
  }
}
#endif

}  // namespace
