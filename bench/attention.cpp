// bench/attention.cpp — the fused causal attention op (autograd/ops_attention.h) against the
// unfused composition (matmul, scale, + bias, causal_mask, softmax, matmul: what nn/attention.cpp
// runs without it): forward + backward and forward alone, ms per call, on the presets' attention
// shapes, without a bias, with a constant ALiBi bias [1, H, T, S] and with a trainable one (its
// gradient summed over the batch, as KERPLE / T5). Prints a table, then one JSON line per row.
// The fused op also runs with its bf16 tile products (--precision bf16, CTXLAB_BF16_ATTENTION=1;
// fp32 on a CPU without avx512_bf16), interleaved with the others: the bf16 columns.
//   bench_attention [--repeats 20] [--threads 2] [--shape small|medium]
#include <cmath>
#include <functional>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "autograd/ops.h"
#include "autograd/ops_attention.h"
#include "bench/timing.h"
#include "core/cpu/flash_attention.h"
#include "core/fast_paths.h"
#include "core/threads.h"
#include "core/precision.h"
#include "core/rng.h"

namespace {

using namespace ctx;

struct AttnShape {
  const char* name;
  int64_t B, H, T, Dh;
};
const std::vector<AttnShape> kShapes = {
    {"small", 8, 8, 256, 32},   // preset small: d 256, 8 heads, context 256, batch 8
    {"medium", 4, 8, 512, 64},  // preset medium: d 512, 8 heads, context 512, batch 4
};

enum class BiasMode { None, Alibi, Trainable };
const char* bias_name(BiasMode b) {
  return b == BiasMode::None ? "none" : b == BiasMode::Alibi ? "alibi" : "trainable";
}

// ALiBi-like [1, H, T, S]: -m_h * (i - j), m_h = 2^(-8 (h+1) / H)
Tensor alibi_bias(int64_t H, int64_t T) {
  Tensor b = Tensor::empty({1, H, T, T}, DType::F32);
  float* p = b.data<float>();
  for (int64_t h = 0; h < H; ++h) {
    const float m = std::pow(2.0f, -8.0f * (float)(h + 1) / (float)H);
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) p[(h * T + i) * T + j] = -m * (float)std::max<int64_t>(i - j, 0);
  }
  return b;
}

