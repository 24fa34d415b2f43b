// bench/allreduce.cpp — the time of one gradient allreduce (train/dist/distributed.h:
// allreduce_mean, what every data-parallel step pays) for the presets' flat gradient buffers,
// under mpirun -np N. Ranks are lined up with a barrier before each call, so the time is the
// allreduce itself, not waiting for a slower rank. Rank 0 prints one JSON line per preset:
// {"preset", "ranks", "floats", "bytes", "ms_median", "ms_min", "GB_s_bus"} where GB_s_bus =
// 2 (N-1)/N x bytes / time, the bus bandwidth of a ring allreduce (docs/distributed.md).
//   mpirun -np 2 build/bench_allreduce [--repeats 50] [--presets tiny,small,medium]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "nn/config.h"
#include "nn/gpt.h"
#include "train/dist/distributed.h"

int main(int argc, char** argv) {
  using namespace ctx;
  cxxopts::Options o("bench_allreduce", "time of one gradient allreduce per preset (run under mpirun)");
  o.add_options()("repeats", "allreduces timed per preset", cxxopts::value<int>()->default_value("50"))(
      "presets", "comma-separated presets", cxxopts::value<std::string>()->default_value("tiny,small,medium"));
  auto a = o.parse(argc, argv);
  try {
    dist::init(/*forced=*/true);
    const int repeats = std::max(1, a["repeats"].as<int>());
    std::stringstream ss(a["presets"].as<std::string>());
    for (std::string name; std::getline(ss, name, ',');) {
      nn::GPT model(preset_config(name), DType::F32, "preset " + name);
      int64_t n = 0;
      for (auto& p : model.named_parameters()) n += p.second.data().numel();
      Tensor g = Tensor::full({n}, 1.0);
      std::vector<double> ms;
      for (int r = 0; r < repeats + 3; ++r) {
        dist::barrier();
        auto t0 = std::chrono::steady_clock::now();
        dist::allreduce_mean(g);
        double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (r >= 3) ms.push_back(t);  // the first calls set up the transport's buffers
      }
      CTX_CHECK(g.at(0) == 1.0 && g.at(n - 1) == 1.0, "bench_allreduce: the mean of ones is not one");
      std::sort(ms.begin(), ms.end());
      const double med = ms[ms.size() / 2], bytes = 4.0 * (double)n, N = dist::size();
      if (dist::is_root())
        std::printf("{\"preset\": \"%s\", \"ranks\": %d, \"floats\": %lld, \"bytes\": %.0f, \"ms_median\": %.4f, "
                    "\"ms_min\": %.4f, \"GB_s_bus\": %.3f}\n",
                    name.c_str(), dist::size(), (long long)n, bytes, med, ms.front(),
                    N > 1 ? 2.0 * (N - 1) / N * bytes / (med * 1e-3) / 1e9 : 0.0);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: error: %s\n", e.what());
    dist::abort_job(1);
    return 1;
  }
  return 0;
}
