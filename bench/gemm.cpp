// bench/gemm.cpp — GFLOP/s of ctxlab's CPU GEMM path (Backend::gemm on Tensors, per
// implementation) against the raw library calls (oneDNN matmul primitive, dnnl_sgemm, OpenBLAS
// cblas_sgemm) on the model's shapes, at 1 and 2 threads. Prints a table and one JSON line per
// (shape, threads); "overhead" is ctxlab's time over the raw call of the same library.
//   bench_gemm [--repeats 30] [--threads 1,2] [--shape qkv] [--preset small|medium]
// On a CPU with avx512_bf16 two bf16 columns too: operands converted per call, and kept copies.
#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "bench/timing.h"
#include "core/backend.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/gemm.h"
#include "core/threads.h"
#include "core/precision.h"
#include "core/settings.h"
#include "nn/config.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace {

using bench::Candidates;
using ctx::GemmDesc;
using ctx::Tensor;
namespace cpu = ctx::cpu;

struct Shape {
  std::string name;
  std::string what;
  GemmDesc g;
  int per_step;  // how many times one training step of the default model runs it
};

GemmDesc desc(int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t batch = 1) {
  GemmDesc g;
  g.M = M, g.N = N, g.K = K, g.trans_a = ta, g.trans_b = tb, g.batch = batch;
  g.stride_a = M * K, g.stride_b = K * N, g.stride_c = M * N;
  return g;
}

// Every GEMM of one training step of a preset (`--preset`, default small: MODEL_SPEC's D 256, 6
// layers, 8 heads of 32, F 1024, V 256 tied, batch 8 x 256 tokens = 2048 rows; medium: D 512, 8
// layers, 8 heads of 64, F 2048, `ctxlab bench`'s batch 4 x 512 = 2048 rows). Linear weights are
// [out, in], so a forward is X W^T (NT), its input gradient dY W (NN), its weight gradient dY^T X
// (TN). Attention runs per (batch, head). The names say which Linear: `dxd` is [D, D] (the
// attention's output projection, and the LM head when V == D).
std::vector<Shape> model_shapes(const ctx::ModelConfig& c, int64_t batch) {
  const int64_t R = batch * c.context, D = c.d_model, F = c.ff_dim(), L = c.n_layers, Dh = D / c.n_heads;
  const int64_t BH = batch * c.n_heads, T = c.context;
  auto fmt = [](const char* f, auto... a) {
    char buf[160];
    std::snprintf(buf, sizeof buf, f, (long long)a...);
    return std::string(buf);
  };
  auto linear = [&](std::vector<Shape>& v, const std::string& name, int64_t out, int64_t in, int n) {
    v.push_back({name, fmt("X[%lld,%lld] W^T, W [%lld,%lld]", R, in, out, in), desc(R, out, in, false, true), n});
    v.push_back({name + "_dx", fmt("dY[%lld,%lld] W[%lld,%lld]", R, out, out, in), desc(R, in, out, false, false), n});
    v.push_back({name + "_dw", fmt("dY^T X: dY [%lld,%lld], X [%lld,%lld]", R, out, R, in),
                 desc(out, in, R, true, false), n});
    // the same weight gradient with dY^T already transposed ([out, R] row-major: NN), not a
    // GEMM of the step (per_step 0): what a transposed bf16 copy of dY would buy
    v.push_back({name + "_dwt", fmt("dYt X: dYt [%lld,%lld], X [%lld,%lld]", out, R, R, in),
                 desc(out, in, R, false, false), 0});
  };
  std::vector<Shape> v;
  linear(v, "qkv", 3 * D, D, (int)L);
  linear(v, "dxd", D, D, (int)L + (c.vocab_size == D ? 1 : 0));
  linear(v, "fc", F, D, (int)L);
  linear(v, "mproj", D, F, (int)L);
  v.push_back({"att_nt", fmt("%lld x Q[%lld,%lld] K^T; dO V^T", BH, T, Dh), desc(T, T, Dh, false, true, BH), 2 * (int)L});
  v.push_back({"att_nn", fmt("%lld x P[%lld,%lld] V[%lld,%lld]; dS K", BH, T, T, T, Dh), desc(T, Dh, T, false, false, BH), 2 * (int)L});
  v.push_back({"att_tn", fmt("%lld x P^T dO; dS^T Q", BH), desc(T, Dh, T, true, false, BH), 2 * (int)L});
  v.push_back({"call16", "16x16x16: the fixed cost of one call", desc(16, 16, 16, false, false), 0});
  return v;
}

