// tests/test_util.h — helpers shared by the test files.
#pragma once
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <random>
#include <string>

#include <set>
#include <vector>

#include "autograd/variable.h"
#include "core/rng.h"
#include "core/error.h"
#include "core/precision.h"
#include "train/io/config.h"

namespace ctx::testing_util {

// ---- the required-dependency policy (docs/testing.md) ----
// Everything scripts/setup.sh installs (OpenBLAS, torch, gnuplot) and every kernel this CPU can
// run (the AVX2 GELU, oneDNN's AVX-512 kernels) is REQUIRED: a test that needs one and does not
// find it fails. Only where CTXLAB_ALLOW_MISSING (comma-separated names, never set in CI) lists
// the dependency does it skip instead, printing why. GPU tests skip without it: no test machine
// has a GPU.

// A bf16 test on a CPU without avx512_bf16 (or under CTXLAB_NO_AVX512_BF16=1) checks what such a
// CPU can: that `--precision bf16` is refused with the CLI's one-line note and the GEMMs stay
// fp32 (apply_precision_request); it does not return green unchecked. True where the CPU has
// avx512_bf16: the caller runs its bf16 checks; false after the refusal was checked.
inline bool cpu_runs_bf16_else_check_refusal() {
  if (cpu_has_avx512_bf16()) return true;
  const Precision saved = gemm_precision();
  const bool saved_tf32 = gemm_allow_tf32();
  EXPECT_EQ(apply_precision_request(Precision::BF16, false, Device::CPU),
            "--precision bf16: this CPU has no avx512_bf16; running fp32 instead");
  EXPECT_EQ(gemm_precision(), Precision::FP32) << "--precision bf16 engaged on a CPU without avx512_bf16";
  set_gemm_precision(saved);
  set_gemm_allow_tf32(saved_tf32);
  std::printf("this CPU has no avx512_bf16: checked that --precision bf16 is refused (fp32 kept)\n");
  return false;
}

// Whether CTXLAB_ALLOW_MISSING lists `dep` (or is "all").
inline bool missing_allowed(const std::string& dep) {
  const char* e = std::getenv("CTXLAB_ALLOW_MISSING");
  if (!e) return false;
  const std::string list = std::string(",") + e + ",";
  return list.find("," + dep + ",") != std::string::npos || list.find(",all,") != std::string::npos;
}

}  // namespace ctx::testing_util

// The one skip the suite allows (docs/testing.md): the device probe, cuda::device_count(),
// found no GPU. .ci/check_skips.py accepts exactly this reason and fails every other skip.
#define CTX_NO_GPU_REASON "skipped: no GPU (cuda::device_count() is 0)"
#define CTX_SKIP_WITHOUT_GPU(has_gpu)              \
  do {                                             \
    if (!(has_gpu)) GTEST_SKIP() << CTX_NO_GPU_REASON; \
  } while (0)

// In a test body or SetUp: when `available` is false, FAIL naming the dependency and `why`, or
// skip (printing the reason) where CTXLAB_ALLOW_MISSING lists `dep`.
#define CTX_REQUIRE_DEP(dep, available, why)                                                      \
  do {                                                                                            \
    if (!(available)) {                                                                           \
      if (::ctx::testing_util::missing_allowed(dep))                                              \
        GTEST_SKIP() << "dependency '" << (dep) << "' missing, allowed by CTXLAB_ALLOW_MISSING: " \
                     << why;                                                                      \
      FAIL() << "required dependency '" << (dep) << "' missing: " << why                          \
             << " (scripts/setup.sh installs it; set CTXLAB_ALLOW_MISSING=" << (dep)             \
             << " only on a machine that cannot have it)";                                        \
    }                                                                                             \
  } while (0)

namespace ctx::testing_util {

// A two-head model config in one line: the tests' models differ only in these fields
// (d_ff -1: 4 * d_model).
inline ModelConfig two_head_cfg(int64_t vocab, int64_t d_model, int64_t n_layers, int64_t d_ff,
                                int64_t context, const nlohmann::json& posenc) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.d_model = d_model;
  c.n_layers = n_layers;
  c.n_heads = 2;
  c.d_ff = d_ff;
  c.context = context;
  c.posenc = posenc;
  return c;
}

