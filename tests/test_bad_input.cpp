// tests/test_bad_input.cpp — bad input never crashes: shape, dtype, device and index-range errors
// throw ctx::Error whose message names the op and the shapes involved.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "core/backend.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "tests/test_util.h"

using namespace ctx;

namespace {

// Runs `stmt`; it must throw ctx::Error (not another exception, not nothing) whose message
// contains every one of the given substrings.
#define EXPECT_CTX_ERROR(stmt, ...)                                                           \
  do {                                                                                        \
    const std::vector<std::string> subs_ = {__VA_ARGS__};                                     \
    try {                                                                                     \
      stmt;                                                                                   \
      ADD_FAILURE() << "expected ctx::Error from: " #stmt;                                    \
    } catch (const ::ctx::Error& e_) {                                                        \
      const std::string msg_ = e_.what();                                                     \
      for (const auto& s_ : subs_)                                                            \
        EXPECT_NE(msg_.find(s_), std::string::npos)                                           \
            << "message of `" #stmt "` lacks \"" << s_ << "\": " << msg_;                     \
    } catch (const std::exception& e_) {                                                      \
      ADD_FAILURE() << "`" #stmt "` threw a non-ctx exception: " << e_.what();                \
    }                                                                                         \
  } while (0)

Variable var(const Shape& s, DType dt = DType::F64, bool rg = true) {
  Tensor t = Tensor::empty(s, dt);
  Rng r(shape_numel(s) + 7);
  if (is_float(dt)) r.fill_uniform(t, -1, 1);
  else
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, 0);
  return Variable(t, rg && is_float(dt));
}
template <class I>
Tensor ids(const std::vector<I>& v, const Shape& s) { return Tensor::from_vector<I>(v, s); }

TEST(BadInput, BroadcastShapeMismatch) {
  Variable a = var({2, 3}), b = var({4});
  EXPECT_CTX_ERROR(add(a, b), "add", "[2, 3]", "[4]");
  EXPECT_CTX_ERROR(sub(a, b), "sub", "[2, 3]", "[4]");
  EXPECT_CTX_ERROR(mul(b, a), "mul", "[4]", "[2, 3]");
  EXPECT_CTX_ERROR(div(a, var({3, 3})), "div", "[2, 3]", "[3, 3]");
  EXPECT_CTX_ERROR(add(var({2, 3, 4}), var({3, 1, 5})), "add", "[2, 3, 4]", "[3, 1, 5]");
  EXPECT_CTX_ERROR(expand(var({3, 2}), {3, 4}), "expand", "[3, 2]", "[3, 4]");
  EXPECT_CTX_ERROR(expand(var({2, 3}), {3}), "expand", "[2, 3]", "[3]");
}

TEST(BadInput, MatmulShapes) {
  EXPECT_CTX_ERROR(matmul(var({2, 3}), var({4, 5})), "matmul", "[2, 3]", "[4, 5]");
  EXPECT_CTX_ERROR(matmul(var({2, 3}), var({2, 5}), false, true), "matmul", "[2, 3]", "[2, 5]");
  EXPECT_CTX_ERROR(matmul(var({3, 2}), var({2, 5}), true, false), "matmul", "[3, 2]", "[2, 5]");
  EXPECT_CTX_ERROR(matmul(var({2, 3, 4}), var({3, 4, 5})), "matmul", "[2, 3, 4]", "[3, 4, 5]");
  EXPECT_CTX_ERROR(matmul(var({2, 3, 4}), var({2, 1, 4, 5})), "matmul", "[2, 3, 4]", "[2, 1, 4, 5]");
  EXPECT_CTX_ERROR(matmul(var({3}), var({3, 2})), "matmul", "[3]", "[3, 2]");
  EXPECT_CTX_ERROR(linear(var({2, 3}), var({4, 5})), "linear", "[2, 3]", "[4, 5]");
  EXPECT_CTX_ERROR(linear(var({2, 3}), var({4, 3}), var({5})), "linear", "[5]", "[4, 3]");
  EXPECT_CTX_ERROR(linear(var({2, 3}), var({3})), "linear", "[3]");
  EXPECT_CTX_ERROR(matmul(var({2, 3}, DType::I32), var({3, 2}, DType::I32)), "matmul", "i32");
}

