// bench/onednn_ops.cpp — the oneDNN fast paths (core/cpu/onednn_ops.h) against plain OpenMP
// loops written here and against the reference kernels (core/cpu/ref_kernels.h), on the
// model's shapes, at 1 and 2 threads. Decides onednn_op_enabled's policy (docs/threading.md).
//   bench_onednn_ops [--repeats 30] [--threads 1,2]
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "bench/timing.h"
#include "core/cpu/onednn_ops.h"
#include "core/cpu/ref_kernels.h"
#include "core/threads.h"
#include "core/error.h"

namespace {

// ---- plain loops with OpenMP over rows and SIMD reductions: [N, C] rows, or n elements ----
void loop_softmax(const float* x, float* y, int64_t N, int64_t C, bool log) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    float* yr = y + n * C;
    float mx = -INFINITY, s = 0.f;
#pragma omp simd reduction(max : mx)
    for (int64_t c = 0; c < C; ++c) mx = std::max(mx, xr[c]);
    for (int64_t c = 0; c < C; ++c) {
      yr[c] = std::exp(xr[c] - mx);
      s += yr[c];
    }
    if (log) {
      const float ls = mx + std::log(s);
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] = xr[c] - ls;
    } else {
      const float inv = 1.f / s;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
    }
  }
}

void loop_softmax_backward(const float* y, const float* dy, float* dx, int64_t N, int64_t C,
                           bool log) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *yr = y + n * C, *gr = dy + n * C;
    float* dr = dx + n * C;
    float s = 0.f;
    if (log) {
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += gr[c];
      for (int64_t c = 0; c < C; ++c) dr[c] = gr[c] - std::exp(yr[c]) * s;
    } else {
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += gr[c] * yr[c];
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) dr[c] = yr[c] * (gr[c] - s);
    }
  }
}

void loop_layernorm(const float* x, const float* w, const float* b, float eps, float* y,
                    float* mean, float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* xr = x + n * C;
    float* yr = y + n * C;
    float m = 0.f, v = 0.f;
#pragma omp simd reduction(+ : m)
    for (int64_t c = 0; c < C; ++c) m += xr[c];
    m /= (float)C;
#pragma omp simd reduction(+ : v)
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    const float r = 1.f / std::sqrt(v / (float)C + eps);
#pragma omp simd
    for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * r * w[c] + b[c];
    mean[n] = m, rstd[n] = r;
  }
}

void loop_layernorm_backward(const float* dy, const float* x, const float* w, const float* mean,
                             const float* rstd, float* dx, float* dw, float* db, int64_t N,
                             int64_t C) {
#pragma omp parallel
  {
    std::vector<float> ldw((size_t)C, 0.f), ldb((size_t)C, 0.f);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float *g = dy + n * C, *xr = x + n * C;
      float* d = dx + n * C;
      const float m = mean[n], r = rstd[n];
      float sg = 0.f, sgx = 0.f;
#pragma omp simd reduction(+ : sg, sgx)
      for (int64_t c = 0; c < C; ++c) {
        const float xh = (xr[c] - m) * r, gw = g[c] * w[c];
        sg += gw, sgx += gw * xh;
        ldw[c] += g[c] * xh, ldb[c] += g[c];
      }
      sg /= (float)C, sgx /= (float)C;
#pragma omp simd
      for (int64_t c = 0; c < C; ++c) d[c] = r * (g[c] * w[c] - sg - (xr[c] - m) * r * sgx);
    }
#pragma omp critical
    for (int64_t c = 0; c < C; ++c) dw[c] += ldw[c], db[c] += ldb[c];
  }
}

constexpr float kGeluK = 0.7978845608028654f, kGeluA = 0.044715f;  // sqrt(2/pi), cubic term

void loop_gelu(const float* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i)
    y[i] = 0.5f * x[i] * (1.f + std::tanh(kGeluK * (x[i] + kGeluA * x[i] * x[i] * x[i])));
}

void loop_gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float t = std::tanh(kGeluK * (x[i] + kGeluA * x[i] * x[i] * x[i]));
    dx[i] = dy[i] * (0.5f * (1.f + t) +
                     0.5f * x[i] * (1.f - t * t) * kGeluK * (1.f + 3.f * kGeluA * x[i] * x[i]));
  }
}