// The raw oneDNN matmul: plain layouts by format tag, created once, memories created once.
struct RawMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  std::unordered_map<int, dnnl::memory> args;
  std::string impl;

  RawMatmul(const GemmDesc& g, float* A, float* B, float* C) {
    using tag = dnnl::memory::format_tag;
    const bool b3 = g.batch > 1;
    auto md = [&](int64_t r, int64_t c, bool trans) {
      const auto dt = dnnl::memory::data_type::f32;
      return b3 ? dnnl::memory::desc({g.batch, r, c}, dt, trans ? tag::acb : tag::abc)
                : dnnl::memory::desc({r, c}, dt, trans ? tag::ba : tag::ab);
    };
    const auto a = md(g.M, g.K, g.trans_a), b = md(g.K, g.N, g.trans_b), c = md(g.M, g.N, false);
    dnnl::matmul::primitive_desc pd({a, b, c}, eng);
    impl = pd.impl_info_str();
    prim = dnnl::matmul(pd);
    args = {{DNNL_ARG_SRC, {a, eng, A}},
            {DNNL_ARG_WEIGHTS, {b, eng, B}},
            {DNNL_ARG_DST, {c, eng, C}}};
  }
  void operator()() {
    prim.execute(strm, args);
    strm.wait();
  }
};

struct Row {
  const Shape* shape;
  int threads;
  bench::Times times;  // ms per round, by candidate

