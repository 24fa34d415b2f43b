// core/attention_checks.h — the argument checks of Backend::attention_forward / _backward, shared
// by every backend (core/cpu/attention.cpp, core/cuda/attention.cu): each tensor against AttnDims
// (dtype, shape, device); errors name the method, the field, the expected and the actual tensor.
#pragma once
#include "core/backend.h"

namespace ctx {

// q, k, v, bias, rel, out, lse; every tensor must be on `dev`. Returns q's dtype.
DType check_attention_forward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& bias, const Tensor& out, const Tensor& lse, const AttnRel& rel,
                              Device dev);
// The forward's tensors plus dout, dq, dk, dv, dbias and the relative gradients wanted.
DType check_attention_backward(const AttnDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& bias, const Tensor& out, const Tensor& lse, const Tensor& dout,
                               const Tensor& dq, const Tensor& dk, const Tensor& dv, const Tensor& dbias,
                               const AttnRel& rel, const AttnRelGrad& drel, Device dev);

}  // namespace ctx
