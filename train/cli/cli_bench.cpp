// train/cli/cli_bench.cpp — `ctxlab bench`: times training steps of a preset/config on random tokens
// (forward / backward / optimizer split), and reports tokens/s, peak RSS, achieved GFLOP/s and
// MFU against a measured FMA peak (bf16: a VDPBF16PS / AMX peak), as one JSON object on stdout. bench/torch_peer.py is the
// PyTorch peer with the same JSON keys; bench/compare.sh runs the two alternately.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <omp.h>
#include <sys/resource.h>

#include <cxxopts.hpp>
#include <nlohmann/json.hpp>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CTX_BENCH_X86 1
#endif

#include "core/backend.h"  // backend(dev).synchronize()
#include "core/cpu/gemm.h"
#include "core/determinism.h"
#include "core/device_table.h"  // to_host
#include "core/threads.h"
#include "autograd/profiler.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/settings.h"
#include "core/step_graph.h"
#include "nn/gpt.h"
#include "train/run_dir.h"  // check_output_file
#include "train/cli/bench_decode.h"
#include "train/cli/cli.h"
#include "train/dist/grad_tree.h"
#include "train/cli/cli_common.h"
#include "train/io/fileio.h"
#include "train/optim.h"
#include "train/stats.h"  // median

namespace ctx::cli {
namespace {

// ---- peak FLOP/s: independent FMA chains on every OpenMP thread ----------------------------
// 12 accumulators cover the FMA latency (4-5 cycles) times the FMA ports (2) of current x86 cores.
constexpr int kAcc = 12;

// kAcc chains a = a * m + c of the vector type V (GCC vector extensions; the multiply-add becomes
// one FMA under the ISA of the function it is inlined into: -ffp-contract=fast, GCC's default in
// its GNU modes, which the fused attention's tile products rely on too). The callers below pick
// the width; `objdump -d` shows vfmadd on ymm / zmm registers in them.
template <class V>
inline __attribute__((always_inline)) float fma_chains(int64_t iters, float seed) {
  V a[kAcc];
  for (int k = 0; k < kAcc; ++k) a[k] = (seed + 0.001f * (float)k) - V{};
  const V m = 0.999999f - V{}, c = 1e-6f - V{};
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) a[k] = a[k] * m + c;
  V s = a[0];
  for (int k = 1; k < kAcc; ++k) s += a[k];
  return s[0] + s[sizeof(V) / sizeof(float) - 1];
}
typedef float Floats8 __attribute__((vector_size(32)));
typedef float Floats16 __attribute__((vector_size(64)));

#ifdef CTX_BENCH_X86
__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iters, float seed) {
  return fma_chains<Floats8>(iters, seed);
}
__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iters, float seed) {
  return fma_chains<Floats16>(iters, seed);
}

// The bf16 peak: VDPBF16PS, acc[i] += x[2i] y[2i] + x[2i+1] y[2i+1] (fp32 accumulators): 32
// multiply-adds, 64 FLOP per instruction (twice the FMA's 32 FLOP).
__attribute__((target("avx512f,avx512bf16"))) float dpbf16_loop_avx512(int64_t iters, float seed) {
  __m512 a[kAcc];
  for (int k = 0; k < kAcc; ++k) a[k] = _mm512_set1_ps(seed + 0.001f * (float)k);
  const __m512bh x = (__m512bh)_mm512_set1_epi16((short)0x3f80);  // 1.0
  const __m512bh y = (__m512bh)_mm512_set1_epi16((short)0x3586);  // ~1e-6
  for (int64_t i = 0; i < iters; ++i)
    for (int k = 0; k < kAcc; ++k) a[k] = _mm512_dpbf16_ps(a[k], x, y);
  __m512 s = a[0];
  for (int k = 1; k < kAcc; ++k) s = _mm512_add_ps(s, a[k]);
  alignas(64) float out[16];
  _mm512_store_ps(out, s);
  return out[0] + out[15];
}
#endif

