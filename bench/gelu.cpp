// bench/gelu.cpp — tanh-GELU forward and backward on the model's MLP activation ([2048, 1024]
// f32, B 8 x T 256 rows, d_ff 1024): the vectorised kernel (core/cpu/gelu_fast.h) vs oneDNN's
// eltwise vs the reference loop, 1 and 2 threads, interleaved rounds, median and best, ms.
//   OMP_WAIT_POLICY=PASSIVE build/bench_gelu [rounds]
#include <omp.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "core/cpu/gelu_fast.h"
#include "core/cpu/onednn_ops.h"
#include "core/cpu/ref_kernels.h"
#include "core/threads.h"
#include "core/rng.h"

using namespace ctx;

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 20;
  ctx::init_threading();
  const int64_t n = 2048 * 1024;
  std::vector<float> x(n), dy(n), y(n), dx(n);
  Rng r(1);
  for (int64_t i = 0; i < n; ++i) x[i] = (float)(2 * r.normal()), dy[i] = (float)r.normal();
  const auto gelu = UnaryOp::GeluTanh;
  std::printf("bench_gelu: n = %lld, fast kernel %s, OMP_WAIT_POLICY=%s\n", (long long)n,
              cpu::gelu_fast_isa(), bench::env_or("OMP_WAIT_POLICY", "(unset)"));
  std::printf("%-20s %7s %10s %10s %10s %10s\n", "op", "threads", "fast", "onednn", "ref",
              "onednn/fast");
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (bool bwd : {false, true}) {
      bench::Candidates c;
      if (!bwd) {
        c = {{"fast", [&] { cpu::gelu_tanh_fast_f32(x.data(), y.data(), n); }},
             {"onednn", [&] { cpu::onednn_gelu_tanh_f32(x.data(), y.data(), n); }},
             {"ref", [&] { cpu::ref::unary<float>(gelu, x.data(), y.data(), n, 0.f, 0.f); }}};
      } else {
        c = {{"fast", [&] { cpu::gelu_tanh_backward_fast_f32(x.data(), dy.data(), dx.data(), n); }},
             {"onednn", [&] { cpu::onednn_gelu_tanh_backward_f32(x.data(), dy.data(), dx.data(), n); }},
             {"ref", [&] {
                cpu::ref::unary_backward<float>(gelu, x.data(), nullptr, dy.data(), dx.data(), n,
                                                0.f, 0.f);
              }}};
      }
      bench::Times t = bench::time_rounds(c, rounds);
      auto med = [&](const char* k) { return bench::median(t[k]); };
      auto best = [&](const char* k) { return *std::min_element(t[k].begin(), t[k].end()); };
      std::printf("%-20s %7d %4.2f|%4.2f %4.2f|%4.2f %5.1f|%5.1f %10.2f\n",
                  bwd ? "gelu_tanh_backward" : "gelu_tanh", threads, med("fast"), best("fast"),
                  med("onednn"), best("onednn"), med("ref"), best("ref"), med("onednn") / med("fast"));
    }
  }
}
