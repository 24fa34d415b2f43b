// bench/gemv.cpp — the GEMV kernels of a decode step (core/cpu/gemv.h) alone: one step's Linear
// weights of a preset (every layer's qkv, proj, fc, mproj and the output head, packed one after
// the other in one buffer as the decoder's whole step packs them; L3-resident where they fit, as
// in `ctxlab bench --decode`), each streamed once against one row of x (or
// --rows), in GB/s of weights against the copy bandwidth over the same bytes (`bench --peak-only`'s
// STREAM copy, read + write counted). Two ways to split a matrix over the threads:
//   team  as the decoder's whole step (core/cpu/decode_step.cpp): one region for the whole step,
//         each thread its 16-row-aligned share of every matrix, a barrier after each matrix, the
//         weights in panels of four rows (gemv_rows_*)
//   fork  gemv_f32 / gemv_bf16 on the whole matrix (row-major), which forks its own region per call
// and the team's step without its barriers ("team, no barrier": what the barriers cost) and over
// the row-major matrices ("team, row-major": what the panels gain), and "pack": making the panels
// from the fp32 weights (what a decode step's first make costs; the model keeps them after). Each
// kernel's rounds run back to back, so its weights stay cached between steps as in a decode.
//   bench_gemv [--preset small|medium] [--rows 1] [--threads 2] [--repeats 200]
#include <cstdio>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "bench/timing.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/gemv.h"
#include "core/error.h"
#include "core/precision.h"  // cpu_has_avx512_bf16
#include "core/rng.h"
#include "core/team.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "nn/config.h"
#include "train/cli/bench_decode.h"  // copy_bandwidth_gbps, decode_weight_bytes

using namespace ctx;

