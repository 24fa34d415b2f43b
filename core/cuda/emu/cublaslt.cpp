// core/cuda/emu/cublaslt.cpp — the cuBLASLt stand-in: matmul descriptors, matrix layouts,
// preferences, a one-answer heuristic, and cublasLtMatmul with its epilogues:
//   D = epilogue(alpha op(A) op(B) + beta C), column-major, fp32, batched through the layouts.
//   A and B may be CUDA_R_16BF (with fp32 C and D, CUBLAS_COMPUTE_32F): widened to fp32 (exact)
//   and multiplied with the same fp32 accumulation (a bf16 x bf16 product is exact in fp32).
//   BIAS adds bias[i] (length m = rows of D) before the activation; GELU (tanh form) activates;
//   GELU_AUX stores the pre-activation in aux (ld = EPILOGUE_AUX_LD); DGELU multiplies by
//   gelu'(aux); DGELU_BGRAD also writes bias[i] = sum_j D(i, j); BGRADA writes
//   bias[i] = sum_p op(A)(i, p) (length m); BGRADB writes bias[j] = sum_p op(B)(p, j) (length n).
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "core/cuda/emu/cublas_emu.h"
#include "core/cuda/emu/emu_bf16.h"
#include "core/cuda/emu/emu_internal.h"
#include "core/cuda/emu/gemm.h"

struct cublasLtContext {
  int unused = 0;
};

using namespace cuemu::detail;

namespace {

struct Desc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  long long bias_batch_stride = 0;
  void* aux = nullptr;
  long long aux_ld = 0;
  long long aux_batch_stride = 0;
  cudaDataType_t bias_type = CUDA_R_32F;
};
struct Layout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int order = CUBLASLT_ORDER_COL;
  int batch = 1;
  long long stride = 0;
};
struct Pref {
  uint64_t max_workspace = 0;
  uint32_t min_align[4] = {256, 256, 256, 256};  // A, B, C, D (bytes; cuBLASLt's default 256)
};
// The algorithm the heuristic answers: a marker and the alignments it was chosen for (algo.data).
constexpr uint64_t kAlgoMarker = 0x63746c6167656d6dull;

std::mutex g_mu;
std::set<const void*> g_live;  // every live handle / descriptor / layout / preference
template <class T>
T* make_obj() {
  T* p = new T();
  std::lock_guard<std::mutex> lk(g_mu);
  g_live.insert(p);
  return p;
}
bool live(const void* p) {
  std::lock_guard<std::mutex> lk(g_mu);
  return p && g_live.count(p);
}
template <class T>
bool destroy_obj(T* p) {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    if (!p || !g_live.erase(p)) return false;
  }
  delete p;
  return true;
}
Desc* D_(cublasLtMatmulDesc_t d) { return reinterpret_cast<Desc*>(d); }
Layout* L_(cublasLtMatrixLayout_t l) { return reinterpret_cast<Layout*>(l); }
Pref* P_(cublasLtMatmulPreference_t p) { return reinterpret_cast<Pref*>(p); }