// A two-layer, two-head, d = 16 model config (vocab 17, context 24) with the given encoding.
inline ModelConfig tiny_cfg(const nlohmann::json& posenc) {
  return two_head_cfg(17, 16, 2, 32, 24, posenc);
}

// Every parameter of `model` (an nn::Module) except the norms' drawn N(0, std^2) from one seed:
// larger-than-default weights, so that a model's outputs depend strongly on positions and context.
template <class Model>
void randomize_weights(Model& model, uint64_t seed, double std) {
  Rng rng(seed);
  for (auto& named : model.named_parameters())
    if (named.first.find("norm") == std::string::npos) rng.fill_normal(named.second.data(), 0.0, std);
}

// Normal values N(0, std^2) in f64 from one seed.
inline Tensor randn(const Shape& s, uint64_t seed, double std = 0.5) {
  Tensor t = Tensor::empty(s, DType::F64);
  Rng rng(seed);
  rng.fill_normal(t, 0.0, std);
  return t;
}

// Uniform values in [lo, hi), drawn in f64 and converted to dt (so f32 and f64 runs of one seed
// see the same numbers up to rounding).
inline Tensor uniform_tensor(Rng& r, const Shape& s, DType dt, double lo = -1.0, double hi = 1.0) {
  Tensor t = Tensor::empty(s, DType::F64);
  r.fill_uniform(t, lo, hi);
  return dt == DType::F64 ? t : t.to(dt);
}

// Calls of libgomp's GOMP_parallel (every `#pragma omp parallel` region entered, forking or not)
// so far in this process: tests/test_parallel.cpp wraps the function.
int64_t gomp_parallel_calls();

// n floats uniform in [-1, 1) from std::mt19937(seed): the GEMM / GEMV / bf16 tests' operands.
inline std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> v((size_t)n);
  for (float& x : v) x = u(rng);
  return v;
}

// max |a - b| / max |b|: the error relative to the size of the reference tensor b.
inline double rel_err(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(shape_str(a.shape()), shape_str(b.shape()));
  double num = 0, den = 0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    num = std::max(num, std::fabs(a.at(i) - b.at(i)));
    den = std::max(den, std::fabs(b.at(i)));
  }
  return den > 0 ? num / den : num;
}

// The same dtype, shape and bits (host tensors).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Does the autograd graph of v contain an op named `name` (which fast path ran)?
inline bool graph_has_op(const Variable& v, const std::string& name) {
  std::set<const VarImpl*> seen;
  std::vector<const VarImpl*> todo = {v.impl().get()};
  while (!todo.empty()) {
    const VarImpl* x = todo.back();
    todo.pop_back();
    if (!x || !seen.insert(x).second || !x->node) continue;
    if (x->node->name == name) return true;
    for (const auto& in : x->node->inputs) todo.push_back(in.get());
  }
  return false;
}

// A fresh directory for the current test, under gtest's TempDir, with a trailing '/'.
inline std::string test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string d = ::testing::TempDir();
  if (!d.empty() && d.back() != '/') d += '/';
  d += std::string("ctxlab_io_") + std::to_string(::getpid()) + "_" + info->test_suite_name() +
       "_" + info->name();
  ::mkdir(d.c_str(), 0755);
  return d + "/";
}

// Writes `bytes` to `path` (binary, replacing it); the test fails when it cannot.
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), (std::streamsize)bytes.size());
  ASSERT_TRUE(f.good()) << path;
}

// Runs fn, which must throw ctx::Error whose one-line message contains every needle.
inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << "message is not one line: " << m;
    for (const auto& n : needles) EXPECT_NE(m.find(n), std::string::npos) << "'" << n << "' not in: " << m;
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ctx::Error, got another exception: " << e.what();
    return;
  }
  ADD_FAILURE() << "expected ctx::Error, nothing was thrown";
}

}  // namespace ctx::testing_util
