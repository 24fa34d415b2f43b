// core/elementwise_formulas.h — what each elementwise op computes, per element: the unary ops,
// their derivatives and the binary ops, written once for the CPU's reference loops
// (core/cpu/ref_kernels.h) and the CUDA kernels (core/cuda/elementwise.cu). Fast paths (the AVX2
// GELU, oneDNN's eltwise) are held to these by the tests.
#pragma once
#include <cmath>

#include "core/backend.h"  // UnaryOp, BinaryOp
#include "core/host_device.h"

namespace ctx::formula {

// y = f(x); a, b: the op's scalars (Scale / AddScalar / Pow: a; Clamp: [a, b])
template <class T>
CTX_HOST_DEVICE T unary(UnaryOp op, T x, T a, T b) {
  switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Scale: return a * x;
    case UnaryOp::AddScalar: return x + a;
    case UnaryOp::Exp: return std::exp(x);
    case UnaryOp::Log: return std::log(x);
    case UnaryOp::Tanh: return std::tanh(x);
    case UnaryOp::Sin: return std::sin(x);
    case UnaryOp::Cos: return std::cos(x);
    case UnaryOp::Sqrt: return std::sqrt(x);
    case UnaryOp::Relu: return x > T(0) ? x : T(0);
    case UnaryOp::GeluTanh: {
      const T c = T(0.7978845608028654);  // sqrt(2/pi)
      return T(0.5) * x * (T(1) + std::tanh(c * (x + T(0.044715) * x * x * x)));
    }
    case UnaryOp::Pow: return std::pow(x, a);
    case UnaryOp::Clamp: {  // std::min(std::max(x, a), b), spelled out for device code
      const T lo = x < a ? a : x;
      return b < lo ? b : lo;
    }
    case UnaryOp::Square: return x * x;
  }
  return x;
}

// d f(x) / dx, given x and y = f(x) (each op reads the one it needs)
template <class T>
CTX_HOST_DEVICE T unary_deriv(UnaryOp op, T x, T y, T a, T b) {
  switch (op) {
    case UnaryOp::Neg: return T(-1);
    case UnaryOp::Scale: return a;
    case UnaryOp::AddScalar: return T(1);
    case UnaryOp::Exp: return y;
    case UnaryOp::Log: return T(1) / x;
    case UnaryOp::Tanh: return T(1) - y * y;
    case UnaryOp::Sin: return std::cos(x);
    case UnaryOp::Cos: return -std::sin(x);
    case UnaryOp::Sqrt: return T(0.5) / y;
    case UnaryOp::Relu: return x > T(0) ? T(1) : T(0);
    case UnaryOp::GeluTanh: {
      const T c = T(0.7978845608028654);
      const T u = c * (x + T(0.044715) * x * x * x);
      const T t = std::tanh(u);
      const T du = c * (T(1) + T(3 * 0.044715) * x * x);
      return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
    }
    case UnaryOp::Pow: return a * std::pow(x, a - T(1));
    case UnaryOp::Clamp: return (x >= a && x <= b) ? T(1) : T(0);
    case UnaryOp::Square: return T(2) * x;
  }
  return T(0);
}

template <class T>
CTX_HOST_DEVICE T binary(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return a / b;
  }
  return a;
}

}  // namespace ctx::formula