struct Buffers {
  int64_t N, C;
  std::vector<float> x, y, dy, dx, w, b, mean, rstd, dw, db;
  Buffers(int64_t N_, int64_t C_) : N(N_), C(C_) {
    std::mt19937 rng(0);
    std::normal_distribution<float> d;
    auto fill = [&](std::vector<float>& v, int64_t n) {
      v.resize((size_t)n);
      for (float& e : v) e = d(rng);
    };
    fill(x, N * C), fill(y, N * C), fill(dy, N * C), fill(dx, N * C), fill(w, C), fill(b, C);
    fill(dw, C), fill(db, C), fill(mean, N), rstd.assign((size_t)N, 1.f);
  }
};

// One benchmarked op: its name (as onednn_op_enabled knows it), shape, and three candidates:
// "onednn" (returns false where it declines the case), "ref" and "loops".
struct OpCase {
  std::string op, shape;
  std::function<bool()> onednn;
  std::function<void()> ref, loops;
};

std::vector<OpCase> make_cases(Buffers& att, Buffers& lm, Buffers& ln, Buffers& mlp) {
  namespace cpu = ctx::cpu;
  namespace ref = ctx::cpu::ref;
  std::vector<OpCase> cases;
  // Attention probabilities: softmax over keys; the LM head: log-softmax over the vocabulary.
  for (Buffers* B : {&att, &lm}) {
    const bool log = B == &lm;
    const std::string op = log ? "log_softmax" : "softmax";
    const std::string shape = log ? "[2048, 256] (LM head)" : "[16384, 256] (attention)";
    float *x = B->x.data(), *y = B->y.data(), *dy = B->dy.data(), *dx = B->dx.data();
    const int64_t N = B->N, C = B->C;
    cases.push_back({op, shape, [=] { return cpu::onednn_softmax_f32(x, y, N, C, log); },
                     [=] { ref::softmax<float>(x, y, N, C, log); },
                     [=] { loop_softmax(x, y, N, C, log); }});
    cases.push_back(
        {op + "_backward", shape,
         [=] { return cpu::onednn_softmax_backward_f32(y, dy, dx, N, C, log); },
         [=] { ref::softmax_backward<float>(y, dy, dx, N, C, log); },
         [=] { loop_softmax_backward(y, dy, dx, N, C, log); }});
  }
  {
    float *x = ln.x.data(), *y = ln.y.data(), *dy = ln.dy.data(), *dx = ln.dx.data();
    float *w = ln.w.data(), *b = ln.b.data(), *dw = ln.dw.data(), *db = ln.db.data();
    float *mean = ln.mean.data(), *rstd = ln.rstd.data();
    const int64_t N = ln.N, C = ln.C;
    const float eps = 1e-5f;
    cases.push_back(
        {"layernorm", "[2048, 256]",
         [=] { return cpu::onednn_layernorm_f32(x, w, b, eps, y, mean, rstd, N, C); },
         [=] { ref::layernorm<float>(x, w, b, eps, y, mean, rstd, N, C); },
         [=] { loop_layernorm(x, w, b, eps, y, mean, rstd, N, C); }});
    cases.push_back(
        {"layernorm_backward", "[2048, 256]",
         [=] { return cpu::onednn_layernorm_backward_f32(dy, x, w, mean, rstd, dx, dw, db, N, C); },
         [=] { ref::layernorm_backward<float>(dy, x, w, mean, rstd, dx, dw, db, N, C); },
         [=] { loop_layernorm_backward(dy, x, w, mean, rstd, dx, dw, db, N, C); }});
  }
  {
    float *x = mlp.x.data(), *y = mlp.y.data(), *dy = mlp.dy.data(), *dx = mlp.dx.data();
    const int64_t n = mlp.N * mlp.C;
    const auto gelu = ctx::UnaryOp::GeluTanh;
    cases.push_back({"gelu_tanh", "[2048, 1024]",
                     [=] { return cpu::onednn_gelu_tanh_f32(x, y, n); },
                     [=] { ref::unary<float>(gelu, x, y, n, 0.f, 0.f); },
                     [=] { loop_gelu(x, y, n); }});
    cases.push_back({"gelu_tanh_backward", "[2048, 1024]",
                     [=] { return cpu::onednn_gelu_tanh_backward_f32(x, dy, dx, n); },
                     [=] { ref::unary_backward<float>(gelu, x, y, dy, dx, n, 0.f, 0.f); },
                     [=] { loop_gelu_backward(x, dy, dx, n); }});
  }
  return cases;
}

}  // namespace

