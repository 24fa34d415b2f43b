// bench/norm.cpp — LayerNorm and RMSNorm, forward and backward (Backend::layernorm*, rmsnorm*),
// on one device at GPT-2 small's activation shape by default ([8192, 768] f32: B 8 x T 1024 rows,
// d_model 768): us per call, median and best of interleaved rounds, each round `--calls` calls
// then Backend::synchronize. With the residual add in front (FastPath::AddNorm): "add+layernorm"
// is the composed pair (binary add, then the norm), "add_layernorm" the fused call; backward,
// "layernorm_backward+add" sums dx into the residual gradient by its own add, "+dres" in the norm. On the emulated CUDA device with CTXLAB_EMU_COUNTERS=FILE and
// --repeats 0 it is the driver that counts one call of each (the warm-up round, --calls 1):
//   CTXLAB_EMU_COUNTERS=c.json build-emu/bench_norm --repeats 0 --calls 1 && bench/roofline.py --counters c.json
//   bench_norm [--device cuda|cpu] [--rows 8192] [--cols 768] [--repeats 30] [--calls 20]
#include <cstdio>
#include <string>

#include <cxxopts.hpp>

#include "bench/timing.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/tensor.h"

using namespace ctx;

int main(int argc, char** argv) {
  cxxopts::Options opts("bench_norm", "LayerNorm / RMSNorm forward and backward, us per call");
  opts.add_options()  // (each call adds one option)
      ("device", "cuda or cpu", cxxopts::value<std::string>()->default_value("cuda"))  //
      ("rows", "N: rows of x [N, C]", cxxopts::value<int64_t>()->default_value("8192"))  //
      ("cols", "C: the normalised dim", cxxopts::value<int64_t>()->default_value("768"))  //
      ("repeats", "timed rounds (0: the warm-up round only, for the emulator's counters)",
       cxxopts::value<int>()->default_value("30"))  //
      ("calls", "calls per round", cxxopts::value<int>()->default_value("20"));
  auto args = opts.parse(argc, argv);
  const std::string dev_name = args["device"].as<std::string>();
  if (dev_name != "cuda" && dev_name != "cpu")
    throw Error("bench_norm: --device must be cuda or cpu, got '" + dev_name + "'");
  const Device dev = dev_name == "cuda" ? Device::CUDA : Device::CPU;
  const int64_t N = args["rows"].as<int64_t>(), C = args["cols"].as<int64_t>();
  const int repeats = args["repeats"].as<int>(), calls = args["calls"].as<int>();
  Backend& be = backend(dev);

  Rng rng(1);
  auto randn = [&](const Shape& sh) {
    Tensor t = Tensor::empty(sh, DType::F32);
    rng.fill_normal(t, 0.0, 1.0);
    return t.to(dev);
  };
  // x, dy [N, C]; w, b [C]; outputs and gradients on the device
  const Tensor x = randn({N, C}), dy = randn({N, C}), w = randn({C}), b = randn({C});
  Tensor y = Tensor::empty({N, C}, DType::F32, dev), dx = Tensor::empty({N, C}, DType::F32, dev);
  Tensor mean = Tensor::empty({N}, DType::F32, dev), rstd = Tensor::empty({N}, DType::F32, dev);
  Tensor dw = Tensor::zeros({C}, DType::F32, dev), db = Tensor::zeros({C}, DType::F32, dev);
  // the residual add: a [N, C], h = x + a; g: the residual stream's gradient, sum: g + dx
  const Tensor a = randn({N, C}), g = randn({N, C});
  Tensor h = Tensor::empty({N, C}, DType::F32, dev), sum = Tensor::empty({N, C}, DType::F32, dev);
  be.layernorm(x, w, b, 1e-5, y, mean, rstd);  // the statistics the backward reads
  auto rounds = [&](auto f) {
    return [&be, calls, f] {
      for (int i = 0; i < calls; ++i) f();
      be.synchronize();
    };
  };
  const bench::Candidates cands = {
      {"layernorm", rounds([&] { be.layernorm(x, w, b, 1e-5, y, mean, rstd); })},
      {"layernorm_backward", rounds([&] { be.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db); })},
      {"rmsnorm", rounds([&] { be.rmsnorm(x, w, 1e-5, y, rstd); })},
      {"rmsnorm_backward", rounds([&] { be.rmsnorm_backward(dy, x, w, rstd, dx, dw); })},
      {"add+layernorm", rounds([&] {
         be.binary(BinaryOp::Add, x, a, h);
         be.layernorm(h, w, b, 1e-5, y, mean, rstd);
       })},
      {"add_layernorm", rounds([&] { be.add_layernorm(x, a, w, b, 1e-5, h, y, mean, rstd); })},
      {"layernorm_backward+add", rounds([&] {
         be.layernorm_backward(dy, x, w, mean, rstd, dx, dw, db);
         be.binary(BinaryOp::Add, g, dx, sum);
       })},
      {"layernorm_backward+dres", rounds([&] { be.layernorm_backward(dy, x, w, mean, rstd, sum, dw, db, g); })},
      {"add+rmsnorm", rounds([&] {
         be.binary(BinaryOp::Add, x, a, h);
         be.rmsnorm(h, w, 1e-5, y, rstd);
       })},
      {"add_rmsnorm", rounds([&] { be.add_rmsnorm(x, a, w, 1e-5, h, y, rstd); })},
      {"rmsnorm_backward+add", rounds([&] {
         be.rmsnorm_backward(dy, x, w, rstd, dx, dw);
         be.binary(BinaryOp::Add, g, dx, sum);
       })},
      {"rmsnorm_backward+dres", rounds([&] { be.rmsnorm_backward(dy, x, w, rstd, sum, dw, g); })},
  };
  const bench::Times t = bench::time_rounds(cands, repeats);
  std::printf("bench_norm: %s, x [%lld, %lld] f32, %d rounds of %d calls; us per call, median (best)\n",
              be.name().c_str(), (long long)N, (long long)C, repeats, calls);
  for (const auto& c : cands) {
    auto it = t.find(c.first);
    if (it == t.end()) continue;  // --repeats 0
    const double per = 1e3 / calls;
    std::printf("%-24s %9.1f (%9.1f)\n", c.first.c_str(), bench::median(it->second) * per,
                bench::best(it->second) * per);
  }
}