TEST(BadInput, NormWeightShapes) {
  EXPECT_CTX_ERROR(layer_norm(var({2, 5}), var({4}), var({4}), 1e-5), "layer_norm", "[2, 5]", "[4]");
  EXPECT_CTX_ERROR(layer_norm(var({2, 5}), var({4}), Variable(), 1e-5), "layer_norm", "[2, 5]", "[4]");
  EXPECT_CTX_ERROR(layer_norm(var({2, 5}), var({5}), var({4}), 1e-5), "layer_norm", "[5]", "[4]");
  EXPECT_CTX_ERROR(layer_norm(var({2, 5}), var({1, 5}), var({5}), 1e-5), "layer_norm", "[2, 5]", "[1, 5]");
  EXPECT_CTX_ERROR(layer_norm(var({}), var({1}), var({1}), 1e-5), "layer_norm");
  EXPECT_CTX_ERROR(rms_norm(var({2, 5}), var({6}), 1e-5), "rms_norm", "[2, 5]", "[6]");
  EXPECT_CTX_ERROR(rms_norm(var({}), var({1}), 1e-5), "rms_norm");
  EXPECT_CTX_ERROR(layer_norm(var({2, 5}), var({5}, DType::F32), var({5}), 1e-5), "layer_norm", "f64[2, 5]",
                   "f32[5]");
}

TEST(BadInput, ConcatMismatch) {
  EXPECT_CTX_ERROR(concat({var({2, 3}), var({2, 4})}, 0), "concat", "[2, 3]", "[2, 4]");
  EXPECT_CTX_ERROR(concat({var({2, 3}), var({2, 3}), var({3, 4})}, 1), "concat", "[2, 3]", "[3, 4]");
  EXPECT_CTX_ERROR(concat({var({2, 3}), var({2, 3, 1})}, 0), "concat", "[2, 3]", "[2, 3, 1]");
  EXPECT_CTX_ERROR(concat({var({2, 3}), var({2, 3}, DType::F32)}, 0), "concat", "f64[2, 3]", "f32[2, 3]");
  EXPECT_CTX_ERROR(concat({var({2, 3})}, 2), "concat", "[2, 3]");
  EXPECT_CTX_ERROR(concat({}, 0), "concat");
}

TEST(BadInput, CrossEntropyTargets) {
  Variable z = var({3, 5});
  EXPECT_CTX_ERROR(cross_entropy(z, ids<int64_t>({0, 1, 2, 3}, {4})), "cross_entropy", "[3, 5]", "[4]");
  EXPECT_CTX_ERROR(cross_entropy(z, ids<int32_t>({0, 1}, {2})), "cross_entropy", "[3, 5]", "[2]");
  // out of range: >= V and below the ignore value -1
  EXPECT_CTX_ERROR(cross_entropy(z, ids<int64_t>({0, 5, 1}, {3})), "cross_entropy", "[3, 5]", "[3]", "5");
  EXPECT_CTX_ERROR(cross_entropy(z, ids<int32_t>({0, 1, 7}, {3})), "cross_entropy", "[3, 5]", "[3]", "7");
  EXPECT_CTX_ERROR(cross_entropy(z, ids<int32_t>({-2, 1, 0}, {3})), "cross_entropy", "[3, 5]", "[3]", "-2");
  EXPECT_CTX_ERROR(cross_entropy(z, ids<int64_t>({-1, -1, -1}, {3})), "cross_entropy", "ignored");
  EXPECT_CTX_ERROR(cross_entropy(z, Tensor::zeros({3}, DType::F32)), "cross_entropy", "f32[3]");
  EXPECT_CTX_ERROR(cross_entropy(var({3, 5, 1}), ids<int64_t>({0, 1, 2}, {3})), "cross_entropy", "[3, 5, 1]");
}

