// core/cpu/gemm_onednn.cpp — GEMM through the oneDNN matmul primitive (f32, row-major).
// Transposes and batch strides are memory-descriptor strides (no copies); a batch stride of 0
// is a broadcast batch dim of 1; alpha is the output scale, beta a sum post-op. One primitive
// per (shape, transposes, strides, alpha, beta, threads), created on first use, never again.
#include "core/cpu/gemm.h"
#include "core/cpu/onednn_util.h"
#include "core/error.h"

namespace ctx::cpu {

namespace {

using dnnl::memory;
using tag = memory::format_tag;

struct MatmulPrim {
  bool loop = false;  // batch not expressible as one primitive: run it item by item
  dnnl::matmul prim;
  memory::desc a, b, c;  // A, B, C as stored (strided views)
};

onednn::PrimitiveCache<MatmulPrim>& cache() {
  static onednn::PrimitiveCache<MatmulPrim> c;
  return c;
}

// op(A): [M, K] (stored [K, M] when trans_a); batch stride sa, 0 = broadcast.
// Same helper for B ([K, N], stored [N, K] when trans_b).
memory::desc operand_desc(int64_t batch, int64_t rows, int64_t cols, bool trans, int64_t stride) {
  const memory::dims inner = trans ? memory::dims{1, rows} : memory::dims{cols, 1};
  if (batch == 1) return memory::desc({rows, cols}, memory::data_type::f32, inner);
  const int64_t b = stride == 0 ? 1 : batch;
  const int64_t sb = stride == 0 ? rows * cols : stride;
  return memory::desc({b, rows, cols}, memory::data_type::f32, {sb, inner[0], inner[1]});
}

MatmulPrim create(const GemmDesc& g) {
  MatmulPrim p;
  p.a = operand_desc(g.batch, g.M, g.K, g.trans_a, g.stride_a);
  p.b = operand_desc(g.batch, g.K, g.N, g.trans_b, g.stride_b);
  p.c = g.batch == 1 ? memory::desc({g.M, g.N}, memory::data_type::f32, {g.N, 1})
                     : memory::desc({g.batch, g.M, g.N}, memory::data_type::f32,
                                    {g.stride_c, g.N, 1});
  dnnl::primitive_attr attr;
  if (g.alpha != 1.f) attr.set_output_scales(0, {g.alpha});
  if (g.beta != 0.f) {
    dnnl::post_ops po;
    po.append_sum(g.beta);
    attr.set_post_ops(po);
  }
  try {
    dnnl::matmul::desc d(p.a, p.b, p.c);
    dnnl::matmul::primitive_desc pd(d, attr, onednn::engine());
    p.prim = dnnl::matmul(pd);
  } catch (const dnnl::error& e) {
    // Both operands broadcast, or strides oneDNN does not take: one primitive per item.
    CTX_CHECK(g.batch > 1, "gemm_onednn: oneDNN matmul rejected M=", g.M, " N=", g.N, " K=", g.K,
              " trans_a=", g.trans_a, " trans_b=", g.trans_b, ": ", e.what());
    p.loop = true;
  }
  return p;
}

}  // namespace

void gemm_onednn(const GemmDesc& g, const float* A, const float* B, float* C) {
  if (!gemm_prologue("gemm_onednn", g, C)) return;

  onednn::Key key;
  key.v = {g.M, g.N, g.K, g.batch, g.trans_a, g.trans_b, g.stride_a, g.stride_b, g.stride_c,
           onednn::float_bits(g.alpha), onednn::float_bits(g.beta)};
  const MatmulPrim& p = cache().get(key, [&] { return create(g); });

  if (p.loop) {
    GemmDesc one = g;
    one.batch = 1;
    for (int64_t b = 0; b < g.batch; ++b)
      gemm_onednn(one, A + b * g.stride_a, B + b * g.stride_b, C + b * g.stride_c);
    return;
  }
  dnnl::engine& eng = onednn::engine();
  memory a(p.a, eng, const_cast<float*>(A)), b(p.b, eng, const_cast<float*>(B)), c(p.c, eng, C);
  p.prim.execute(onednn::stream(), {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  onednn::stream().wait();
}

size_t onednn_gemm_cache_size() { return cache().size(); }

}  // namespace ctx::cpu