int main(int argc, char** argv) {
  cxxopts::Options opts("bench_onednn_ops", "oneDNN softmax / layer norm / GELU vs plain loops");
  opts.add_options()  // (each call adds one option)
      ("repeats", "timed rounds (median)", cxxopts::value<int>()->default_value("30"))  //
      ("threads", "thread counts", cxxopts::value<std::vector<int>>()->default_value("1,2"))  //
      ("h,help", "help");
  const auto args = opts.parse(argc, argv);
  if (args.count("help")) {
    std::printf("%s\n", opts.help().c_str());
    return 0;
  }
  const int repeats = args["repeats"].as<int>();
  ctx::init_threading();
  std::printf("# OMP_WAIT_POLICY=%s\n", bench::env_or("OMP_WAIT_POLICY", "(unset)"));

  Buffers att(64 * 256, 256), lm(2048, 256), ln(2048, 256), mlp(2048, 1024);
  const std::vector<OpCase> cases = make_cases(att, lm, ln, mlp);

  std::printf("%-21s %-26s %3s %10s %10s %10s %9s %9s\n", "op", "shape", "thr", "onednn_us",
              "ref_us", "loops_us", "vs_ref", "vs_loops");
  std::vector<std::string> json;
  for (int t : args["threads"].as<std::vector<int>>()) {
    ctx::set_num_threads(t);
    for (const OpCase& c : cases) {
      const bool taken = c.onednn();  // also creates the primitive
      bench::Candidates cands = {{"ref", c.ref}, {"loops", c.loops}};
      if (taken) cands.push_back({"onednn", [&c] { c.onednn(); }});
      const bench::Times times = bench::time_rounds(cands, repeats);
      const double rf = bench::median(times.at("ref")), lp = bench::median(times.at("loops"));
      if (!taken) {
        std::printf("%-21s %-26s %3d %10s %10.1f %10.1f %9s %9s\n", c.op.c_str(),
                    c.shape.c_str(), t, "declined", rf * 1e3, lp * 1e3, "-", "-");
        json.push_back(ctx::str("{\"bench\":\"onednn_ops\",\"op\":\"", c.op,
                                "\",\"threads\":", t, ",\"onednn\":\"declined\",\"ref_us\":",
                                rf * 1e3, ",\"loops_us\":", lp * 1e3, "}"));
        continue;
      }
      const double on = bench::median(times.at("onednn"));
      // speed-up of oneDNN: median over rounds of (other time / oneDNN time)
      const double vs_ref = 1 + bench::slower_pct(times, "ref", "onednn") / 100;
      const double vs_loops = 1 + bench::slower_pct(times, "loops", "onednn") / 100;
      std::printf("%-21s %-26s %3d %10.1f %10.1f %10.1f %8.2fx %8.2fx\n", c.op.c_str(),
                  c.shape.c_str(), t, on * 1e3, rf * 1e3, lp * 1e3, vs_ref, vs_loops);
      json.push_back(ctx::str("{\"bench\":\"onednn_ops\",\"op\":\"", c.op, "\",\"threads\":", t,
                              ",\"onednn_us\":", on * 1e3, ",\"ref_us\":", rf * 1e3,
                              ",\"loops_us\":", lp * 1e3, ",\"speedup_vs_ref\":", vs_ref,
                              ",\"speedup_vs_loops\":", vs_loops,
                              ",\"onednn_enabled\":", ctx::cpu::onednn_op_enabled(c.op.c_str()),
                              "}"));
    }
  }
  std::printf("(median of %d interleaved rounds; vs_* = how many times faster oneDNN is)\n\n",
              repeats);
  for (const std::string& j : json) std::printf("%s\n", j.c_str());
  return 0;
}
