// examples/step_timing.cpp — times forward+backward of a preset on random tokens (a quick
// health check of speed; the full benchmark is `ctxlab bench`). CTXLAB_PROFILE=1 adds the
// per-op profile of the warm steps:
//   CTXLAB_PROFILE=1 build/example_step_timing small 8 ['{"type":"shaw"}' [bf16 [dropout]]]
// ('-' keeps the preset's encoding; dropout: the config's dropout rate, training mode)
#include <chrono>
#include <cstdio>
#include <string>

#include "autograd/profiler.h"
#include "core/allocator.h"
#include "core/precision.h"
#include "core/rng.h"
#include "nn/gpt.h"

using namespace ctx;

int main(int argc, char** argv) {
  std::string preset = argc > 1 ? argv[1] : "small";
  int64_t B = argc > 2 ? std::stoll(argv[2]) : 8;
  ModelConfig cfg = preset_config(preset);
  if (argc > 3 && std::string(argv[3]) != "-") cfg.posenc = nlohmann::json::parse(argv[3]);  // e.g. '{"type":"shaw"}'
  if (argc > 5) cfg.dropout = std::stod(argv[5]);  // e.g. 0.1
  if (argc > 4) {  // fp32 | bf16, as --precision (says so and runs fp32 without avx512_bf16)
    std::string note = apply_precision_request(precision_from_string(argv[4]), false, Device::CPU);
    if (!note.empty()) std::printf("%s\n", note.c_str());
  }
  nn::GPT model(cfg);
  model.init_weights(0);
  Rng rng(1);
  int64_t T = cfg.context;
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) {
    x.host<int64_t>()[i] = (int64_t)rng.below(256);
    y.host<int64_t>()[i] = (int64_t)rng.below(256);
  }
  const int steps = 6, warm = 2;
  for (int it = 0; it < steps; ++it) {
    if (it == warm && prof::enabled()) prof::reset();  // profile the warm steps only
    auto t0 = std::chrono::steady_clock::now();
    Variable loss = model.loss(x, y);
    auto t1 = std::chrono::steady_clock::now();
    loss.backward();
    auto t2 = std::chrono::steady_clock::now();
    model.zero_grad();
    double f = std::chrono::duration<double, std::milli>(t1 - t0).count();
    double b = std::chrono::duration<double, std::milli>(t2 - t1).count();
    auto st = BufferPool::host().stats();
    std::printf("step %d: loss %.4f fwd %.1f ms bwd %.1f ms  tok/s %.0f  sys_allocs %llu peak %.1f MB\n", it,
                loss.data().item(), f, b, B * T / ((f + b) / 1000), (unsigned long long)st.system_allocs,
                st.peak_in_use / 1e6);
  }
  if (prof::enabled())
    std::printf("\nper-op profile (CTXLAB_PROFILE=1), mean of %d warm steps:\n%s", steps - warm,
                prof::table(steps - warm, 30).c_str());
}
