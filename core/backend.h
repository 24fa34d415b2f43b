// core/backend.h — the typed backend interface: the few dozen primitives everything else is
// built from. One implementation per device (core/cpu/, core/cuda/). All tensors passed in are
// contiguous; outputs are allocated by the caller with the right shape and dtype.
// Float primitives accept f32 and f64 (CPU); index tensors are i32 or i64.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ctx {

enum class UnaryOp {
  Neg,       // -x
  Scale,     // a * x
  AddScalar, // x + a
  Exp, Log, Tanh, Sin, Cos, Sqrt,
  Relu,
  GeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
  Pow,       // x^a
  Clamp,     // min(max(x, a), b)
  Square,    // x^2
};
const char* unary_name(UnaryOp op);

enum class BinaryOp { Add, Sub, Mul, Div };
const char* binary_name(BinaryOp op);

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b < batch; row-major matrices.
// op(A) is [M, K] (A stored [K, M] when trans_a), op(B) is [K, N] (B stored [N, K] when trans_b).
// stride_a / stride_b are element strides between batch items; 0 broadcasts one matrix.
struct GemmDesc {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float alpha = 1.f, beta = 0.f;
};

// A strided view description for copy_strided (element units, relative to the tensor's data).
struct Strided {
  int64_t offset = 0;
  std::vector<int64_t> strides;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string name() const = 0;

  // --- memory ---
  virtual void fill(Tensor& x, double value) = 0;
  // dst[idx] (+)= src[s.offset + sum idx_d * s.strides_d] over `shape`, dst through d (same
  // shape). Covers permute (permuted strides), broadcast (stride 0), slices and concat.
  virtual void copy_strided(const Tensor& src, const Strided& s, Tensor& dst, const Strided& d,
                            const Shape& shape, bool accumulate) = 0;
  virtual void convert(const Tensor& src, Tensor& dst) = 0;  // dtype conversion, same numel

  // --- elementwise ---
  virtual void unary(UnaryOp op, const Tensor& x, Tensor& y, double a = 0, double b = 0) = 0;
  // dx = dy * f'(x) (y = f(x) is passed for ops whose derivative is cheaper from y)
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                              Tensor& dx, double a = 0, double b = 0) = 0;
  // out = a op b with NumPy broadcasting (shapes right-aligned; out has the broadcast shape).
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& out) = 0;
  // out = sum of x over the dims where out's (keepdim) shape is 1 and x's is not.
  virtual void reduce_sum(const Tensor& x, Tensor& out) = 0;
  // y = where(mask != 0, a, b_scalar)  (masked fill), mask broadcast like binary
  virtual void where_scalar(const Tensor& mask, const Tensor& a, double b, Tensor& y) = 0;
  virtual void where(const Tensor& mask, const Tensor& a, const Tensor& b, Tensor& y) = 0;
  // x[..., i, j] = value where j > i + diag, x viewed as [N, T, S]; window > 0 also fills
  // j <= i + diag - window (sliding-window attention of width `window`)
  virtual void causal_fill(Tensor& x, double value, int64_t diag, int64_t window = 0) = 0;

  // --- linear algebra ---
  virtual void gemm(const GemmDesc& g, const Tensor& A, const Tensor& B, Tensor& C) = 0;

  // --- normalisation / softmax (over the last dim; x viewed as [N, C]) ---
  virtual void softmax(const Tensor& x, Tensor& y, bool log) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx, bool log) = 0;
  // y = (x - mean) * rstd * w + b; saves mean, rstd [N]. b may be undefined (no bias).
  virtual void layernorm(const Tensor& x, const Tensor& w, const Tensor& b, double eps, Tensor& y,
                         Tensor& mean, Tensor& rstd) = 0;
  // dx overwritten; dw, db accumulated (+=); db may be undefined.
  virtual void layernorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                  const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dw,
                                  Tensor& db) = 0;
  virtual void rmsnorm(const Tensor& x, const Tensor& w, double eps, Tensor& y, Tensor& rstd) = 0;
  virtual void rmsnorm_backward(const Tensor& dy, const Tensor& x, const Tensor& w,
                                const Tensor& rstd, Tensor& dx, Tensor& dw) = 0;

  // --- losses ---
  // logits [N, V], targets [N] (i32/i64, < 0 = ignored): loss[n] = lse - logit[target], lse [N]
  virtual void cross_entropy(const Tensor& logits, const Tensor& targets, Tensor& loss,
                             Tensor& lse) = 0;
  // dlogits[n] = dloss[n] * (softmax(logits[n]) - onehot(target[n]))
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& targets,
                                      const Tensor& lse, const Tensor& dloss, Tensor& dlogits) = 0;

  // --- indexing (x viewed as [outer, n, inner] around dim) ---
  // out[o, i, r] = x[o, idx[i], r]; indices are range-checked (error names op and value).
  virtual void index_select(const Tensor& x, int64_t dim, const Tensor& idx, Tensor& out) = 0;
  // out[o, idx[i], r] += src[o, i, r]  (scatter-add)
  virtual void index_add(Tensor& out, int64_t dim, const Tensor& idx, const Tensor& src) = 0;

  // --- optimizer ---
  // Decoupled-weight-decay Adam over flat buffers (PyTorch AdamW semantics).
  virtual void adamw(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, double lr,
                     double beta1, double beta2, double eps, double weight_decay,
                     int64_t step) = 0;
};

Backend& backend(Device d);  // the backend for a device (throws if not compiled in)
inline Backend& backend_of(const Tensor& t) { return backend(t.device()); }
void register_backend(Device d, Backend* b);

}  // namespace ctx
