// bench/attention_tc.cpp — causal attention alone on CUDA under --precision bf16 (the tensor-core
// FlashAttention-2 kernels, core/cuda/attention_tc.cu), at FlashAttention-2's benchmark shapes:
// head dim 64, 2048 / 64 = 32 heads, batch x seqlen = 16k tokens, seqlen 512 .. 8k, plus GPT-2
// small's attention (B 8, H 12, T 1024). Forward alone and forward + backward, ms per call (median
// and best of interleaved rounds), and TFLOP/s by FlashAttention's own count (benchmark_flash_
// attention.py: forward 4 B H T^2 D / 2 under the causal mask, backward 2.5x that). One JSON line per
// shape follows the table: bench/torch_attention.py writes the same lines for PyTorch's
// scaled_dot_product_attention on its flash backend (FlashAttention-2's kernel), so that
// scripts/gpu_check.sh's `attention` section compares the two on one GPU.
// Inputs: q, k, v and dout f32 with their bf16 copies made once and kept (what split_heads and
// merge_heads' backward write in a training step), so the timed calls are the kernels alone; out,
// lse, dq, dk, dv f32 (ctxlab's contract).
//   bench_attention_tc [--device cuda] [--seqlens 512,1024,2048,4096,8192] [--tokens 16384]
//                      [--heads 32] [--dim 64] [--gpt2] [--repeats 10] [--calls 5] [--json FILE]
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "bench/timing.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/fast_paths.h"
#include "core/precision.h"
#include "core/rng.h"
#include "core/tensor.h"

using namespace ctx;

namespace {

struct Shape4 {
  std::string name;
  int64_t B, H, T, D;
};

// FlashAttention's count: the forward's two products, halved by the causal mask
double forward_flop(const Shape4& s) { return 4.0 * (double)s.B * s.H * s.T * s.T * s.D / 2; }

std::vector<int64_t> parse_list(const std::string& s, const char* what) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    CTX_CHECK(used == item.size() && v > 0, "bench_attention_tc: ", what, ": '", item,
              "' is not a positive integer (e.g. 512,1024)");
    out.push_back(v);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("bench_attention_tc", "causal attention alone under bf16 on CUDA: ms per call and TFLOP/s");
  opts.add_options()  // (each call adds one option)
      ("device", "cuda (cpu: the fused CPU attention, for a smoke run)", cxxopts::value<std::string>()->default_value("cuda"))  //
      ("seqlens", "sequence lengths, comma-separated", cxxopts::value<std::string>()->default_value("512,1024,2048,4096,8192"))  //
      ("tokens", "batch x seqlen of every shape (FlashAttention's benchmark: 16k)", cxxopts::value<int64_t>()->default_value("16384"))  //
      ("heads", "heads (FlashAttention's benchmark: hidden 2048 / head dim)", cxxopts::value<int64_t>()->default_value("32"))  //
      ("dim", "head dim", cxxopts::value<int64_t>()->default_value("64"))  //
      ("gpt2", "add GPT-2 small's attention: B 8, H 12, T 1024, D 64")  //
      ("repeats", "timed rounds", cxxopts::value<int>()->default_value("10"))  //
      ("calls", "calls per round", cxxopts::value<int>()->default_value("5"))  //
      ("json", "also append the JSON lines to FILE", cxxopts::value<std::string>());
  auto args = opts.parse(argc, argv);
  const std::string dev_name = args["device"].as<std::string>();
  CTX_CHECK(dev_name == "cuda" || dev_name == "cpu", "bench_attention_tc: --device must be cuda or cpu, got '",
            dev_name, "'");
  const Device dev = dev_name == "cuda" ? Device::CUDA : Device::CPU;
  const int64_t tokens = args["tokens"].as<int64_t>(), H = args["heads"].as<int64_t>(), D = args["dim"].as<int64_t>();
  const int repeats = args["repeats"].as<int>(), calls = args["calls"].as<int>();
  CTX_CHECK(tokens > 0 && H > 0 && D > 0 && repeats >= 1 && calls >= 1,
            "bench_attention_tc: --tokens, --heads, --dim, --repeats and --calls must be positive");
  std::vector<Shape4> shapes;
  for (const int64_t T : parse_list(args["seqlens"].as<std::string>(), "--seqlens")) {
    CTX_CHECK(tokens % T == 0, "bench_attention_tc: --tokens ", tokens, " is not a multiple of seqlen ", T);
    shapes.push_back({"seqlen " + std::to_string(T), tokens / T, H, T, D});
  }
  if (args.count("gpt2")) shapes.push_back({"gpt2-small", 8, 12, 1024, 64});

