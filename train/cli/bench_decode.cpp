// train/cli/bench_decode.cpp — the copy bandwidth and `bench --decode` (see bench_decode.h).
#include "train/cli/bench_decode.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "train/sample.h"
#include "train/stats.h"  // median

namespace ctx::cli {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

double copy_bandwidth_gbps(int64_t bytes, int threads) {
  CTX_CHECK(bytes >= 1024 && threads >= 1, "copy bandwidth: needs at least 1 KiB and one thread, got ", bytes,
            " bytes on ", threads);
  const int64_t n = bytes / 2 / (int64_t)sizeof(float) / 16 * 16;  // floats per array, whole 64-byte lines
  const size_t sz = (size_t)n * sizeof(float);
  // from the tensors' pool, so that the arrays have the pages the weights have (huge pages from
  // 2 MiB: core/allocator.h)
  Tensor a = Tensor::empty({n}, DType::F32), b = Tensor::empty({n}, DType::F32);
  float* pa = a.data<float>();
  float* pb = b.data<float>();
#pragma omp parallel for schedule(static) num_threads(threads)
  for (int64_t i = 0; i < n; ++i) pa[i] = (float)(i & 1023), pb[i] = 0.f;  // each thread touches its share
  auto pass = [&] {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t i = 0; i < n; ++i) pb[i] = pa[i];
    return seconds_since(t0);
  };
  pass();  // warm: the threads are up, the pages mapped
  double best = 1e30, spent = 0;
  for (int rep = 0; rep < 1000 && (rep < 10 || spent < 0.2); ++rep) {
    const double s = pass();
    best = std::min(best, s), spent += s;
  }
  volatile float keep = pb[n / 2];  // the copy is used
  (void)keep;
  return 2.0 * (double)sz / best / 1e9;
}

int64_t decode_weight_bytes(const ModelConfig& cfg, int bytes_per_value) {
  const int64_t D = cfg.d_model, L = cfg.n_layers, F = cfg.ff_dim(), V = cfg.vocab_size;
  return (L * (3 * D * D + D * D + 2 * D * F) + V * D) * (int64_t)bytes_per_value;
}

nlohmann::json bench_decode(nn::GPT& model, const DecodeBenchOptions& opt) {
  CTX_CHECK(opt.tokens >= 2 && opt.prompt >= 1 && opt.samples >= 1 && opt.rounds >= 1,
            "bench --decode: --decode-tokens must be >= 2, and the prompt, --num-samples and --steps >= 1");
  Rng rng(opt.seed);
  std::vector<int32_t> prompt((size_t)opt.prompt);
  for (auto& t : prompt) t = (int32_t)rng.below((uint64_t)model.cfg.vocab_size);
  SampleOptions so;
  so.max_tokens = opt.tokens;
  so.temperature = 0;  // greedy: the draw costs an argmax, the rest is the model
  so.num_samples = opt.samples;
  // warm-up: bf16 copies made, pages touched, the decode step's pack of the weights made (kept by the
  // model for the timed rounds: docs/sampling.md, "The pack kept"); timed on its own, as a first call
  const auto w0 = std::chrono::steady_clock::now();
  SampleResult r = sample_many(model, prompt, so);
  const double first_s = seconds_since(w0);
  std::vector<double> secs;
  for (int64_t i = 0; i < opt.rounds; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    r = sample_many(model, prompt, so);
    secs.push_back(seconds_since(t0));
  }
  const double s = median(secs);
  const double tokens = (double)(opt.tokens * opt.samples);
  const int64_t wbytes = decode_weight_bytes(model.cfg, opt.bf16 ? 2 : 4);
  // the KV cache read by an average step: keys and values of every layer, fp32, up to position
  // prompt + tokens / 2
  const double mean_len = (double)opt.prompt + (double)opt.tokens / 2.0;
  const double kv_bytes = 2.0 * (double)model.cfg.n_layers * mean_len * (double)model.cfg.d_model * 4.0 *
                          (double)opt.samples;
  const double bw = copy_bandwidth_gbps(wbytes, opt.threads), bw1 = copy_bandwidth_gbps(wbytes, 1);
  const double step_s = s / (double)opt.tokens;  // one step: every sample's next token
  const double bound_s = (double)wbytes / (bw * 1e9), bound_kv_s = ((double)wbytes + kv_bytes) / (bw * 1e9);
  auto r4 = [](double x) { return std::round(x * 1e4) / 1e4; };
  return {{"decode", true},
          {"path", r.path},
          {"tokens_per_s", r4(tokens / s)},
          {"ms_per_token", r4(1e3 * s / tokens)},
          {"ms_per_step", r4(1e3 * step_s)},
          {"samples", opt.samples},
          {"tokens", opt.tokens},
          {"prompt", opt.prompt},
          {"rounds_s", secs},
          {"first_call_s", first_s},
          {"threads", opt.threads},
          {"precision", opt.bf16 ? "bf16" : "fp32"},
          {"weight_bytes_per_step", wbytes},
          {"kv_bytes_per_step_mean", (int64_t)kv_bytes},
          {"copy_gbps", r4(bw)},
          {"copy_gbps_1thread", r4(bw1)},
          {"bound_tokens_per_s", r4((double)opt.samples / bound_s)},
          {"fraction_of_bound", r4(bound_s / step_s)},
          {"fraction_of_bound_with_kv", r4(bound_kv_s / step_s)}};
}

}  // namespace ctx::cli