// Portable fallback (the build's own ISA; 8 lanes assumed for the count).
float fma_loop_generic(int64_t iters, float seed) { return fma_chains<Floats8>(iters, seed); }

struct Peak {
  double gflops = 0;
  std::string isa;
};

// Best GFLOP/s of ten ~20 ms repeats of the FMA loop run on `threads` OpenMP threads at once
// (~0.25 s in all; on a shared machine interference only lowers a repeat, so the best one is
// kept). FLOP = 2 (multiply + add) x lanes x FMAs.
// bf16 (--precision bf16): the VDPBF16PS loop instead (FLOP = 4 x lanes per instruction); and
// where oneDNN runs its bf16 matmuls on AMX tiles (which VDPBF16PS does not bound), the peak is
// the better of that loop and the best of five oneDNN bf16 2048^3 matmuls on bf16 inputs
// (labelled "amx: oneDNN bf16 matmul 2048^3"): the rate the GEMMs of the step can reach.
Peak measure_peak(int threads, bool bf16 = false) {
  float (*kernel)(int64_t, float) = fma_loop_generic;
  int lanes = 8;
  Peak p{0, "generic"};
#ifdef CTX_BENCH_X86
  __builtin_cpu_init();
  if (bf16 && cpu_has_avx512_bf16()) {
    kernel = dpbf16_loop_avx512, lanes = 32, p.isa = "avx512_bf16 VDPBF16PS loop";
  } else if (__builtin_cpu_supports("avx512f")) {
    kernel = fma_loop_avx512, lanes = 16, p.isa = "avx512f";
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    kernel = fma_loop_avx2, lanes = 8, p.isa = "avx2+fma";
  }
#endif
  std::vector<float> sink((size_t)threads, 0.0f);
  auto run = [&](int64_t iters) {
    auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
    {
      int t = omp_get_thread_num();
      sink[(size_t)t] += kernel(iters, 1.0f + 0.01f * (float)t);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  run(10000);  // wake the threads
  int64_t iters = 200000;
  double dt = run(iters);
  iters = std::max<int64_t>(10000, (int64_t)((double)iters * 0.02 / std::max(dt, 1e-6)));
  for (int rep = 0; rep < 10; ++rep) {
    double s = run(iters);
    double flop = 2.0 * lanes * kAcc * (double)iters * threads;
    p.gflops = std::max(p.gflops, flop / s / 1e9);
  }
  volatile float keep = 0;
  for (float v : sink) keep = keep + v;
  (void)keep;
  if (bf16 && cpu_has_avx512_bf16() && cpu::onednn_has_amx()) {
    const double amx = cpu::onednn_bf16_matmul_gflops(2048, 5);
    if (amx > p.gflops) p = {amx, "amx: oneDNN bf16 matmul 2048^3"};
  }
  return p;
}

// The optimizer phase as the trainer runs it. Where this tree's Optimizer has clip_and_step (the
// grad-norm clip folded into a fused AdamW) and zero_grad, they are used, as train/trainer.cpp
// does; otherwise clip_grad_norm + step + Module::zero_grad.
template <class O, class = void>
struct has_clip_and_step : std::false_type {};
template <class O>
struct has_clip_and_step<O, std::void_t<decltype(std::declval<O&>().clip_and_step(1.0, 1.0))>> : std::true_type {};
template <class O, class = void>
struct has_zero_grad : std::false_type {};
template <class O>
struct has_zero_grad<O, std::void_t<decltype(std::declval<O&>().zero_grad())>> : std::true_type {};

template <class O>
void optimizer_phase(O& optim, nn::GPT& model, const nn::NamedParams& params, double lr, double clip) {
  if constexpr (has_clip_and_step<O>::value) {
    optim.clip_and_step(lr, clip);
  } else {
    clip_grad_norm(params, clip);
    optim.step(lr);
  }
  if constexpr (has_zero_grad<O>::value) optim.zero_grad();
  else model.zero_grad();
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / (double)v.size();
}
double round_to(double x, int digits) {
  double f = std::pow(10.0, digits);
  return std::round(x * f) / f;
}

cxxopts::Options bench_options() {
  cxxopts::Options o(
      "ctxlab bench",
      "Time training steps (AdamW, random tokens) and print one JSON object on stdout:\n"
      "tokens/s, ms per step split into forward / backward / optimizer, peak RSS, parameters,\n"
      "FLOP per token (6N + 12 L T D, N = matmul weights incl. the output head), achieved GFLOP/s\n"
      "and MFU against the peak of an FMA loop measured at start-up on all threads (or --peak-gflops).\n"
      "A human-readable summary goes to stderr.\n"
      "  ctxlab bench --preset small                       # B 8, T 256, 2 warm-up + 10 timed steps\n"
      "  ctxlab bench --preset small --posenc rope --steps 20 --json runs/bench-rope.json\n"
      "  ctxlab bench --preset medium --posenc '{\"type\":\"alibi\"}' --batch 2\n"
      "  ctxlab bench --preset tiny --steps 5 --peak-gflops 190   # skip the peak measurement\n"
      "  CTXLAB_THREADS=1 ctxlab bench --preset small      # one thread\n"
      "  ctxlab bench --peak-only                          # the FMA-loop peak and the copy bandwidth, as JSON\n"
      "  ctxlab bench --decode --precision bf16            # sampling tokens/s against the weight-streaming bound\n"
      "bench/compare.sh runs this against the PyTorch peer (bench/torch_peer.py); see bench/README.md.");
  add_config_options(o);
  o.add_options("bench")("steps", "timed steps", cxxopts::value<int64_t>()->default_value("10"))(
      "warmup", "untimed steps first", cxxopts::value<int64_t>()->default_value("2"))(
      "batch", "sequences per step (default: small 8, medium 4, tiny 8, --config 8)",
      cxxopts::value<int64_t>())(
      "context", "sequence length T (default: the config's context)", cxxopts::value<int64_t>())(
      "threads", "threads (default: CTXLAB_THREADS, else the cores available)", cxxopts::value<int>())(
      "peak-gflops", "peak GFLOP/s for MFU instead of measuring it", cxxopts::value<double>())(
      "deterministic", "time the step `train --deterministic` takes (one sequence at a time + gradient tree)")(
      "peak-only", "only measure the peaks: print {\"peak_gflops\", \"peak_isa\", \"threads\", \"copy_gbps\", "
      "\"copy_gbps_1thread\", \"copy_bytes\"} and exit (copy: STREAM's copy over the model's GEMM weights' bytes, "
      "on all threads and on one)")(
      "decode", "time sampling instead of training: greedy generations of --decode-tokens tokens after a 1-token "
      "prompt (the median of --steps generations, default 3), tokens/s against the weight-streaming bound "
      "(samples x copy bandwidth / weight bytes per step; docs/sampling.md)")(
      "decode-tokens", "with --decode: tokens generated per sample", cxxopts::value<int64_t>()->default_value("256"))(
      "num-samples", "with --decode: samples decoded together (one batch: the weights are streamed once per step for "
      "all of them)", cxxopts::value<int64_t>()->default_value("1"))(
      "json", "also write the JSON object to this file", cxxopts::value<std::string>())(
      "profile", "time every autograd op by name during the timed steps (as CTXLAB_PROFILE=1): the per-op table "
      "goes to stderr and under \"profile\" in the JSON; the hooks add a little time to each op")(
      "seed", "seed of the init and of the token batches", cxxopts::value<uint64_t>()->default_value("1337"))(
      "h,help", "this help");
  add_device_option(o, "where the timed steps run (phases are timed after a device synchronisation)");
  add_precision_options(o);
  return o;
}

// What to time, from the options (checked; --threads is applied).
struct BenchSpec {
  ModelConfig cfg;
  std::string source, preset;  // preset: "" with --config
  int64_t steps = 0, warmup = 0, B = 0, T = 0;
  int threads = 0;
  bool bf16 = false;
};

BenchSpec bench_spec(const cxxopts::ParseResult& a) {
  BenchSpec b;
  std::tie(b.cfg, b.source) = config_from_options(a);
  b.preset = a.count("config") ? "" : (a.count("preset") ? a["preset"].as<std::string>() : "small");
  b.steps = a["steps"].as<int64_t>(), b.warmup = a["warmup"].as<int64_t>();
  CTX_CHECK(b.steps >= 1, "--steps must be at least 1, got ", b.steps);
  CTX_CHECK(b.warmup >= 0, "--warmup must be non-negative, got ", b.warmup);
  b.B = a.count("batch") ? a["batch"].as<int64_t>() : (b.preset == "medium" ? 4 : 8);
  b.T = a.count("context") ? a["context"].as<int64_t>() : b.cfg.context;
  CTX_CHECK(b.B >= 1, "--batch must be at least 1, got ", b.B);
  CTX_CHECK(b.T >= 1, "--context must be at least 1, got ", b.T);
  if (a.count("threads")) ctx::set_num_threads(a["threads"].as<int>());
  b.threads = ctx::num_threads();
  b.bf16 = gemm_precision() == Precision::BF16;
  return b;
}

// --peak-only: the peaks alone, as JSON on stdout: FLOP/s, and the copy bandwidth at the size of
// the model's GEMM weights (what a decoding step streams) on all threads and on one.
int print_peak_only(const BenchSpec& b) {
  const int threads = b.threads;
  Peak p = measure_peak(threads, b.bf16);
  const int64_t bytes = decode_weight_bytes(b.cfg, b.bf16 ? 2 : 4);
  const double bw = copy_bandwidth_gbps(bytes, threads), bw1 = copy_bandwidth_gbps(bytes, 1);
  nlohmann::json j = {{"peak_gflops", round_to(p.gflops, 2)}, {"peak_isa", p.isa}, {"threads", threads},
                      {"copy_gbps", round_to(bw, 2)}, {"copy_gbps_1thread", round_to(bw1, 2)}, {"copy_bytes", bytes}};
  std::fprintf(stderr, "bench: peak %.1f GFLOP/s (%s%s, %d threads); copy %.1f GB/s (%d threads), %.1f GB/s (1) over "
               "%.1f MB\n", p.gflops, p.isa.c_str(), b.bf16 ? "" : " FMA loop", threads, bw, threads, bw1,
               (double)bytes / 1e6);
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

// The peak MFU is measured against, and where it came from.
struct PeakChoice {
  double gflops = 0;
  std::string source = "given", isa;
};

// The model's FLOP per token: 6 N (forward 2 N, backward 4 N) over the matmul weights, plus the
// attention score and value products, 12 L T D (full T x T, no causal halving), as in the PaLM paper.
struct FlopCount {
  int64_t n_matmul = 0;
  double per_token = 0;
};
FlopCount flop_count(const ModelConfig& cfg, int64_t T) {
  const int64_t D = cfg.d_model, L = cfg.n_layers, Fd = cfg.d_ff, V = cfg.vocab_size;
  FlopCount f;
  f.n_matmul = L * (4 * D * D + 2 * D * Fd) + V * D;
  f.per_token = 6.0 * (double)f.n_matmul + 12.0 * (double)L * (double)T * (double)D;
  return f;
}

// Per timed step: forward, backward and optimizer ms, and their sum; the last step's loss.
struct Timings {
  std::vector<double> fwd, bwd, opt, total;
  double last_loss = 0;
};

// Random [B, T] inputs and their next-token targets (each row one chain of tokens).
std::pair<Tensor, Tensor> random_batch(Rng& rng, int64_t B, int64_t T, int64_t V) {
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  int64_t* xp = x.host<int64_t>();
  int64_t* yp = y.host<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t prev = (int64_t)rng.below((uint64_t)V);
    for (int64_t t = 0; t < T; ++t) {
      int64_t next = (int64_t)rng.below((uint64_t)V);
      xp[b * T + t] = prev, yp[b * T + t] = next, prev = next;
    }
  }
  return std::make_pair(x, y);
}

using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point x, Clock::time_point y) {
  return std::chrono::duration<double, std::milli>(y - x).count();
}

// The warm-up and timed steps, each the step `train` takes: under --deterministic one
// forward/backward per sequence, the gradients summed in the tree (train/dist/grad_tree.h);
// forward and backward times add up over the shards.
Timings time_steps(nn::GPT& model, AdamW& optim, const nn::NamedParams& params, const BenchSpec& b, Rng& rng,
                   Backend& be, const std::vector<std::pair<int64_t, int64_t>>& shards) {
  const double lr = 1e-3, grad_clip = 1.0;  // trainer.cpp's defaults
  GradTree grad_tree(params);
  Timings t;
  for (int64_t s = 0; s < b.warmup + b.steps; ++s) {
    if (s == b.warmup) prof::reset();  // the per-op profile covers the timed steps only
    auto [x, y] = random_batch(rng, b.B, b.T, b.cfg.vocab_size);
    be.synchronize();  // on a GPU the launches are asynchronous: each phase ends when its kernels do
    double f_ms = 0, b_ms = 0;
    t.last_loss = 0;
    for (size_t si = 0; si < shards.size(); ++si) {
      const auto [b0, b1] = shards[si];
      const bool whole = shards.size() == 1;
      auto ta = Clock::now();
      Variable loss = model.loss(whole ? x : x.slice0(b0, b1), whole ? y : y.slice0(b0, b1));
      if (!whole) loss = scale(loss, (double)(b1 - b0) / (double)b.B);
      be.synchronize();
      auto tb = Clock::now();
      loss.backward();
      if (!whole) {
        grad_tree.push((int64_t)si);
        if (si + 1 == shards.size()) grad_tree.finish();
      }
      be.synchronize();
      auto tc = Clock::now();
      f_ms += ms_between(ta, tb);
      b_ms += ms_between(tb, tc);
      t.last_loss += to_host(loss.data()).item();  // outside the timed phases
    }
    auto t2 = Clock::now();
    optimizer_phase(optim, model, params, lr, grad_clip);
    be.synchronize();
    auto t3 = Clock::now();
    CTX_CHECK(std::isfinite(t.last_loss), "bench: loss became ", t.last_loss, " at step ", s + 1);
    if (s < b.warmup) continue;
    t.fwd.push_back(f_ms);
    t.bwd.push_back(b_ms);
    t.opt.push_back(ms_between(t2, t3));
    t.total.push_back(f_ms + b_ms + ms_between(t2, t3));
  }
  return t;
}

// A device that records (CUDA), unless CTXLAB_CUDA_GRAPH=0: the step as `train` runs it — two
// eager steps, then forward, backward, clip and AdamW recorded once (core/step_graph.h) and
// replayed, each step's batch copied into the recording's input buffers first (outside the
// timing, as the eager loop's batch is drawn outside it). A replay has no phases: forward,
// backward and optimizer stay empty (null in the JSON, "n/a" in the summary).
Timings time_graph_steps(nn::GPT& model, AdamW& optim, const BenchSpec& b, Rng& rng, Backend& be) {
  const double lr = 1e-3, grad_clip = 1.0;  // trainer.cpp's defaults
  optim.use_device_terms();
  StepGraph graph(be);
  Tensor gx, gy, gloss;
  Timings t;
  for (int64_t s = 0; s < b.warmup + b.steps; ++s) {
    if (s == b.warmup) prof::reset();
    const auto [x, y] = random_batch(rng, b.B, b.T, b.cfg.vocab_size);
    if (!gx.defined()) {
      gx = Tensor::empty(x.shape(), DType::I64, be.device());
      gy = Tensor::empty(y.shape(), DType::I64, be.device());
    }
    gx.copy_from(x);
    gy.copy_from(y);
    gx.set_checked_bound(b.cfg.vocab_size);  // random_batch's ids are below V
    gy.set_checked_bound(b.cfg.vocab_size);
    be.synchronize();
    const auto ta = Clock::now();
    optim.begin_step(lr);
    auto body = [&] {
      Variable loss = model.loss(gx, gy);
      gloss = loss.data();
      loss.backward();
      optim.clip_and_step_deferred(lr, grad_clip);
      optim.zero_grad();
    };
    if (s < 2) {
      body();
    } else {
      if (!graph.captured()) graph.capture(body);
      graph.replay(&model.dropout_rng);
    }
    be.synchronize();
    const double ms = ms_between(ta, Clock::now());
    t.last_loss = to_host(gloss).item();
    CTX_CHECK(std::isfinite(t.last_loss), "bench: loss became ", t.last_loss, " at step ", s + 1);
    if (s < b.warmup) continue;
    t.total.push_back(ms);
  }
  return t;
}

// What the JSON and the summary report besides the spec and the timings.
struct BenchRun {
  std::string posenc;
  int64_t nparams = 0;
  FlopCount flop;
  PeakChoice peak;
  Device dev = Device::CPU;
  bool deterministic = false;
};

nlohmann::ordered_json bench_json(const BenchSpec& b, const BenchRun& run, const Timings& t, double rss_mb) {
  const double step_med = median(t.total);
  const double tok_s = (double)(b.B * b.T) / (step_med / 1000.0);
  const double achieved = run.flop.per_token * tok_s / 1e9;
  nlohmann::ordered_json j;  // keys in this order, as bench/torch_peer.py writes them
  j["framework"] = "ctxlab";
  j["preset"] = b.preset.empty() ? b.source : b.preset;
  j["posenc"] = run.posenc;
  j["posenc_config"] = b.cfg.posenc;
  j["batch"] = b.B;
  j["deterministic"] = run.deterministic;  // per-sequence leaves + gradient tree (train --deterministic)
  j["context"] = b.T;
  j["threads"] = b.threads;
  j["warmup"] = b.warmup;
  j["steps"] = b.steps;
  j["tokens_per_s"] = round_to(tok_s, 1);
  j["ms_per_step"] = {{"median", round_to(step_med, 3)},
                      {"mean", round_to(mean(t.total), 3)},
                      {"min", round_to(*std::min_element(t.total.begin(), t.total.end()), 3)}};
  const auto phase = [](const std::vector<double>& v) {  // none in a replayed step (CTXLAB_CUDA_GRAPH)
    return v.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(round_to(median(v), 3));
  };
  j["forward_ms"] = phase(t.fwd);
  j["backward_ms"] = phase(t.bwd);
  j["optimizer_ms"] = phase(t.opt);
  j["cuda_graph"] = t.fwd.empty();
  j["peak_rss_mb"] = round_to(rss_mb, 1);
  j["params"] = run.nparams;
  j["matmul_params"] = run.flop.n_matmul;
  j["flop_per_token"] = run.flop.per_token;
  j["flop_formula"] = "6*N + 12*n_layers*T*d_model, N = n_layers*(4*d_model^2 + 2*d_model*d_ff) + vocab*d_model";
  j["achieved_gflops"] = round_to(achieved, 2);
  j["peak_gflops"] = round_to(run.peak.gflops, 2);
  j["peak_source"] = run.peak.source;
  if (!run.peak.isa.empty()) j["peak_isa"] = run.peak.isa;
  j["mfu"] = round_to(achieved / run.peak.gflops, 4);
  j["tokens_per_s_basis"] = "batch*context / median step";
  j["final_loss"] = round_to(t.last_loss, 4);
  j["gemm"] = run.dev == Device::CUDA ? std::string("cublas") : cpu::gemm_impl_name(cpu::current_gemm_impl());
  j["device"] = device_name(run.dev);
  j["precision"] = precision_name(gemm_precision());
  j["optimizer_call"] = has_clip_and_step<AdamW>::value ? "AdamW clip_and_step (trainer's fused path)"
                                                        : "clip_grad_norm + AdamW step";
  if (prof::enabled()) j["profile"] = prof::to_json((int)b.steps);
  return j;
}

// The human-readable summary on stderr.
void print_summary(const BenchSpec& b, const BenchRun& run, const Timings& t, double rss_mb) {
  const double step_med = median(t.total);
  const double tok_s = (double)(b.B * b.T) / (step_med / 1000.0);
  const double achieved = run.flop.per_token * tok_s / 1e9;
  const PeakChoice& p = run.peak;
  char buf[128];
  std::snprintf(buf, sizeof buf, "forward %.1f, backward %.1f, optimizer %.1f ms", median(t.fwd), median(t.bwd),
                median(t.opt));
  const std::string phases =
      t.fwd.empty() ? "one CUDA Graph replay a step (no phases; CTXLAB_CUDA_GRAPH=0 or --profile: eager steps)" : buf;
  std::fprintf(stderr,
               "bench: %s, posenc %s, %lld params, B %lld x T %lld, %d threads, %lld timed steps after %lld warm-up\n"
               "  %.0f tokens/s | step %.1f ms median (mean %.1f, min %.1f) | %s\n"
               "  %.2f MFLOP/token -> %.1f GFLOP/s achieved | peak %.1f GFLOP/s (%s%s%s) | MFU %.1f%% | "
               "peak RSS %.0f MB\n",
               b.source.c_str(), run.posenc.c_str(), (long long)run.nparams, (long long)b.B, (long long)b.T,
               b.threads, (long long)b.steps, (long long)b.warmup, tok_s, step_med, mean(t.total),
               *std::min_element(t.total.begin(), t.total.end()), phases.c_str(),
               run.flop.per_token / 1e6, achieved, p.gflops, p.source.c_str(), p.isa.empty() ? "" : ", ",
               p.isa.c_str(), 100.0 * (achieved / p.gflops), rss_mb);
  if (prof::enabled())
    std::fprintf(stderr, "per-op profile, mean of %lld timed steps:\n%s", (long long)b.steps,
                 prof::table((int)b.steps).c_str());
}

// JSON on stdout (and in --json), the summary on stderr.
void report(const cxxopts::ParseResult& a, const BenchSpec& b, const BenchRun& run, const Timings& t) {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  const double rss_mb = (double)ru.ru_maxrss / 1024.0;  // Linux: kilobytes
  const std::string out = bench_json(b, run, t, rss_mb).dump();
  print_summary(b, run, t, rss_mb);
  std::printf("%s\n", out.c_str());
  std::fflush(stdout);
  if (a.count("json")) {
    const std::string path = a["json"].as<std::string>(), text = out + "\n";
    write_file_atomic(path, {{text.data(), text.size()}}, "bench --json");
  }
}

// --decode: sampling timed against the weight-streaming bound (bench_decode.h).
int run_decode(const cxxopts::ParseResult& a, const BenchSpec& b) {
  nn::GPT model(b.cfg, DType::F32, b.source);
  model.init_weights(a["seed"].as<uint64_t>());
  move_model(model, device_option(a));
  model.eval();
  DecodeBenchOptions o;
  o.tokens = a["decode-tokens"].as<int64_t>();
  o.samples = a["num-samples"].as<int64_t>();
  o.rounds = a.count("steps") ? b.steps : 3;
  o.threads = b.threads;
  o.bf16 = b.bf16;
  o.seed = a["seed"].as<uint64_t>();
  const nlohmann::json j = bench_decode(model, o);
  std::fprintf(stderr, "bench --decode: %s, %s, %lld sample(s) x %lld tokens: %.1f tokens/s (%.3f ms a step) | "
               "bound %.1f tokens/s (copy %.1f GB/s over %.1f MB of weights) | %.1f%% of it (%.1f%% with the KV cache)\n",
               j["path"].get<std::string>().c_str(), j["precision"].get<std::string>().c_str(), (long long)o.samples,
               (long long)o.tokens, j["tokens_per_s"].get<double>(), j["ms_per_step"].get<double>(),
               j["bound_tokens_per_s"].get<double>(), j["copy_gbps"].get<double>(),
               (double)j["weight_bytes_per_step"].get<int64_t>() / 1e6, 100 * j["fraction_of_bound"].get<double>(),
               100 * j["fraction_of_bound_with_kv"].get<double>());
  const std::string out = j.dump();
  std::printf("%s\n", out.c_str());
  if (a.count("json")) {
    const std::string path = a["json"].as<std::string>(), text = out + "\n";
    write_file_atomic(path, {{text.data(), text.size()}}, "bench --json");
  }
  return 0;
}

}  // namespace