TEST(BadInput, DtypeMismatch) {
  Variable a32 = var({2, 3}, DType::F32), a64 = var({2, 3});
  EXPECT_CTX_ERROR(add(a32, a64), "add", "f32[2, 3]", "f64[2, 3]");
  EXPECT_CTX_ERROR(mul(a64, a32), "mul", "f64[2, 3]", "f32[2, 3]");
  EXPECT_CTX_ERROR(matmul(var({2, 3}, DType::F32), var({3, 4})), "matmul", "f32[2, 3]", "f64[3, 4]");
  EXPECT_CTX_ERROR(where(Tensor::zeros({2, 3}, DType::I32), a32, a64), "where", "f32[2, 3]", "f64[2, 3]");
  EXPECT_CTX_ERROR(scatter_add(var({4, 3}), 0, ids<int64_t>({0}, {1}), var({1, 3}, DType::F32)),
                   "scatter_add", "f64[4, 3]", "f32[1, 3]");
  // integer tensors into float ops
  EXPECT_CTX_ERROR(add(var({2}, DType::I32), var({2}, DType::I32)), "add", "i32");
  EXPECT_CTX_ERROR(exp(var({2}, DType::I64)), "exp", "i64[2]");
  EXPECT_CTX_ERROR(softmax(var({2, 2}, DType::I32)), "softmax", "i32");
  EXPECT_CTX_ERROR(sum(var({2}, DType::I32)), "sum", "i32[2]");
  EXPECT_CTX_ERROR(embedding(var({4, 3}), Tensor::zeros({2}, DType::F32)), "embedding", "f32[2]");
}

#ifndef CTXLAB_WITH_CUDA  // a build without the backend only (nothing to skip in a CUDA build)
TEST(BadInput, CudaNotCompiledIn) {
  EXPECT_CTX_ERROR(Tensor::empty({2, 3}, DType::F32, Device::CUDA), "CUDA");
  EXPECT_CTX_ERROR(Tensor::zeros({2}, DType::F64, Device::CUDA), "CUDA");
  EXPECT_CTX_ERROR(Tensor::zeros({2}).to(Device::CUDA), "CUDA");
  EXPECT_CTX_ERROR(backend(Device::CUDA), "CUDA");
}
#endif

TEST(BadInput, EmbeddingIdsOutOfRange) {
  Variable w = var({5, 3});
  EXPECT_CTX_ERROR(embedding(w, ids<int64_t>({0, 5, 1, 2}, {2, 2})), "embedding", "[5, 3]", "[2, 2]", "5");
  EXPECT_CTX_ERROR(embedding(w, ids<int32_t>({0, 1, 9}, {3})), "embedding", "[5, 3]", "[3]", "9");
  EXPECT_CTX_ERROR(embedding(w, ids<int64_t>({-1, 0}, {2})), "embedding", "[5, 3]", "[2]", "-1");
  EXPECT_CTX_ERROR(embedding(w, ids<int32_t>({2, -3}, {1, 2})), "embedding", "[5, 3]", "[1, 2]", "-3");
  EXPECT_CTX_ERROR(embedding(var({5}), ids<int64_t>({0}, {1})), "embedding", "[5]");
  // a failed lookup leaves the weight without a gradient and records nothing
  EXPECT_FALSE(w.grad().defined());
}

TEST(BadInput, IndexOpsOutOfRange) {
  Variable x = var({4, 3});
  EXPECT_CTX_ERROR(index_select(x, 0, ids<int64_t>({0, 4}, {2})), "index_select", "[4, 3]", "[2]", "4");
  EXPECT_CTX_ERROR(index_select(x, 1, ids<int32_t>({-1}, {1})), "index_select", "[4, 3]", "[1]", "-1");
  EXPECT_CTX_ERROR(index_select(x, 2, ids<int64_t>({0}, {1})), "index_select", "[4, 3]");
  EXPECT_CTX_ERROR(index_select(x, 0, ids<int64_t>({0, 1}, {1, 2})), "index_select", "[1, 2]");
  EXPECT_CTX_ERROR(scatter_add(x, 0, ids<int64_t>({0, 4}, {2}), var({2, 3})), "scatter_add", "[4, 3]", "[2]",
                   "4");
  EXPECT_CTX_ERROR(scatter_add(x, 0, ids<int64_t>({0, 1}, {2}), var({3, 3})), "scatter_add", "[4, 3]",
                   "[3, 3]");
}

