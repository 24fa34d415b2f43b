// core/cpu/gemm_onednn.cpp — GEMM through the oneDNN matmul primitive (f32, row-major).
// Transposes and batch strides are memory-descriptor strides (no copies); a batch stride of 0
// is a broadcast batch dim of 1; alpha is the output scale, beta a sum post-op. One primitive
// per (shape, transposes, strides, alpha, beta, bias, input type, threads), created on first
// use, never again. gemm_onednn_bias adds a bias row to every row of C in the matmul itself
// (Linear).
// bf16 inputs (core/precision.h): A and B are rounded to bf16 (convert_f32_to_bf16, same layout
// and strides) into buffers owned by the calling thread, grown to the largest size seen (a warm
// step allocates nothing), and the primitive takes bf16 src / weights with an f32 dst: oneDNN's
// avx512_core_bf16 (VDPBF16PS) or AMX kernels, fp32 accumulation. Where oneDNN has no bf16 matmul
// at all (CPUs without AVX-512: it rejects the primitive), the same bf16 operands are widened
// back to fp32 (exact) and run through the fp32 primitive: a bf16 x bf16 product is exact in fp32,
// so this is the same arithmetic (bf16 inputs, fp32 accumulation), only slower. The CLI never
// takes it (apply_precision_request runs fp32 on such CPUs and says so); a library user's
// PrecisionScope(BF16) and the tests do, so bf16 semantics hold on every CPU.
// Under deterministic_algorithms() (core/determinism.h) every bf16 GEMM takes the widened
// operands through OpenBLAS's blocks fixed by the shape (gemm_openblas.cpp), as fp32 GEMMs do:
// the same arithmetic, the same bits for any thread count, at the fp32 rate.
#include <algorithm>
#include <chrono>
#include <vector>

#include "core/bf16.h"
#include "core/cpu/bf16_convert.h"
#include "core/cpu/gemm.h"
#include "core/cpu/onednn_util.h"
#include "core/cpu/parallel.h"
#include "core/determinism.h"
#include "core/error.h"

namespace ctx::cpu {

namespace {

using dnnl::memory;

// ok == false for batch > 1: not expressible as one primitive, run item by item.
onednn::PrimitiveCache<onednn::Prim>& cache() {
  static onednn::PrimitiveCache<onednn::Prim> c;
  return c;
}

// op(X): [rows, cols] (stored [cols, rows] when trans), batch stride `stride` (0 = broadcast).
memory::desc operand_desc(int64_t batch, int64_t rows, int64_t cols, bool trans, int64_t stride,
                          memory::data_type dt = memory::data_type::f32) {
  const memory::dims inner = trans ? memory::dims{1, rows} : memory::dims{cols, 1};
  if (batch == 1) return memory::desc({rows, cols}, dt, inner);
  const int64_t b = stride == 0 ? 1 : batch;
  const int64_t sb = stride == 0 ? rows * cols : stride;
  return memory::desc({b, rows, cols}, dt, {sb, inner[0], inner[1]});
}

onednn::Prim create(const GemmDesc& g, bool bias, bool bf16) {
  // A: op(A) [M, K]; B: op(B) [K, N]; C: [M, N]; each [batch, ...] when batched.
  const memory::data_type in = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  const memory::desc a = operand_desc(g.batch, g.M, g.K, g.trans_a, g.stride_a, in);
  const memory::desc b = operand_desc(g.batch, g.K, g.N, g.trans_b, g.stride_b, in);
  const memory::desc c = operand_desc(g.batch, g.M, g.N, false, g.stride_c);
  dnnl::primitive_attr attr = onednn::attr();
  if (g.alpha != 1.0) attr.set_output_scales(0, {(float)g.alpha});
  if (g.beta != 0.0) {
    dnnl::post_ops po;
    po.append_sum(g.beta);
    attr.set_post_ops(po);
  }
  onednn::Prim p;
  try {
    if (bias) {  // batch 1: bias [1, N] broadcast over the rows, added in the kernel's epilogue
      const memory::desc bd({1, g.N}, memory::data_type::f32, memory::format_tag::ab);
      p.prim = dnnl::matmul(dnnl::matmul::primitive_desc({a, b, bd, c}, attr, onednn::engine()));
      p.args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_BIAS, bd}, {DNNL_ARG_DST, c}};
    } else {
      p.prim = dnnl::matmul(dnnl::matmul::primitive_desc({a, b, c}, attr, onednn::engine()));
      p.args = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    }
    onednn::bind_scratchpad(p);
    p.ok = true;
  } catch (const dnnl::error& e) {
    // Both operands broadcast, or strides oneDNN does not take: one primitive per item.
    CTX_CHECK(g.batch > 1, "gemm_onednn: oneDNN matmul rejected M=", g.M, " N=", g.N, " K=", g.K,
              " trans_a=", g.trans_a, " trans_b=", g.trans_b, ": ", e.what());
  }
  return p;
}