struct Row {
  std::string shape, bias;
  int threads;
  double fused_fb, unfused_fb, fused_f, unfused_f;  // median ms
  double bf16_fb, bf16_f;                            // the fused op under --precision bf16
  double fused_fb_best, unfused_fb_best;
};

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("bench_attention", "fused vs unfused causal attention, forward + backward");
  opts.add_options()  // (each call adds one option)
      ("repeats", "timed rounds (median)", cxxopts::value<int>()->default_value("20"))  //
      ("threads", "thread counts", cxxopts::value<std::vector<int>>()->default_value("2"))  //
      ("shape", "only this shape (small | medium)", cxxopts::value<std::string>()->default_value(""))  //
      ("h,help", "this help");
  auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  const int repeats = args["repeats"].as<int>();
  const std::string only = args["shape"].as<std::string>();
  std::printf("# OMP_WAIT_POLICY=%s; ms per call, median of %d rounds (best in brackets)\n",
              bench::env_or("OMP_WAIT_POLICY", "(unset)"), repeats);
  std::vector<Row> rows;
  for (int threads : args["threads"].as<std::vector<int>>()) {
    ctx::set_num_threads(threads);
    for (const AttnShape& s : kShapes) {
      if (!only.empty() && only != s.name) continue;
      Rng rng(1);
      auto randn = [&](const Shape& sh) {
        Tensor t = Tensor::empty(sh, DType::F32);
        rng.fill_normal(t, 0.0, 1.0);
        return t;
      };
      const Shape qs = {s.B, s.H, s.T, s.Dh};
      Variable q(randn(qs), true), k(randn(qs), true), v(randn(qs), true);
      const Tensor g = randn(qs);
      const double scale = 1.0 / std::sqrt((double)s.Dh);
      for (BiasMode bm : {BiasMode::None, BiasMode::Alibi, BiasMode::Trainable}) {
        Variable bias;
        if (bm != BiasMode::None) bias = Variable(alibi_bias(s.H, s.T), bm == BiasMode::Trainable);
        auto fb = [&](bool fused) {
          return [&, fused] {
            Variable o = fused ? fused_causal_attention(q, k, v, bias, scale)
                               : causal_attention_composed(q, k, v, bias, scale);
            o.backward(g);
            for (Variable* x : {&q, &k, &v, &bias})
              if (x->defined()) x->zero_grad();
          };
        };
        auto fwd = [&](bool fused) {
          return [&, fused] {
            NoGradGuard ng;
            Variable o = fused ? fused_causal_attention(q, k, v, bias, scale)
                               : causal_attention_composed(q, k, v, bias, scale);
          };
        };
        auto bf16 = [](std::function<void()> f) {
          return [f] {
            PrecisionScope p(Precision::BF16);
            set_fast_path(FastPath::Bf16Attention, true);  // the opt-in bf16 products (CTXLAB_BF16_ATTENTION=1)
            f();
            reset_fast_path(FastPath::Bf16Attention);
          };
        };
        bench::Times t = bench::time_rounds({{"fused_fb", fb(true)},
                                             {"unfused_fb", fb(false)},
                                             {"fused_f", fwd(true)},
                                             {"unfused_f", fwd(false)},
                                             {"bf16_fb", bf16(fb(true))},
                                             {"bf16_f", bf16(fwd(true))}},
                                            repeats);
        rows.push_back({s.name, bias_name(bm), threads, bench::median(t["fused_fb"]),
                        bench::median(t["unfused_fb"]), bench::median(t["fused_f"]),
                        bench::median(t["unfused_f"]), bench::median(t["bf16_fb"]), bench::median(t["bf16_f"]),
                        bench::best(t["fused_fb"]), bench::best(t["unfused_fb"])});
      }
    }
  }
  std::printf("\n%-7s %-9s %3s %20s %20s %7s %10s %10s %7s %10s %9s\n", "shape", "bias", "thr", "fused fwd+bwd",
              "unfused fwd+bwd", "ratio", "fused fwd", "unf. fwd", "ratio", "bf16 f+b", "bf16 fwd");
  for (const Row& r : rows)
    std::printf("%-7s %-9s %3d %9.2f (%8.2f) %9.2f (%8.2f) %6.2fx %10.2f %10.2f %6.2fx %10.2f %9.2f\n",
                r.shape.c_str(), r.bias.c_str(), r.threads, r.fused_fb, r.fused_fb_best, r.unfused_fb,
                r.unfused_fb_best, r.unfused_fb / r.fused_fb, r.fused_f, r.unfused_f, r.unfused_f / r.fused_f,
                r.bf16_fb, r.bf16_f);
  std::printf("(ratio = unfused / fused: > 1 means the fused op is faster; bf16: the fused op under "
              "--precision bf16%s)\n\n", cpu_has_avx512_bf16() ? "" : ", fp32 on this CPU (no avx512_bf16)");
  for (const Row& r : rows) {
    std::ostringstream js;
    js << "{\"bench\":\"attention\",\"shape\":\"" << r.shape << "\",\"bias\":\"" << r.bias
       << "\",\"threads\":" << r.threads << ",\"fused_fwd_bwd_ms\":" << r.fused_fb
       << ",\"unfused_fwd_bwd_ms\":" << r.unfused_fb << ",\"fused_fwd_ms\":" << r.fused_f
       << ",\"unfused_fwd_ms\":" << r.unfused_f << ",\"bf16_fused_fwd_bwd_ms\":" << r.bf16_fb
       << ",\"bf16_fused_fwd_ms\":" << r.bf16_f << "}";
    std::printf("%s\n", js.str().c_str());
  }
  return 0;
}