// The model's token batches: empty ones (B = 0 or T = 0) and negative ids, as inputs or as targets
// (cross_entropy's ignore index is -1: a -1 target must not be dropped silently by the model).
TEST(BadInput, ModelTokenBatches) {
  nn::GPT m(testing_util::tiny_cfg({{"type", "rope"}}));
  m.init_weights(1);
  auto tok = [](std::vector<int64_t> v, Shape s) { return ids<int64_t>(v, s); };
  const Tensor ok = tok({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_CTX_ERROR(m.loss(Tensor::zeros({2, 0}, DType::I64), Tensor::zeros({2, 0}, DType::I64)), "tokens",
                   "i64[2, 0]", "T >= 1");
  EXPECT_CTX_ERROR(m.loss(Tensor::zeros({0, 5}, DType::I64), Tensor::zeros({0, 5}, DType::I64)), "i64[0, 5]",
                   "B >= 1");
  EXPECT_CTX_ERROR(m.forward(Tensor::zeros({1, 0}, DType::I32)), "forward", "i32[1, 0]");
  EXPECT_CTX_ERROR(m.loss(tok({1, -1, 3, 4, 5, 6}, {2, 3}), ok), "forward", "-1", "[0, 1]");
  EXPECT_CTX_ERROR(m.loss(ok, tok({1, 2, 3, 4, 5, -1}, {2, 3})), "loss targets", "-1", "[1, 2]");
  EXPECT_CTX_ERROR(m.loss(ok, tok({1, 2, 17, 4, 5, 6}, {2, 3})), "loss targets", "17", "vocab_size 17");
  EXPECT_TRUE(std::isfinite(m.loss(ok, ok).data().item()));  // the valid batch next to them
}

TEST(BadInput, OtherShapeErrors) {
  Variable x = var({2, 3});
  EXPECT_CTX_ERROR(reshape(x, {4, 2}), "reshape", "[2, 3]", "[4, 2]");
  EXPECT_CTX_ERROR(permute(x, {0}), "permute", "[2, 3]");
  EXPECT_CTX_ERROR(permute(x, {0, 0}), "permute", "[2, 3]");
  EXPECT_CTX_ERROR(permute(x, {0, 2}), "permute", "[2, 3]");
  EXPECT_CTX_ERROR(transpose(x, 0, 2), "transpose", "[2, 3]");
  EXPECT_CTX_ERROR(slice(x, 1, 2, 4), "slice", "[2, 3]");
  EXPECT_CTX_ERROR(slice(x, 0, 2, 1), "slice", "[2, 3]");
  EXPECT_CTX_ERROR(slice(x, 2, 0, 1), "slice", "[2, 3]");
  EXPECT_CTX_ERROR(sum(x, {2}), "sum", "[2, 3]");
  EXPECT_CTX_ERROR(sum(x, {0, -2}), "sum", "repeated");
  EXPECT_CTX_ERROR(mean(x, {-3}), "mean", "[2, 3]");
  EXPECT_CTX_ERROR(mean(var({0, 3}), {0}), "mean", "[0, 3]");
  EXPECT_CTX_ERROR(where(Tensor::zeros({2, 3}, DType::I32), x, var({3, 2})), "where", "[2, 3]", "[3, 2]");
  EXPECT_CTX_ERROR(where(Tensor::zeros({4}, DType::I32), x, x), "where", "[4]", "[2, 3]");
  EXPECT_CTX_ERROR(masked_fill(x, Tensor::zeros({3, 1}, DType::I32), 0.0), "masked_fill", "[3, 1]", "[2, 3]");
  EXPECT_CTX_ERROR(causal_mask(var({4})), "causal_mask", "[4]");
  EXPECT_CTX_ERROR(softmax(var({})), "softmax", "[]");
  EXPECT_CTX_ERROR(log_softmax(var({})), "log_softmax", "[]");
  Rng rng(1);
  EXPECT_CTX_ERROR(dropout(x, 1.0, true, rng), "dropout");
  EXPECT_CTX_ERROR(dropout(x, -0.1, true, rng), "dropout");
  EXPECT_CTX_ERROR(clamp(x, 1.0, -1.0), "clamp");
  EXPECT_CTX_ERROR(x.backward(Tensor::zeros({3}, DType::F64)), "backward", "[3]", "[2, 3]");
  EXPECT_CTX_ERROR(scale(x, 2.0).backward(), "backward", "[2, 3]");
  EXPECT_CTX_ERROR(var({2}, DType::F64, false).backward(), "backward", "require");
  EXPECT_CTX_ERROR(Variable().data(), "undefined");
}

}  // namespace
