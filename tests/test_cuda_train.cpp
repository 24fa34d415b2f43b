// tests/test_cuda_train.cpp — training on the CUDA device as the trainer runs it: checkpoints
// written from cuda and from cpu hold the same bytes for the same parameters (both ways, with the
// optimizer state), and a warm training step makes no host <-> device round trip: between two
// logging intervals no copy either way (the loss and the gradient norm stay on the device until
// the report; the batches up to the next report are staged on the device at the report before
// them). Runs under the CUDA emulator (always) and on a real GPU; without one: "skipped: no GPU".
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/device_table.h"
#include "core/fast_paths.h"
#include "core/precision.h"
#include "nn/attention.h"
#include "nn/gpt.h"
#include "tests/test_util.h"
#include "train/io/checkpoint.h"
#include "train/optim.h"
#include "train/io/safetensors.h"
#include "train/trainer.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/cuda_runtime.h"
#endif
#ifdef CTXLAB_CUDA_EMULATOR
#include "core/cuda/emu/emu_runtime.h"  // cuemu::stats: every copy the runtime made, by direction
#endif

namespace {
using namespace ctx;
using ctx::testing_util::tiny_cfg;
using json = nlohmann::json;

#ifdef CTXLAB_WITH_CUDA
bool no_gpu() { return !cuda::emulated() && cuda::device_count() == 0; }

std::string temp_dir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("ctxlab_cuda_train_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

// name -> the bytes of that tensor's data in a safetensors file.
std::map<std::string, std::string> tensor_bytes(const std::string& path) {
  SafetensorsFile f = load_safetensors(path);
  std::map<std::string, std::string> m;
  for (auto& [name, t] : f.tensors) m[name] = std::string((const char*)to_host(t).raw(), to_host(t).nbytes());
  return m;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The tiny rope model on cuda with AdamW and one batch [2, 8] of tokens drawn from `seed`; step()
// is one training step (zero_grad, loss, backward, clip and AdamW step).
struct TinyCudaRun {
  nn::GPT m;
  AdamW og;
  Tensor in = Tensor::empty({2, 8}, DType::I64), tg = Tensor::empty({2, 8}, DType::I64);
  explicit TinyCudaRun(uint64_t seed) : m(tiny_cfg(json{{"type", "rope"}})), og(init(m), AdamWOptions{}) {
    Rng r(seed);
    for (int64_t i = 0; i < 16; ++i) in.set(i, (double)r.below(17)), tg.set(i, (double)r.below(17));
  }
  static nn::NamedParams init(nn::GPT& g) {  // weights, then to cuda
    g.init_weights(3);
    g.to(Device::CUDA);
    return g.named_parameters();
  }
  void step() {
    m.zero_grad();
    m.loss(in, tg).backward();
    og.clip_and_step(1e-2, 1.0);
  }
};

// A model trained for two AdamW steps on cuda, saved from cuda; loaded (on the host, as
// load_checkpoint does) and saved again from cpu; loaded, moved to cuda and saved from there:
// the three files are byte for byte the same, and so are the optimizer states saved from the
// two devices.
TEST(CudaCheckpoint, SameBytesFromEitherDevice) {
  CTX_SKIP_WITHOUT_GPU(!no_gpu());
  const std::string dir = temp_dir("ckpt");
  TinyCudaRun run(5);
  nn::GPT& m = run.m;
  AdamW& og = run.og;
  for (int s = 0; s < 2; ++s) run.step();
  const std::string a = dir + "/cuda.safetensors", b = dir + "/cpu.safetensors", c = dir + "/cuda2.safetensors";
  save_checkpoint(a, m, 2);
  LoadedModel on_cpu = load_checkpoint(a);
  for (auto& [name, p] : on_cpu.model->named_parameters()) ASSERT_EQ(p.data().device(), Device::CPU) << name;
  save_checkpoint(b, *on_cpu.model, on_cpu.step);
  LoadedModel back = load_checkpoint(b);
  back.model->to(Device::CUDA);
  for (auto& [name, p] : back.model->named_parameters()) ASSERT_EQ(p.data().device(), Device::CUDA) << name;
  save_checkpoint(c, *back.model, back.step);
  const auto ta = tensor_bytes(a), tb = tensor_bytes(b), tc = tensor_bytes(c);
  ASSERT_EQ(ta.size(), m.named_parameters().size());
  for (auto& [name, bytes] : ta) {
    EXPECT_EQ(tb.at(name), bytes) << name << ": cuda -> cpu changed the bytes";
    EXPECT_EQ(tc.at(name), bytes) << name << ": cpu -> cuda changed the bytes";
  }
  EXPECT_EQ(file_bytes(a), file_bytes(b));  // header and metadata too
  EXPECT_EQ(file_bytes(a), file_bytes(c));

  // The optimizer state: saved from cuda, loaded into a cpu optimizer, saved again.
  save_safetensors(dir + "/optim.cuda.safetensors", og.state());
  AdamW oc(on_cpu.model->named_parameters(), AdamWOptions{});
  SafetensorsFile f = load_safetensors(dir + "/optim.cuda.safetensors");
  oc.load_state(f.tensors, "optim.cuda.safetensors");
  save_safetensors(dir + "/optim.cpu.safetensors", oc.state());
  EXPECT_EQ(file_bytes(dir + "/optim.cuda.safetensors"), file_bytes(dir + "/optim.cpu.safetensors"));
  std::filesystem::remove_all(dir);
}

// A warm training step in a speed mode (bf16; tf32) runs its GEMMs on cuBLASLt from the plans the
// first step made (gemm.cu): cublasLtMatmul calls, the linear layers' with the bias in the
// epilogue, and not one matmul descriptor, layout or preference created, no heuristic asked.
TEST(CudaTrainStep, WarmSpeedModeStepMakesNoLtDescriptorOrHeuristic) {
  CTX_SKIP_WITHOUT_GPU(!no_gpu());
  for (const bool bf16 : {true, false}) {
    SCOPED_TRACE(bf16 ? "bf16" : "tf32");
    PrecisionScope speed(bf16 ? Precision::BF16 : Precision::FP32, !bf16);
    TinyCudaRun run(11);
    run.step();  // cold: makes the plans
    // bf16: the first optimizer step writes the weights' bf16 copy (the flat AdamW), which the second
    // step's GEMMs read instead of converting: operands of another alignment, so plans of their own,
    // made once in that step
    if (bf16) run.step();
    const cuda::GemmLtStats before = cuda::gemm_lt_stats();
    run.step();
    const cuda::GemmLtStats after = cuda::gemm_lt_stats();
    EXPECT_GT(after.matmuls, before.matmuls + 10) << "the step's GEMMs did not run on cuBLASLt";
    EXPECT_GT(after.bias_epilogues, before.bias_epilogues) << "no linear layer added its bias in the epilogue";
    EXPECT_EQ(after.descriptors, before.descriptors) << "a warm step created cuBLASLt descriptors";
    EXPECT_EQ(after.heuristics, before.heuristics) << "a warm step asked cuBLASLt's heuristic";
    EXPECT_EQ(after.plans, before.plans);
  }
}

// The trainer on cuda, quiet, reporting at the first step, then every 4 steps (eval and
// checkpoint only at the end). Steps 2, 3, 5, 6, 7 (warm, between reports) copy nothing either
// way: their batches were staged on the device at the report before them (train/batch_ring.h),
// range-checked on the host there, so no index check reads them back and the token embedding's
// index_add plan is built on the device; they allocate no staging block and no device block, and
// upload no table (the encoding's cos/sin or positions and their plan, AdamW's tile table: all
// kept on the device by device_table since step 1). The reporting step 4 reads back exactly the
// two history buffers (losses, squared gradient norms) and stages steps 5-8 in one upload
// (docs/cuda.md). The third run has dropout on: its masks are computed on the device from one
// seed per call (core/dropout_mask.h), so it uploads no more than the others. FIRE decides on its
// distance table, and KERPLE whether its clamp must write, from their parameters' host-side bounds
// (train/value_bounds.h), which the report anchors: 3 more reads there per such parameter (the
// value and its two moments), none between reports. On the emulated device the runtime's own copy
// counts (cuemu::stats) must agree with the backend's. Each run twice: eager steps
// (CTXLAB_CUDA_GRAPH=0), and the default, a CUDA Graph recorded at step 3 and replayed from then
// on, where only the steps up to the recording may reach cudaMalloc (the recording's pool).
TEST(CudaTrainStep, NoHostRoundTripBetweenLoggingIntervals) {
  CTX_SKIP_WITHOUT_GPU(!no_gpu());
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "a CUDA Graph from step 3 (the default)" : "eager steps (CTXLAB_CUDA_GRAPH=0)");
    if (graph)
      unsetenv("CTXLAB_CUDA_GRAPH");
    else
      setenv("CTXLAB_CUDA_GRAPH", "0", 1);
    struct Unset {
      ~Unset() { unsetenv("CTXLAB_CUDA_GRAPH"); }
    } unset;
    // fused: the fused attention forced on (CTXLAB_FUSED_ATTENTION=1); else the backend's choice for
    // this shape, the composed attention
    struct Run { const char* pe; double dropout; uint64_t seed; bool fused; };
    for (const Run& run : {Run{"learned", 0.0, 101, false}, Run{"rope", 0.0, 202, false}, Run{"alibi", 0.1, 303, false},
                           Run{"rope", 0.0, 404, true}, Run{"alibi", 0.1, 505, true}, Run{"fire", 0.0, 606, false},
                           Run{"kerple", 0.0, 707, false}}) {
      const std::string pe = run.pe;
      SCOPED_TRACE(pe + " dropout " + std::to_string(run.dropout) +
                   (run.fused ? " fused attention" : " composed attention"));
      if (run.fused) set_fast_path(FastPath::Attention, true);
      // FIRE with its table switch set: a decision its bound could not settle would read the value
      // (a copy, counted below): none may, in fp32 as under bf16
      if (pe == "fire") set_fast_path(FastPath::FireTable, true);
      struct Reset {
        ~Reset() {
          reset_fast_path(FastPath::Attention);
          reset_fast_path(FastPath::FireTable);
        }
      } reset;
      clear_table_cache();  // a run repeating an encoding would otherwise find its tables kept
      ModelConfig cfg = tiny_cfg(json{{"type", pe}});
      cfg.vocab_size = 256;  // the shipped corpus is bytes
      cfg.dropout = run.dropout;
      nn::GPT m(cfg);
      m.init_weights(9);
      m.to(Device::CUDA);
      uint64_t bounded = 0;  // parameters the host keeps a bound on (FIRE's L_multiplier, KERPLE's r1 / r2)
      for (auto& [name, p] : m.named_parameters()) bounded += p.impl()->wants_value_bound ? 1 : 0;
      EXPECT_EQ(bounded, pe == "fire" ? 2u : pe == "kerple" ? 2u : 0u);
      TrainOptions o;
      o.out = temp_dir("steps_" + pe + std::to_string(run.seed));
      o.steps = 8;
      o.batch = 2;
      o.warmup = 2;
      o.log_interval = 4;
      o.eval_interval = 0;
      o.ckpt_interval = 0;
      o.eval_batches = 1;
      o.plot = false;
      o.quiet = true;
      o.seed = run.seed;  // other batches than the other runs (whose uploads are still kept)
      // emu_up / emu_down: the emulated runtime's own count of copies host -> device and device ->
      // host (any cudaMemcpy*, whoever made it: a witness that no copy bypasses the backend's counts)
      struct Counts {
        cuda::HostCopyStats c;
        uint64_t mallocs, table_uploads, emu_up, emu_down;
      };
      auto counts = [] {
        uint64_t up = 0, down = 0;
#ifdef CTXLAB_CUDA_EMULATOR
        up = cuemu::stats().uploads;
        down = cuemu::stats().downloads;
#endif
        return Counts{cuda::host_copy_stats(), cuda::device_alloc_stats().device_mallocs, table_cache_stats().uploads,
                      up, down};
      };
      struct Delta { int64_t step; bool reported; Counts d; };
      std::vector<Delta> log;
      const cuda::GraphStats graphs0 = cuda::graph_stats();
      Counts prev = counts();
      train(m, o, 0, "", -1, [&](int64_t step, bool reported) {
        const Counts now = counts();
        log.push_back({step, reported,
                       {{now.c.to_host - prev.c.to_host, now.c.to_device - prev.c.to_device,
                         now.c.to_device_queued - prev.c.to_device_queued,
                         now.c.staging_allocs - prev.c.staging_allocs},
                        now.mallocs - prev.mallocs,
                        now.table_uploads - prev.table_uploads,
                        now.emu_up - prev.emu_up,
                        now.emu_down - prev.emu_down}});
        prev = now;
      });
      ASSERT_EQ(log.size(), 8u);
      const cuda::GraphStats graphs1 = cuda::graph_stats();
      EXPECT_EQ(graphs1.captures - graphs0.captures, graph ? 1u : 0u) << "recorded once, at step 3";
      EXPECT_EQ(graphs1.replays - graphs0.replays, graph ? 6u : 0u) << "replayed at steps 3 to 8";
      EXPECT_GT(log[0].d.table_uploads, 0u) << "step 1 uploads the tables it keeps";
      for (const Delta& d : log) {
        SCOPED_TRACE("step " + std::to_string(d.step));
        EXPECT_EQ(d.reported, d.step == 1 || d.step == 4 || d.step == 8);  // the first step, every 4th, the last
        if (d.step == 1 || d.step == 8) continue;  // the first step uploads tables; the last evaluates and saves
        if (d.step == 4) {
          EXPECT_EQ(d.d.c.to_host, 2u + 3 * bounded)
              << "a report reads the loss and norm buffers, one copy each, and anchors the bounds";
        } else {
          EXPECT_EQ(d.d.c.to_host, 0u) << "a warm step between reports waited for the device";
        }
        EXPECT_EQ(d.d.c.to_device, 0u) << "a synchronous host -> device copy in a warm step";
        // the batches of steps 5-8 are staged on the device at step 4's report, in one copy; a warm
        // step between reports uploads nothing: its tokens are views of that ring, range-checked on
        // the host when staged, and the token embedding's index_add plan is built on the device
        EXPECT_EQ(d.d.c.to_device_queued, d.step == 4 ? 1u : 0u)
            << "a warm step uploaded something (the batch, the index_add plan?); a report stages the next batches";
        EXPECT_EQ(d.d.c.staging_allocs, 0u) << "a warm step allocated a pinned staging block";
        if (!graph || d.step > 3) {
          EXPECT_EQ(d.d.mallocs, 0u) << "a warm step reached cudaMalloc";
        }
        EXPECT_EQ(d.d.table_uploads, 0u) << "a warm step uploaded a constant table again";
#ifdef CTXLAB_CUDA_EMULATOR
        EXPECT_EQ(d.d.emu_down, d.d.c.to_host) << "a device -> host copy the backend did not count";
        EXPECT_EQ(d.d.emu_up, d.d.c.to_device + d.d.c.to_device_queued)
            << "a host -> device copy the backend did not count";
#endif
      }
      std::filesystem::remove_all(o.out);
    }
  }
}
#endif

}  // namespace