namespace {

struct Mat {
  int64_t N, K;
  Tensor w, b;                // [N, K], [N]
  const uint16_t* w16 = nullptr;  // its bf16 copy
  const float* p32 = nullptr;     // in panels of four rows (gemv_pack_panels), fp32
  const uint16_t* p16 = nullptr;  // and bf16
};

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("bench_gemv", "a decode step's GEMVs: GB/s of weights against the copy bandwidth");
  opts.add_options()  // (each call adds one option)
      ("preset", "small | medium", cxxopts::value<std::string>()->default_value("small"))  //
      ("rows", "rows of x (decoded samples; 1..8)", cxxopts::value<int64_t>()->default_value("1"))  //
      ("threads", "threads", cxxopts::value<int>()->default_value("2"))  //
      ("repeats", "timed rounds (median)", cxxopts::value<int>()->default_value("200"))  //
      ("h,help", "this help");
  auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::puts(opts.help().c_str());
    return 0;
  }
  const ModelConfig cfg = preset_config(args["preset"].as<std::string>());
  const int64_t M = args["rows"].as<int64_t>();
  const int threads = args["threads"].as<int>(), repeats = args["repeats"].as<int>();
  CTX_CHECK(M >= 1 && M <= cpu::kGemvMaxRows, "bench_gemv: --rows must be 1..", cpu::kGemvMaxRows, ", got ", M);
  CTX_CHECK(threads >= 1 && repeats >= 1, "bench_gemv: --threads and --repeats must be >= 1");
  set_num_threads(threads);

  const int64_t D = cfg.d_model, F = cfg.ff_dim();
  // the matrices one after the other in one buffer (and its one bf16 copy), as the decoder's whole
  // step packs them (core/cpu/decode_step.cpp): one block of the pool, in huge pages
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t l = 0; l < cfg.n_layers; ++l) shapes.insert(shapes.end(), {{3 * D, D}, {D, D}, {F, D}, {D, F}});
  shapes.push_back({cfg.vocab_size, D});
  int64_t total = 0;
  for (const auto& [N, K] : shapes) total += (N * K + 15) / 16 * 16;
  Tensor pack = Tensor::empty({total}, DType::F32);
  Rng rng(1);
  rng.fill_normal(pack, 0.0, 0.02);
  std::vector<Mat> mats;
  int64_t at = 0;
  for (const auto& [N, K] : shapes) {
    mats.push_back({N, K, pack.slice0(at, at + N * K).view({N, K}), Tensor::zeros({N}, DType::F32)});
    at += (N * K + 15) / 16 * 16;
  }
  for (Mat& m : mats) m.w16 = cpu::bf16_copy(m.w);  // (views of one storage: one copy of the pack)
  // the decoder's own packs: each matrix in panels of four rows, fp32 and bf16, each one pool block
  int64_t panels32 = 0, panels16 = 0;
  for (const Mat& m : mats) {
    panels32 += (cpu::gemv_panel_elems(m.N, m.K, false) + 15) / 16 * 16;
    panels16 += (cpu::gemv_panel_elems(m.N, m.K, true) + 31) / 32 * 32;
  }
  Tensor pan32 = Tensor::empty({panels32}, DType::F32), pan16 = Tensor::empty({panels16 / 2}, DType::F32);
  {
    float* p32 = pan32.data<float>();
    uint16_t* p16 = reinterpret_cast<uint16_t*>(pan16.data<float>());
    for (Mat& m : mats) {
      cpu::gemv_pack_panels(m.w.data<float>(), p32, nullptr, m.N, m.K);
      m.p32 = p32;
      p32 += (cpu::gemv_panel_elems(m.N, m.K, false) + 15) / 16 * 16;
      if (cpu::gemv_available(true)) cpu::gemv_pack_panels(m.w.data<float>(), nullptr, p16, m.N, m.K);
      m.p16 = p16;
      p16 += (cpu::gemv_panel_elems(m.N, m.K, true) + 31) / 32 * 32;
    }
  }
  int64_t widest = 0;
  for (const Mat& m : mats) widest = std::max({widest, m.N, m.K});
  Tensor x = Tensor::empty({M, widest}, DType::F32), y = Tensor::empty({M, widest}, DType::F32);
  rng.fill_normal(x, 0.0, 1.0);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  // x rounded to bf16 for the panel kernels, once for each K (the decoder rounds each input once)
  std::vector<std::vector<uint16_t>> xb((size_t)widest + 1);
  for (const Mat& m : mats)
    if (xb[(size_t)m.K].empty()) {
      xb[(size_t)m.K].assign((size_t)(M * cpu::gemv_bf16_padded(m.K)), 0);
      std::vector<float> xk((size_t)(M * m.K));
      for (int64_t r = 0; r < M; ++r) std::copy(xp + r * widest, xp + r * widest + m.K, xk.begin() + r * m.K);
      if (cpu::gemv_available(true)) cpu::gemv_x_bf16(xk.data(), xb[(size_t)m.K].data(), m.K, M);
    }

  // one step: every matrix once; rows of y [M, N] written by rows [n0, n1) of W
  auto slice = [&](const Mat& m, int64_t n0, int64_t n1, bool bf16) {
    if (n1 <= n0) return;
    // each thread its rows: Y's rows are [M, N] with stride N, so a share writes to a scratch
    // row block of its own when M > 1 (the engine scatters; here only the stream is timed)
    const bool ok = bf16 ? cpu::gemv_bf16(m.w16 + n0 * m.K, xp, m.b.data<float>() + n0, yp + n0 * M, n1 - n0, m.K, M)
                         : cpu::gemv_f32(m.w.data<float>() + n0 * m.K, xp, m.b.data<float>() + n0, yp + n0 * M,
                                         n1 - n0, m.K, M);
    CTX_CHECK(ok, "bench_gemv: this CPU has no ", bf16 ? "avx512_bf16" : "AVX-512F", " GEMV kernel");
  };
  // the decoder's way: its panels, each thread its rows (gemv_rows_*)
  auto panel_slice = [&](const Mat& m, int64_t n0, int64_t n1, bool bf16) {
    if (n1 <= n0) return;
    if (bf16) cpu::gemv_rows_bf16(m.p16, xb[(size_t)m.K].data(), m.b.data<float>(), yp, m.N, n0, n1, m.K, M);
    else cpu::gemv_rows_f32(m.p32, xp, m.b.data<float>(), yp, m.N, n0, n1, m.K, M);
  };
  auto team = [&](bool bf16, bool barriers, bool panels = true) {
    return [&, bf16, barriers, panels] {
      run_team(threads, [&](const Team& tm) {
        for (const Mat& m : mats) {
          const auto [n0, n1] = tm.share(m.N, 16);
          if (panels) panel_slice(m, n0, n1, bf16);
          else slice(m, n0, n1, bf16);
          if (barriers) tm.barrier();
        }
      });
    };
  };
  auto fork = [&](bool bf16) {
    return [&, bf16] {
      for (const Mat& m : mats) slice(m, 0, m.N, bf16);
    };
  };
  // what making a decode step costs first (its pack; the model keeps it for the steps made after)
  auto pack_all = [&](bool bf16) {
    return [&, bf16] {
      for (const Mat& m : mats) {
        if (bf16) cpu::gemv_pack_panels(m.w.data<float>(), nullptr, const_cast<uint16_t*>(m.p16), m.N, m.K);
        else cpu::gemv_pack_panels(m.w.data<float>(), const_cast<float*>(m.p32), nullptr, m.N, m.K);
      }
    };
  };
  bench::Candidates c = {{"f32 pack", pack_all(false)}, {"f32 team", team(false, true)}, {"f32 team, no barrier", team(false, false)},
                         {"f32 team, row-major", team(false, true, false)}, {"f32 fork", fork(false)}};
  if (cpu_has_avx512_bf16())
    c.insert(c.end(), {{"bf16 pack", pack_all(true)}, {"bf16 team", team(true, true)}, {"bf16 team, no barrier", team(true, false)},
                       {"bf16 team, row-major", team(true, true, false)}, {"bf16 fork", fork(true)}});
  else
    std::printf("# this CPU has no avx512_bf16: fp32 kernels only\n");
  // Each candidate's rounds back to back (the weights of one precision stay in the caches between
  // its steps, as in a decode), the candidates in turn, twice (A B A B): the figure is the median
  // over both blocks.
  bench::Times t;
  for (int block = 0; block < 2; ++block)
    for (const auto& cand : c) {
      const bench::Times one = bench::time_rounds({cand}, repeats / 2);
      t[cand.first].insert(t[cand.first].end(), one.at(cand.first).begin(), one.at(cand.first).end());
    }

  const int64_t bytes32 = cli::decode_weight_bytes(cfg, 4), bytes16 = cli::decode_weight_bytes(cfg, 2);
  const double copy32 = cli::copy_bandwidth_gbps(bytes32, threads), copy16 = cli::copy_bandwidth_gbps(bytes16, threads);
  std::printf("# preset %s: %zu matrices, %lld row(s) of x, %d threads; weights %.1f MB (f32), %.1f MB (bf16);\n"
              "# copy bandwidth over the same bytes: %.1f GB/s (f32), %.1f GB/s (bf16)\n",
              args["preset"].as<std::string>().c_str(), mats.size(), (long long)M, threads, bytes32 / 1e6,
              bytes16 / 1e6, copy32, copy16);
  std::printf("%-24s %10s %10s %10s %12s\n", "kernel", "us/step", "best", "GB/s", "of the copy");
  for (const auto& [name, f] : c) {
    const bool bf16 = name.rfind("bf16", 0) == 0;
    const double ms = bench::median(t.at(name)), bytes = (double)(bf16 ? bytes16 : bytes32);
    const double gbps = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-24s %10.1f %10.1f %10.1f %11.0f%%\n", name.c_str(), ms * 1e3, bench::best(t.at(name)) * 1e3, gbps,
                100.0 * gbps / (bf16 ? copy16 : copy32));
  }
  return 0;
}