  PrecisionScope bf16(Precision::BF16);
  set_fast_path(FastPath::Bf16Attention, true);  // (CUDA's default under bf16; the CPU's opt-in)
  Backend& be = backend(dev);
  std::printf("bench_attention_tc: %s, causal, bf16 products; %d rounds of %d calls; ms per call, median (best); "
              "TFLOP/s from the median, FlashAttention's count\n",
              be.name().c_str(), repeats, calls);
  std::printf("%-12s %5s %4s %6s %4s | %16s %8s | %16s %8s\n", "shape", "B", "H", "T", "D", "forward ms", "TFLOP/s",
              "fwd+bwd ms", "TFLOP/s");
  std::vector<std::string> json;
  Rng rng(1);
  for (const Shape4& s : shapes) {
    auto randn = [&](const Shape& sh) {
      Tensor t = Tensor::empty(sh, DType::F32);
      rng.fill_normal(t, 0.0, 1.0);
      return t.to(dev);
    };
    const Shape sh{s.B, s.H, s.T, s.D};
    const Tensor q = randn(sh), k = randn(sh), v = randn(sh), dout = randn(sh);
    Tensor out = Tensor::empty(sh, DType::F32, dev), lse = Tensor::empty({s.B, s.H, s.T}, DType::F32, dev);
    Tensor dq = Tensor::empty(sh, DType::F32, dev), dk = Tensor::empty(sh, DType::F32, dev),
           dv = Tensor::empty(sh, DType::F32, dev), none, dummy = Tensor::empty(sh, DType::F32, dev),
           dummy_lse = Tensor::empty({s.B, s.H, s.T}, DType::F32, dev);
    AttnDims d;
    d.B = s.B, d.H = s.H, d.T = s.T, d.S = s.T, d.Dh = s.D;
    d.scale = 1.0 / std::sqrt((double)s.D);
    AttnRel rel;
    AttnRelGrad drel;
    // A forward with dout as its query makes and keeps dout's bf16 copy, as the forward keeps q, k
    // and v's: the backward then reads it, as a training step's reads merge_heads' (no conversion)
    be.attention_forward(d, dout, k, v, none, dummy, dummy_lse, rel);
    be.attention_forward(d, q, k, v, none, out, lse, rel);
    auto rounds = [&](auto f) {
      return [&be, calls, f] {
        for (int i = 0; i < calls; ++i) f();
        be.synchronize();
      };
    };
    const bench::Candidates cands = {
        {"forward", rounds([&] { be.attention_forward(d, q, k, v, none, out, lse, rel); })},
        {"forward+backward", rounds([&] {
           be.attention_forward(d, q, k, v, none, out, lse, rel);
           be.attention_backward(d, q, k, v, none, out, lse, dout, dq, dk, dv, none, rel, drel);
         })},
    };
    const bench::Times t = bench::time_rounds(cands, repeats);
    const double per = 1.0 / calls, f_ms = bench::median(t.at("forward")) * per,
                 fb_ms = bench::median(t.at("forward+backward")) * per;
    const double f_tf = forward_flop(s) / (f_ms * 1e-3) / 1e12, fb_tf = 3.5 * forward_flop(s) / (fb_ms * 1e-3) / 1e12;
    std::printf("%-12s %5lld %4lld %6lld %4lld | %7.3f (%7.3f) %8.1f | %7.3f (%7.3f) %8.1f\n", s.name.c_str(),
                (long long)s.B, (long long)s.H, (long long)s.T, (long long)s.D, f_ms,
                bench::best(t.at("forward")) * per, f_tf, fb_ms, bench::best(t.at("forward+backward")) * per, fb_tf);
    char line[512];
    std::snprintf(line, sizeof line,
                  "{\"impl\": \"ctxlab\", \"device\": \"%s\", \"B\": %lld, \"H\": %lld, \"T\": %lld, \"D\": %lld, "
                  "\"forward_ms\": %.4f, \"fwd_bwd_ms\": %.4f, \"forward_tflops\": %.2f, \"fwd_bwd_tflops\": %.2f}",
                  be.name().c_str(), (long long)s.B, (long long)s.H, (long long)s.T, (long long)s.D, f_ms, fb_ms, f_tf,
                  fb_tf);
    json.emplace_back(line);
  }
  for (const std::string& l : json) std::printf("%s\n", l.c_str());
  if (args.count("json")) {
    const std::string path = args["json"].as<std::string>();
    FILE* f = std::fopen(path.c_str(), "a");
    CTX_CHECK(f, "bench_attention_tc: --json ", path, ": cannot open for appending");
    for (const std::string& l : json) std::fprintf(f, "%s\n", l.c_str());
    CTX_CHECK(std::fclose(f) == 0, "bench_attention_tc: --json ", path, ": write failed");
  }
}
