// examples/step_timing.cpp — times forward+backward of a preset on random tokens (a quick
// health check of speed; the full benchmark is `ctxlab bench`).
#include <chrono>
#include <cstdio>
#include <string>

#include "core/allocator.h"
#include "core/rng.h"
#include "nn/gpt.h"

using namespace ctx;

int main(int argc, char** argv) {
  std::string preset = argc > 1 ? argv[1] : "small";
  int64_t B = argc > 2 ? std::stoll(argv[2]) : 8;
  ModelConfig cfg = preset_config(preset);
  nn::GPT model(cfg);
  model.init_weights(0);
  Rng rng(1);
  int64_t T = cfg.context;
  Tensor x = Tensor::empty({B, T}, DType::I64), y = Tensor::empty({B, T}, DType::I64);
  for (int64_t i = 0; i < B * T; ++i) {
    x.data<int64_t>()[i] = (int64_t)rng.below(256);
    y.data<int64_t>()[i] = (int64_t)rng.below(256);
  }
  for (int it = 0; it < 6; ++it) {
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
}