// Elements of one operand with `rows x cols` items, `batch` of them `stride` apart (0: one).
int64_t operand_extent(const GemmDesc& g, int64_t rows, int64_t cols, int64_t stride) {
  return (g.batch > 1 ? (g.batch - 1) * stride : 0) + rows * cols;
}

// This thread's operand buffer `slot` (0: A, 1: B) of element type T, grown to n as needed (kept:
// a warm step allocates nothing).
template <class T>
T* thread_buffer(int slot, int64_t n) {
  thread_local std::vector<T> buf[2];
  if ((int64_t)buf[slot].size() < n) buf[slot].resize((size_t)n);
  return buf[slot].data();
}

// `x` (n floats) rounded to bf16 into this thread's buffer `slot`.
const uint16_t* to_bf16(int slot, const float* x, int64_t n) {
  uint16_t* out = thread_buffer<uint16_t>(slot, n);
  convert_f32_to_bf16(x, out, n);
  return out;
}

onednn::Key make_key(const GemmDesc& g, bool bias, bool bf16) {
  onednn::Key key;
  key.v = {g.M, g.N, g.K, g.batch, g.trans_a, g.trans_b, g.stride_a, g.stride_b, g.stride_c,
           onednn::float_bits((float)g.alpha), onednn::float_bits((float)g.beta), bias, bf16};
  return key;
}

// C = op(A) op(B) (+ bias) with A, B of element type In (float or uint16_t bf16 bits).
template <class In>
void run(const GemmDesc& g, const In* A, const In* B, const float* bias, float* C) {
  constexpr bool bf16 = sizeof(In) == 2;
  const onednn::Prim& p = cache().get(make_key(g, bias != nullptr, bf16), g.batch * g.M * g.N * g.K / 16,
                                      [&] { return create(g, bias != nullptr, bf16); });  // 16 lanes per FMA
  if (p.ok) {
    if (bias)
      onednn::execute(p, {A, B, bias, C});
    else
      onednn::execute(p, {A, B, C});
    return;
  }
  CTX_CHECK(!bias, "gemm_onednn_bias: oneDNN matmul rejected M=", g.M, " N=", g.N, " K=", g.K);
  GemmDesc one = g;
  one.batch = 1;
  for (int64_t b = 0; b < g.batch; ++b)
    run(one, A + b * g.stride_a, B + b * g.stride_b, nullptr, C + b * g.stride_c);
}

// bf16 bits `x` (n values) widened to fp32 (exact) into this thread's buffer `slot`.
const float* widened(int slot, const uint16_t* x, int64_t n) {
  float* out = thread_buffer<float>(slot, n);
  // the work: a widening, ~1/4 unit an element
  CTX_OMP_IF(parallel_pays(n / 4), "omp parallel for simd",
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(x[i]););
  return out;
}