int run_bench(int argc, char** argv) {
  cxxopts::Options o = bench_options();
  auto r = parse_or_help(o, argc, argv);
  if (!r) return 0;
  apply_precision_options(*r);
  const auto& a = *r;
  const BenchSpec b = bench_spec(a);
  if (a.count("json")) check_output_file(a["json"].as<std::string>(), "--json");
  if (a.count("peak-only")) return print_peak_only(b);
  if (a.count("decode")) return run_decode(a, b);
  BenchRun run;
  if (a.count("peak-gflops")) {
    run.peak.gflops = a["peak-gflops"].as<double>();
    CTX_CHECK(run.peak.gflops > 0 && std::isfinite(run.peak.gflops), "--peak-gflops must be a positive number, got ",
              run.peak.gflops);
  }
  const uint64_t seed = a["seed"].as<uint64_t>();
  run.dev = device_option(a);

  nn::GPT model(b.cfg, DType::F32, b.source);
  model.init_weights(seed);
  model.pe->check_length(b.T);
  move_model(model, run.dev);
  model.train();
  run.posenc = model.pe->type();
  nn::NamedParams params = model.named_parameters();
  for (auto& p : params) run.nparams += p.second.data().numel();
  // trainer.cpp's defaults: lr 1e-3, betas 0.9/0.99, eps 1e-8, weight decay 0.1, clip 1.0
  AdamW optim(params, AdamWOptions{1e-3, 0.9, 0.99, 1e-8, 0.1});
  optim.anchor_value_bounds();  // as the trainer before its first step (FIRE decides on them, train/value_bounds.h)
  run.flop = flop_count(b.cfg, b.T);
  if (!a.count("peak-gflops") && run.dev == Device::CUDA) {  // the CPU's FMA peak says nothing of a GPU
    run.peak = {std::nan(""), "none (--device cuda: give the GPU's peak with --peak-gflops for MFU)", ""};
  } else if (!a.count("peak-gflops")) {
    Peak p = measure_peak(b.threads, b.bf16);
    run.peak = {p.gflops, "measured", p.isa};
  }

  Rng rng(seed ^ 0x9E3779B97F4A7C15ULL);
  run.deterministic = a["deterministic"].as<bool>();
  const DeterministicScope deterministic_kernels(run.deterministic);  // as train --deterministic
  const auto shards = run.deterministic ? sequence_shards(b.B) : std::vector<std::pair<int64_t, int64_t>>{{0, b.B}};
  if (a.count("profile")) prof::set_enabled(true);
  Backend& be = backend(run.dev);
  // the step as a CUDA Graph where the device records (on by default, as `train`), except where it
  // cannot: the gradient tree of --deterministic runs on the host, and a replay has no ops to profile
  const char* eager_why = shards.size() > 1 ? "--deterministic (its gradient tree runs on the host)"
                          : prof::enabled()  ? "--profile (a replayed step has no ops to time)"
                                             : nullptr;
  const bool asked = setting_env("CTXLAB_CUDA_GRAPH") && setting_flag("CTXLAB_CUDA_GRAPH", true);  // set to 1
  CTX_CHECK(!(asked && eager_why && be.can_capture()), "bench: CTXLAB_CUDA_GRAPH=1 records the step into a CUDA "
            "Graph: not with ", eager_why ? eager_why : "");
  const bool graph = setting_flag("CTXLAB_CUDA_GRAPH", true) && be.can_capture() && !eager_why;
  const Timings t = graph ? time_graph_steps(model, optim, b, rng, be) : time_steps(model, optim, params, b, rng, be, shards);
  report(a, b, run, t);
  return 0;
}

}  // namespace ctx::cli