template <class T>
bool read_attr(T* out, const void* buf, size_t size) {
  if (!buf || size != sizeof(T)) return false;
  std::memcpy(out, buf, sizeof(T));
  return true;
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
float gelu(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}
float gelu_grad(float x) {
  const float u = kGeluScale * (x + 0.044715f * x * x * x);
  const float t = tanhf(u);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

bool has(cublasLtEpilogue_t e, int bit) { return ((int)e & bit) != 0; }
bool known_epilogue(cublasLtEpilogue_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_RELU:
    case CUBLASLT_EPILOGUE_BIAS:
    case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX:
    case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB:
      return true;
  }
  return false;
}

// Shape/type validation shared by the heuristic and the matmul. m, n, k out.
cublasStatus_t validate(const Desc& d, const Layout& a, const Layout& b, const Layout& c, const Layout& dl, long long* m,
                        long long* n, long long* k, std::string* why) {
  const bool cd32 = c.type == CUDA_R_32F && dl.type == CUDA_R_32F;
  const bool f32 = cd32 && a.type == CUDA_R_32F && b.type == CUDA_R_32F;
  const bool bf16 = cd32 && a.type == CUDA_R_16BF && b.type == CUDA_R_16BF;
  const bool ct32 = d.compute == CUBLAS_COMPUTE_32F || d.compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  const bool ct_ok = f32 ? ct32 || d.compute == CUBLAS_COMPUTE_32F_FAST_TF32 : bf16 && ct32;
  if (!(f32 || bf16) || !ct_ok || d.scale != CUDA_R_32F) {
    *why = "only CUDA_R_32F matrices with CUBLAS_COMPUTE_32F[_PEDANTIC|_FAST_TF32], or CUDA_R_16BF A and B with "
           "CUDA_R_32F C and D and CUBLAS_COMPUTE_32F[_PEDANTIC], and CUDA_R_32F scale are emulated";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (a.order != CUBLASLT_ORDER_COL || b.order != CUBLASLT_ORDER_COL || c.order != CUBLASLT_ORDER_COL ||
      dl.order != CUBLASLT_ORDER_COL) {
    *why = "only CUBLASLT_ORDER_COL layouts are emulated";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (!known_epilogue(d.epilogue)) {
    *why = "epilogue " + std::to_string((int)d.epilogue) + " is not emulated";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  *m = (long long)dl.rows;
  *n = (long long)dl.cols;
  const bool ta = d.transa != CUBLAS_OP_N, tb = d.transb != CUBLAS_OP_N;
  *k = (long long)(ta ? a.rows : a.cols);
  const long long am = (long long)(ta ? a.cols : a.rows);
  const long long bk = (long long)(tb ? b.cols : b.rows), bn = (long long)(tb ? b.rows : b.cols);
  if (am != *m || bk != *k || bn != *n || (long long)c.rows != *m || (long long)c.cols != *n) {
    *why = "shapes disagree: op(A) is " + std::to_string(am) + "x" + std::to_string(*k) + ", op(B) " +
           std::to_string(bk) + "x" + std::to_string(bn) + ", C " + std::to_string(c.rows) + "x" +
           std::to_string(c.cols) + ", D " + std::to_string(*m) + "x" + std::to_string(*n);
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const Layout* ls[4] = {&a, &b, &c, &dl};
  const char* names[4] = {"A", "B", "C", "D"};
  for (int i = 0; i < 4; ++i) {
    if (ls[i]->ld < (int64_t)std::max<uint64_t>(1, ls[i]->rows)) {
      *why = std::string("ld of ") + names[i] + " = " + std::to_string(ls[i]->ld) + " < max(1, rows = " +
             std::to_string(ls[i]->rows) + ")";
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (ls[i]->batch != dl.batch) {
      *why = std::string("batch count of ") + names[i] + " (" + std::to_string(ls[i]->batch) +
             ") differs from D's (" + std::to_string(dl.batch) + ")";
      return CUBLAS_STATUS_INVALID_VALUE;
    }
  }
  const bool needs_bias = has(d.epilogue, CUBLASLT_EPILOGUE_BIAS) || d.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD ||
                          d.epilogue == CUBLASLT_EPILOGUE_BGRADA || d.epilogue == CUBLASLT_EPILOGUE_BGRADB;
  if (needs_bias && d.bias_type != CUDA_R_32F) {
    *why = "bias data type must be CUDA_R_32F";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  const bool needs_aux = has(d.epilogue, 128);
  if (needs_aux && d.aux_ld < std::max<long long>(1, *m)) {
    *why = "CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = " + std::to_string(d.aux_ld) + " < max(1, m = " +
           std::to_string(*m) + ")";
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  return CUBLAS_STATUS_SUCCESS;
}

// What an epilogue does (CUBLASLT_EPILOGUE_* bits).
struct Epilogue {
  bool add_bias, gelu_fwd, relu, store_aux, dgelu, bgrad_d, bgrad_a, bgrad_b, uses_bias, uses_aux;
  explicit Epilogue(cublasLtEpilogue_t ep)
      : add_bias(has(ep, CUBLASLT_EPILOGUE_BIAS) && ep != CUBLASLT_EPILOGUE_DGELU_BGRAD),
        gelu_fwd(has(ep, CUBLASLT_EPILOGUE_GELU)),
        relu(has(ep, CUBLASLT_EPILOGUE_RELU)),
        store_aux(gelu_fwd && has(ep, 128)),
        dgelu(has(ep, 64)),
        bgrad_d(ep == CUBLASLT_EPILOGUE_DGELU_BGRAD),
        bgrad_a(ep == CUBLASLT_EPILOGUE_BGRADA),
        bgrad_b(ep == CUBLASLT_EPILOGUE_BGRADB),
        uses_bias(add_bias || bgrad_d || bgrad_a || bgrad_b),
        uses_aux(store_aux || dgelu) {}
};

// One cublasLtMatmul after its argument checks: the descriptor and layouts by value (destroying
// them afterwards changes nothing), alpha and beta as values, the operand pointers.
struct MatmulJob {
  Desc d;
  Layout la, lb, lc, ld;
  long long m, n, k;
  float alpha, beta;
  const void *A, *B, *C;
  void* D;
};

// Checks every batch entry's operands; with compute, runs them with the epilogue and files the
// counters' record.
cublasStatus_t run_matmul(const MatmulJob& job, bool compute) {
  const char* fn = "cublasLtMatmul";
  const Desc& d = job.d;
  const Layout &la = job.la, &lb = job.lb, &lc = job.lc, &ld = job.ld;
  const long long m = job.m, n = job.n, k = job.k;
  const void *A = job.A, *B = job.B, *C = job.C;
  void* D = job.D;
  const Epilogue e(d.epilogue);
  const bool add_bias = e.add_bias, gelu_fwd = e.gelu_fwd, relu = e.relu, store_aux = e.store_aux, dgelu = e.dgelu;
  const bool bgrad_d = e.bgrad_d, bgrad_a = e.bgrad_a, bgrad_b = e.bgrad_b;
  const bool uses_bias = e.uses_bias, uses_aux = e.uses_aux;
  std::string why;
  GemmCall<float> g;
  g.transa = d.transa != CUBLAS_OP_N;
  g.transb = d.transb != CUBLAS_OP_N;
  g.m = (int)m;
  g.n = (int)n;
  g.k = (int)k;
  g.alpha = job.alpha;
  g.beta = job.beta;
  g.lda = la.ld;
  g.ldb = lb.ld;
  g.ldc = lc.ld;
  g.ldd = ld.ld;
  g.tf32 = !tf32_override_off() && d.compute == CUBLAS_COMPUTE_32F_FAST_TF32;
  const bool reads_ab = g.alpha != 0.0f && k > 0;
  const size_t ext_a = matrix_extent((long long)la.rows, (long long)la.cols, la.ld);
  const size_t ext_b = matrix_extent((long long)lb.rows, (long long)lb.cols, lb.ld);
  const size_t ext_c = matrix_extent(m, n, lc.ld), ext_d = matrix_extent(m, n, ld.ld);
  const size_t ext_aux = matrix_extent(m, n, d.aux_ld);
  const size_t bias_len = (size_t)(bgrad_b ? n : m);
  const bool bf16_in = la.type == CUDA_R_16BF;  // (validate: then B is too)
  const size_t in_bytes = bf16_in ? 2 : 4;
  std::vector<float> wide_a, wide_b;  // bf16 inputs widened to fp32 (exact)
  auto widen = [](const void* p, size_t n, std::vector<float>& out) {
    const __nv_bfloat16* h = static_cast<const __nv_bfloat16*>(p);
    out.resize(n);
    for (size_t i = 0; i < n; ++i) out[i] = __bfloat162float(h[i]);
    return out.data();
  };
  for (int bt = 0; bt < ld.batch; ++bt) {
    const void* a_in = static_cast<const char*>(A) + bt * la.stride * (long long)in_bytes;
    const void* b_in = static_cast<const char*>(B) + bt * lb.stride * (long long)in_bytes;
    g.A = static_cast<const float*>(a_in);
    g.B = static_cast<const float*>(b_in);
    g.C = static_cast<const float*>(C) + bt * lc.stride;
    g.D = static_cast<float*>(D) + bt * ld.stride;
    float* bias = uses_bias ? const_cast<float*>(static_cast<const float*>(d.bias)) + bt * d.bias_batch_stride : nullptr;
    float* aux = uses_aux ? static_cast<float*>(d.aux) + bt * d.aux_batch_stride : nullptr;
    const bool ok =
        (!(reads_ab || bgrad_a) || check_device_operand(fn, "A", a_in, ext_a, in_bytes, &why)) &&
        (!(reads_ab || bgrad_b) || check_device_operand(fn, "B", b_in, ext_b, in_bytes, &why)) &&
        (g.beta == 0.0f || check_device_operand(fn, "C", g.C, ext_c, 4, &why)) &&
        check_device_operand(fn, "D", g.D, ext_d, 4, &why) &&
        (!uses_bias || check_device_operand(fn, "bias", bias, bias_len, 4, &why)) &&
        (!uses_aux || check_device_operand(fn, "aux", aux, ext_aux, 4, &why));
    if (!ok)
      return blas_fail(CUBLAS_STATUS_EXECUTION_FAILED,
                       why + (ld.batch > 1 ? " (batch entry " + std::to_string(bt) + ")" : std::string()));
    if (!compute) continue;
    if (bf16_in && (reads_ab || bgrad_a)) g.A = widen(a_in, ext_a, wide_a);
    if (bf16_in && (reads_ab || bgrad_b)) g.B = widen(b_in, ext_b, wide_b);
    // Bias gradients of the inputs are read before D is written (D may alias nothing, but be safe).
    if (bgrad_a) {
      for (long long i = 0; i < m; ++i) {
        float s = 0.0f;
        for (long long p = 0; p < k; ++p) s += g.transa ? g.A[p + i * la.ld] : g.A[i + p * la.ld];
        bias[i] = s;
      }
    }
    if (bgrad_b) {
      for (long long j = 0; j < n; ++j) {
        float s = 0.0f;
        for (long long p = 0; p < k; ++p) s += g.transb ? g.B[j + p * lb.ld] : g.B[p + j * lb.ld];
        bias[j] = s;
      }
    }
    gemm_one(g);  // D = alpha op(A) op(B) + beta C
    for (long long j = 0; j < n; ++j) {
      float* dcol = g.D + j * ld.ld;
      for (long long i = 0; i < m; ++i) {
        float x = dcol[i];
        if (add_bias) x += bias[i];
        if (store_aux) aux[i + j * d.aux_ld] = x;
        if (gelu_fwd) x = gelu(x);
        if (relu) x = x > 0.0f ? x : 0.0f;
        if (dgelu) x *= gelu_grad(aux[i + j * d.aux_ld]);
        dcol[i] = x;
      }
    }
    if (bgrad_d) {
      for (long long i = 0; i < m; ++i) {
        float s = 0.0f;
        for (long long j = 0; j < n; ++j) s += g.D[i + j * ld.ld];
        bias[i] = s;
      }
    }
  }
  if (!compute) return CUBLAS_STATUS_SUCCESS;
  const uint64_t in = (reads_ab || bgrad_a ? ext_a * in_bytes : 0) + (reads_ab || bgrad_b ? ext_b * in_bytes : 0) +
                      (g.beta != 0.0f ? ext_c * 4 : 0) + (add_bias ? bias_len * 4 : 0) + (dgelu ? ext_aux * 4 : 0);
  const uint64_t out = ext_d * 4 + (store_aux ? ext_aux * 4 : 0) + (bgrad_a || bgrad_b || bgrad_d ? bias_len * 4 : 0);
  record_gemm({fn, m, n, k, ld.batch, !bf16_in && !g.tf32, bf16_in ? cuemu::MmaType::BF16 : cuemu::MmaType::TF32,
               in * (uint64_t)ld.batch, out * (uint64_t)ld.batch});
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (!handle) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: null handle pointer");
  *handle = make_obj<cublasLtContext>();
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  return destroy_obj(handle) ? CUBLAS_STATUS_SUCCESS
                             : blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: not a live handle");
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (!desc) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: null pointer");
  Desc* d = make_obj<Desc>();
  d->compute = computeType;
  d->scale = scaleType;
  *desc = reinterpret_cast<cublasLtMatmulDesc_t>(d);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroy_obj(D_(desc)) ? CUBLAS_STATUS_SUCCESS
                               : blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescDestroy: not a live descriptor");
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t size) {
  if (!live(D_(desc))) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: not a live descriptor");
  Desc& d = *D_(desc);
  bool ok = false;
  int32_t i32;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: ok = read_attr(&i32, buf, size); if (ok) d.compute = (cublasComputeType_t)i32; break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: ok = read_attr(&i32, buf, size); if (ok) d.scale = (cudaDataType_t)i32; break;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: ok = read_attr(&i32, buf, size); break;
    case CUBLASLT_MATMUL_DESC_TRANSA: ok = read_attr(&i32, buf, size); if (ok) d.transa = (cublasOperation_t)i32; break;
    case CUBLASLT_MATMUL_DESC_TRANSB: ok = read_attr(&i32, buf, size); if (ok) d.transb = (cublasOperation_t)i32; break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
      uint32_t e;
      ok = read_attr(&e, buf, size);
      if (ok) d.epilogue = (cublasLtEpilogue_t)e;
      break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: ok = read_attr(&d.bias, buf, size); break;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: {
      int64_t v;
      ok = read_attr(&v, buf, size);
      if (ok) d.bias_batch_stride = v;
      break;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: ok = read_attr(&d.aux, buf, size); break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: {
      int64_t v;
      ok = read_attr(&v, buf, size);
      if (ok) d.aux_ld = v;
      break;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: {
      int64_t v;
      ok = read_attr(&v, buf, size);
      if (ok) d.aux_batch_stride = v;
      break;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: ok = read_attr(&i32, buf, size); if (ok) d.bias_type = (cudaDataType_t)i32; break;
    default:
      return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescSetAttribute: attribute " +
                                                        std::to_string((int)attr) + " is not emulated");
  }
  if (!ok)
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescSetAttribute: attribute " +
                                                      std::to_string((int)attr) + " given " + std::to_string(size) +
                                                      " bytes (wrong size or null buffer)");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, void* buf,
                                              size_t size, size_t* written) {
  if (!live(D_(desc))) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescGetAttribute: not a live descriptor");
  const Desc& d = *D_(desc);
  auto put = [&](const auto& v) {
    if (written) *written = sizeof(v);
    if (!buf || size < sizeof(v)) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescGetAttribute: buffer too small");
    std::memcpy(buf, &v, sizeof(v));
    return CUBLAS_STATUS_SUCCESS;
  };
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return put((int32_t)d.compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return put((int32_t)d.scale);
    case CUBLASLT_MATMUL_DESC_TRANSA: return put((int32_t)d.transa);
    case CUBLASLT_MATMUL_DESC_TRANSB: return put((int32_t)d.transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return put((uint32_t)d.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return put(d.bias);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return put((const void*)d.aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return put((int64_t)d.aux_ld);
    default:
      return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulDescGetAttribute: attribute " +
                                                        std::to_string((int)attr) + " is not emulated");
  }
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (!layout) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: null pointer");
  Layout* l = make_obj<Layout>();
  l->type = type;
  l->rows = rows;
  l->cols = cols;
  l->ld = ld;
  *layout = reinterpret_cast<cublasLtMatrixLayout_t>(l);
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroy_obj(L_(layout)) ? CUBLAS_STATUS_SUCCESS
                                 : blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutDestroy: not a live layout");
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t size) {
  if (!live(L_(layout))) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: not a live layout");
  Layout& l = *L_(layout);
  bool ok = false;
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: { uint32_t v; ok = read_attr(&v, buf, size); if (ok) l.type = (cudaDataType_t)v; break; }
    case CUBLASLT_MATRIX_LAYOUT_ORDER: { int32_t v; ok = read_attr(&v, buf, size); if (ok) l.order = v; break; }
    case CUBLASLT_MATRIX_LAYOUT_ROWS: ok = read_attr(&l.rows, buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_COLS: ok = read_attr(&l.cols, buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_LD: ok = read_attr(&l.ld, buf, size); break;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: { int32_t v; ok = read_attr(&v, buf, size) && v >= 1; if (ok) l.batch = v; break; }
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: { int64_t v; ok = read_attr(&v, buf, size); if (ok) l.stride = v; break; }
    default:
      return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatrixLayoutSetAttribute: attribute " +
                                                        std::to_string((int)attr) + " is not emulated");
  }
  if (!ok)
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutSetAttribute: attribute " +
                                                      std::to_string((int)attr) + ": wrong size, null buffer or bad value");
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (!pref) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: null pointer");
  *pref = reinterpret_cast<cublasLtMatmulPreference_t>(make_obj<Pref>());
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return destroy_obj(P_(pref)) ? CUBLAS_STATUS_SUCCESS
                               : blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceDestroy: not a live preference");
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t size) {
  if (!live(P_(pref))) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: not a live preference");
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (!read_attr(&P_(pref)->max_workspace, buf, size))
      return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: MAX_WORKSPACE_BYTES takes a uint64_t");
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr == CUBLASLT_MATMUL_PREF_SEARCH_MODE) return CUBLAS_STATUS_SUCCESS;
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES) {
    uint32_t v = 0;
    if (!read_attr(&v, buf, size) || v == 0 || (v & (v - 1)) != 0)
      return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceSetAttribute: MIN_ALIGNMENT_" +
                                                        std::string(1, "ABCD"[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES]) +
                                                        "_BYTES takes a uint32_t power of two");
    P_(pref)->min_align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = v;
    return CUBLAS_STATUS_SUCCESS;
  }
  return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulPreferenceSetAttribute: attribute " +
                                                    std::to_string((int)attr) + " is not emulated");
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t op,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmulAlgoGetHeuristic: not a live handle");
  if (!live(D_(op)) || !live(L_(Adesc)) || !live(L_(Bdesc)) || !live(L_(Cdesc)) || !live(L_(Ddesc)) || !live(P_(pref)) ||
      requested < 1 || !results || !returned)
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE,
                     "cublasLtMatmulAlgoGetHeuristic: a descriptor is not live, or requestedAlgoCount < 1, or null output");
  long long m, n, k;
  std::string why;
  *returned = 0;
  cublasStatus_t st = validate(*D_(op), *L_(Adesc), *L_(Bdesc), *L_(Cdesc), *L_(Ddesc), &m, &n, &k, &why);
  if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(st, "cublasLtMatmulAlgoGetHeuristic: " + why);
  std::memset(&results[0], 0, sizeof(results[0]));
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].workspaceSize = 0;  // the emulator needs no workspace
  results[0].wavesCount = 1.0f;
  results[0].algo.data[0] = kAlgoMarker;
  for (int i = 0; i < 4; ++i) results[0].algo.data[1 + i] = P_(pref)->min_align[i];
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void*, size_t,
                              cudaStream_t stream) {
  const char* fn = "cublasLtMatmul";
  if (!live(handle)) return blas_fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtMatmul: not a live handle");
  if (!live(D_(desc)) || !live(L_(Adesc)) || !live(L_(Bdesc)) || !live(L_(Cdesc)) || !live(L_(Ddesc)))
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: a descriptor or layout is not live");
  if (!alpha || !beta) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: null alpha or beta");
  if (!valid_stream(stream)) return blas_fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul: unknown stream");
  const Desc& d = *D_(desc);
  const Layout &la = *L_(Adesc), &lb = *L_(Bdesc), &lc = *L_(Cdesc), &ld = *L_(Ddesc);
  long long m, n, k;
  std::string why;
  cublasStatus_t st = validate(d, la, lb, lc, ld, &m, &n, &k, &why);
  if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(st, std::string(fn) + ": " + why);
  if (algo && algo->data[0] == kAlgoMarker) {  // the heuristic's algorithm: only for operands as aligned as asked
    const void* ptrs[4] = {A, B, C, D};
    for (int i = 0; i < 4; ++i) {
      const uint64_t want = algo->data[1 + i];
      if (reinterpret_cast<uintptr_t>(ptrs[i]) % want != 0)
        return blas_fail(CUBLAS_STATUS_NOT_SUPPORTED,
                         std::string(fn) + ": operand " + "ABCD"[i] + " is not " + std::to_string(want) +
                             "-byte aligned, as the algorithm was chosen for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_" +
                             "ABCD"[i] + "_BYTES of the heuristic's preference; default 256)");
    }
  }
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  if (sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  const Epilogue e(d.epilogue);
  if (e.uses_bias && !d.bias)
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, std::string(fn) + ": the epilogue needs CUBLASLT_MATMUL_DESC_BIAS_POINTER");
  if (e.uses_aux && !d.aux)
    return blas_fail(CUBLAS_STATUS_INVALID_VALUE, std::string(fn) + ": the epilogue needs CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER");
  // alpha and beta read now (host pointer mode: a captured call keeps these values)
  const MatmulJob job{d,  la, lb, lc, ld, m, n, k, *static_cast<const float*>(alpha), *static_cast<const float*>(beta),
                      A, B, C, D};
  return run_or_capture(stream, fn, [job](bool compute) { return run_matmul(job, compute); });
}