  double gflops(const std::string& col, bool best) const {
    auto it = times.find(col);
    if (it == times.end()) return 0.0;
    const double ms = best ? bench::best(it->second) : bench::median(it->second);
    return 2.0 * shape->g.batch * shape->g.M * shape->g.N * shape->g.K / (ms * 1e-3) / 1e9;
  }
  // ctxlab's overhead over the raw call of the same library, in % and in us per call, best round
  // against best round (on a shared machine interference only adds time).
  double ovh_pct(const char* ours, const char* raw) const {
    return bench::best_slower_pct(times, ours, raw);
  }
  double ovh_us(const char* ours, const char* raw) const {
    auto o = times.find(ours), w = times.find(raw);
    if (o == times.end() || w == times.end()) return 0.0;
    return 1e3 * (bench::best(o->second) - bench::best(w->second));
  }
};

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("bench_gemm", "ctxlab CPU GEMM vs raw oneDNN / OpenBLAS");
  opts.add_options()  // (each call adds one option)
      ("repeats", "timed rounds (median)", cxxopts::value<int>()->default_value("30"))  //
      ("threads", "thread counts", cxxopts::value<std::vector<int>>()->default_value("1,2"))  //
      ("shape", "only this shape", cxxopts::value<std::string>()->default_value(""))  //
      ("preset", "the model whose GEMMs to time: small | medium", cxxopts::value<std::string>()->default_value("small"))  //
      ("h,help", "help");
  const auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  const int repeats = args["repeats"].as<int>();
  const std::string only = args["shape"].as<std::string>();

  const std::string preset = args["preset"].as<std::string>();
  const std::vector<Shape> kShapes = model_shapes(ctx::preset_config(preset), preset == "medium" ? 4 : 8);
  ctx::init_threading();
  ctx::Backend& be = ctx::backend(ctx::Device::CPU);
  const bool have_blas = cpu::openblas_available();
  const cpu::OpenBlasApi& blas = cpu::openblas_api();
  std::printf("# openblas: %s\n", cpu::openblas_config().c_str());
  std::printf("# CTXLAB_GEMM=%s; OMP_WAIT_POLICY=%s\n",
              [] { const char* v = ctx::setting_env("CTXLAB_GEMM"); return v ? v : "(unset: built-in per-shape choice)"; }(),
              bench::env_or("OMP_WAIT_POLICY", "(unset)"));

  // bf16 columns on a CPU with avx512_bf16 (--precision bf16's GEMMs): ctx_bf16 converts both
  // operands per call (an operand met once), bf16_kept reads both from kept copies (a weight, or
  // an activation the Linear converted once: core/cpu/bf16_convert.h), the GEMM alone
  const bool bf16 = ctx::cpu_has_avx512_bf16();
  std::vector<std::string> cols = {"ctx_onednn", "dnnl_matmul", "dnnl_sgemm", "ctx_openblas", "cblas_sgemm"};
  if (bf16) cols.insert(cols.end(), {"ctx_bf16", "bf16_kept"});
  std::vector<Row> rows;
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  auto random_tensor = [&](int64_t n) {
    std::vector<float> v((size_t)n);
    for (float& x : v) x = u(rng);
    return Tensor::from_vector(v, {n});
  };

  for (const Shape& s : kShapes) {
    if (!only.empty() && only != s.name) continue;
    const GemmDesc& g = s.g;
    Tensor A = random_tensor(g.batch * g.M * g.K), B = random_tensor(g.batch * g.K * g.N);
    Tensor C = Tensor::zeros({g.batch * g.M * g.N});
    float *a = A.data<float>(), *b = B.data<float>(), *c = C.data<float>();
    const char ta = g.trans_a ? 'T' : 'N', tb = g.trans_b ? 'T' : 'N';
    const int64_t lda = g.trans_a ? g.M : g.K, ldb = g.trans_b ? g.K : g.N;

    const auto cblas = [&] {
      for (int64_t i = 0; i < g.batch; ++i)
        blas.sgemm(101, g.trans_a ? 112 : 111, g.trans_b ? 112 : 111, (int)g.M, (int)g.N,
                   (int)g.K, 1.f, a + i * g.stride_a, (int)lda, b + i * g.stride_b, (int)ldb, 0.f,
                   c + i * g.stride_c, (int)g.N);
    };
    const auto ctx_with = [&](cpu::GemmImpl impl) {
      return [&, impl] {
        cpu::set_gemm_impl(impl);
        be.gemm(g, A, B, C);
      };
    };

    for (int t : args["threads"].as<std::vector<int>>()) {
      ctx::set_num_threads(t);
      RawMatmul raw(g, a, b, c);  // created under t threads, like ctxlab's cached primitives
      Candidates omp_pool = {  // everything that runs on the OpenMP pool, interleaved
          {"ctx_onednn", ctx_with(cpu::GemmImpl::OneDNN)},
          {"dnnl_matmul", [&] { raw(); }},
          {"dnnl_sgemm", [&] {
             for (int64_t i = 0; i < g.batch; ++i)
               dnnl_sgemm(ta, tb, g.M, g.N, g.K, 1.f, a + i * g.stride_a, lda,
                          b + i * g.stride_b, ldb, 0.f, c + i * g.stride_c, g.N);
           }}};
      if (have_blas) omp_pool.push_back({"ctx_openblas", ctx_with(cpu::GemmImpl::OpenBLAS)});
      Tensor A16, B16;  // operands with kept bf16 copies
      if (bf16) {
        A16 = A.clone(), B16 = B.clone();
        cpu::bf16_copy(A16), cpu::bf16_copy(B16);
        omp_pool.push_back({"ctx_bf16", [&] {
                              ctx::PrecisionScope p(ctx::Precision::BF16);
                              be.gemm(g, A, B, C);
                            }});
        omp_pool.push_back({"bf16_kept", [&] {
                              ctx::PrecisionScope p(ctx::Precision::BF16);
                              be.gemm(g, A16, B16, C);
                            }});
      }
      // One-threaded OpenBLAS joins the interleaved rounds; with its own pool (t > 1) it runs
      // alone afterwards, so that its spinning threads never meet OpenMP's.
      if (have_blas && t == 1) omp_pool.push_back({"cblas_sgemm", cblas});
      auto times = bench::time_rounds(omp_pool, repeats);
      if (have_blas && t > 1) {
        blas.set_num_threads(t);
        times["cblas_sgemm"] =
            bench::time_rounds({{"cblas_sgemm", cblas}}, repeats)["cblas_sgemm"];
        blas.set_num_threads(1);
      }

      if (t == args["threads"].as<std::vector<int>>().front())
        std::printf("# %-8s %s; oneDNN matmul impl: %s\n", s.name.c_str(), s.what.c_str(), raw.impl.c_str());
      rows.push_back({&s, t, std::move(times)});
    }
  }

  for (bool best : {false, true}) {
    std::printf("\n%s GFLOP/s of %d rounds%s\n%-9s %3s", best ? "best" : "median", repeats,
                best ? "; overhead = ctxlab vs the same library's raw call, best vs best" : "",
                "shape", "thr");
    for (const auto& col : cols) std::printf(" %12s", col.c_str());
    if (best) std::printf(" %9s %6s %9s %6s", "ovh_dnnl%", "us", "ovh_blas%", "us");
    std::printf("\n");
    for (const Row& r : rows) {
      std::printf("%-9s %3d", r.shape->name.c_str(), r.threads);
      for (const auto& col : cols) std::printf(" %12.1f", r.gflops(col, best));
      if (best)
        std::printf(" %9.1f %6.1f %9.1f %6.1f", r.ovh_pct("ctx_onednn", "dnnl_matmul"),
                    r.ovh_us("ctx_onednn", "dnnl_matmul"), r.ovh_pct("ctx_openblas", "cblas_sgemm"),
                    r.ovh_us("ctx_openblas", "cblas_sgemm"));
      std::printf("\n");
    }
  }
  std::printf("(at >1 thread cblas_sgemm runs on OpenBLAS's own pool, timed alone; ctx_openblas "
              "splits the GEMM over OpenMP threads with one-threaded OpenBLAS calls)\n\n");

  // What the choice of implementation means for a whole training step.
  cpu::reset_gemm_impl();  // the built-in (or CTXLAB_GEMM) choice again
  for (int t : args["threads"].as<std::vector<int>>()) {
    // [onednn, openblas, the built-in per-shape choice, the faster of the two][median, best]
    double ms[4][2] = {};
    bool complete = true;
    for (const Row& r : rows) {
      if (r.threads != t || r.shape->per_step == 0) continue;
      if (!r.times.count("ctx_openblas")) complete = false;
      for (int k = 0; k < 2; ++k) {
        auto pick = [&](const char* col) {
          auto it = r.times.find(col);
          return it == r.times.end() ? 0.0
                                     : (k ? bench::best(it->second) : bench::median(it->second));
        };
        const double d = pick("ctx_onednn"), o = pick("ctx_openblas");
        const bool builtin_blas = cpu::current_gemm_impl(r.shape->g) == cpu::GemmImpl::OpenBLAS;
        ms[0][k] += r.shape->per_step * d;
        ms[1][k] += r.shape->per_step * o;
        ms[2][k] += r.shape->per_step * (builtin_blas ? o : d);
        ms[3][k] += r.shape->per_step * (o > 0 ? std::min(d, o) : d);
      }
    }
    if (!only.empty() || !complete) continue;  // a partial list says nothing about a step
    std::printf("one training step's GEMMs, %d thread(s), ms (median | best): onednn %.0f | %.0f, "
                "openblas %.0f | %.0f, built-in per-shape choice %.0f | %.0f, faster of the two "
                "per shape %.0f | %.0f\n",
                t, ms[0][0], ms[0][1], ms[1][0], ms[1][1], ms[2][0], ms[2][1], ms[3][0], ms[3][1]);
  }
  std::printf("\n");
  for (const Row& r : rows) {
    std::ostringstream js;
    js << "{\"bench\":\"gemm\",\"shape\":\"" << r.shape->name << "\",\"threads\":" << r.threads
       << ",\"repeats\":" << repeats;
    for (const auto& [col, v] : r.times)
      js << ",\"" << col << "_median_ms\":" << bench::median(v) << ",\"" << col
         << "_best_ms\":" << bench::best(v) << ",\"" << col
         << "_gflops\":" << r.gflops(col, false);
    js << ",\"overhead_onednn_pct\":" << r.ovh_pct("ctx_onednn", "dnnl_matmul")
       << ",\"overhead_onednn_us\":" << r.ovh_us("ctx_onednn", "dnnl_matmul")
       << ",\"overhead_openblas_pct\":" << r.ovh_pct("ctx_openblas", "cblas_sgemm")
       << ",\"overhead_openblas_us\":" << r.ovh_us("ctx_openblas", "cblas_sgemm") << "}";
    std::printf("%s\n", js.str().c_str());
  }
  return 0;
}