// bf16: an operand given already converted (A16, B16: a kept bf16_copy) is not converted again.
void dispatch(const GemmDesc& g, const float* A, const float* B, const float* bias, float* C,
              bool bf16, const uint16_t* A16 = nullptr, const uint16_t* B16 = nullptr) {
  if (!bf16) return run<float>(g, A, B, bias, C);
  const int64_t na = operand_extent(g, g.M, g.K, g.stride_a), nb = operand_extent(g, g.K, g.N, g.stride_b);
  const uint16_t* a = A16 ? A16 : to_bf16(0, A, na);
  const uint16_t* b = B16 ? B16 : to_bf16(1, B, nb);
  // deterministic_algorithms(): oneDNN's bf16 and fp32 matmuls may change their bits with the
  // thread count, so the widened operands go through OpenBLAS's shape-fixed blocks instead
  const bool fixed_split = deterministic_algorithms() && openblas_available();
  if (onednn_bf16_matmul_available() && !fixed_split) return run<uint16_t>(g, a, b, bias, C);
  const float *wa = widened(0, a, na), *wb = widened(1, b, nb);
  // (the Linear takes its prefilled-bias path under the switch, core/cpu/linear.cpp: no bias here)
  if (fixed_split && !bias) return gemm_openblas(g, wa, wb, C);
  run<float>(g, wa, wb, bias, C);  // no bf16 matmul here: see the top
}

}  // namespace

void gemm_onednn(const GemmDesc& g, const float* A, const float* B, float* C) {
  if (!gemm_prologue("gemm_onednn", g, C)) return;
  dispatch(g, A, B, nullptr, C, false);
}

void gemm_onednn_bf16(const GemmDesc& g, const float* A, const float* B, float* C, const uint16_t* A16,
                      const uint16_t* B16) {
  if (!gemm_prologue("gemm_onednn_bf16", g, C)) return;
  dispatch(g, A, B, nullptr, C, true, A16, B16);
}

void gemm_onednn_bias(const GemmDesc& g, const float* A, const float* B, const float* bias,
                      float* C, bool bf16, const uint16_t* A16, const uint16_t* B16) {
  CTX_CHECK(g.batch == 1 && g.beta == 0.f, "gemm_onednn_bias: needs batch 1 and beta 0, got batch ",
            g.batch, " beta ", g.beta);
  if (!gemm_prologue("gemm_onednn_bias", g, C)) {  // K == 0: C = bias
    for (int64_t i = 0; i < g.M; ++i)
      for (int64_t j = 0; j < g.N; ++j) C[i * g.N + j] = bias[j];
    return;
  }
  dispatch(g, A, B, bias, C, bf16, A16, B16);
}

size_t onednn_gemm_cache_size() { return cache().size(); }

bool onednn_bf16_matmul_available() {
  static const bool ok = [] {
    GemmDesc g;
    g.M = g.N = g.K = 16;
    try {
      return create(g, false, true).ok;
    } catch (const Error&) {
      return false;
    }
  }();
  return ok;
}

double onednn_bf16_matmul_gflops(int64_t n, int repeats) {
  GemmDesc g;
  g.M = g.N = g.K = n;
  std::vector<uint16_t> a((size_t)(n * n), 0x3f80), b((size_t)(n * n), 0x3c00);  // 1.0, 2^-7
  std::vector<float> c((size_t)(n * n));
  run<uint16_t>(g, a.data(), b.data(), nullptr, c.data());  // creates the primitive, warms caches
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run<uint16_t>(g, a.data(), b.data(), nullptr, c.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * (double)n * (double)n * (double)n / std::max(s, 1e-9) / 1e9);
  }
  return best;
}

bool onednn_has_amx() {
  const int amx = (int)dnnl::cpu_isa::avx512_core_amx;  // ISA values are bit sets
  return ((int)dnnl::get_effective_cpu_isa() & amx) == amx;
}

}  // namespace ctx::cpu
