// python/src/bindings.h — what the files of the nanobind module `ctxlab._ctxlab` share: one
// bind_* function per concern (module.cpp calls them all) and the NumPy / DLPack conversions.
// The module wraps the public C++ API (<ctxlab/ctxlab.h>, docs/python.md), nothing internal.
#pragma once
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <string>

#include <ctxlab/ctxlab.h>

namespace ctxpy {

namespace nb = nanobind;

void bind_tensor(nb::module_& m);  // Tensor, Variable, no_grad (bind_tensor.cpp)
void bind_model(nb::module_& m);   // configs, the GPT model, checkpoints, optimizers (bind_model.cpp)
void bind_train(nb::module_& m);   // train, evaluate, sample, gradcheck, tokenizers (bind_train.cpp)

// "float32" | "float64" | "int32" | "int64" (also the C++ short names f32, ...) <-> DType; an
// unknown name is a ctx::Error naming `what` and the accepted names.
ctx::DType parse_dtype(const std::string& name, const char* what);
const char* dtype_py_name(ctx::DType d);
ctx::Device parse_device(const std::string& name, const char* what);

// A host array of any of the four dtypes (C-contiguous; read-only allowed) copied into a new
// ctx::Tensor of the same shape and dtype: ctx tensors own their memory (the buffer pool), so
// this direction copies. The other direction does not (tensor_view).
using HostArray = nb::ndarray<nb::c_contig, nb::device::cpu, nb::ro>;
ctx::Tensor tensor_from_array(const HostArray& a, const char* what);

// A view of `t`'s memory for framework F (numpy, array_api for DLPack): no copy; the returned
// object keeps the storage alive. A device tensor gives a CUDA DLPack view (numpy refuses it).
template <class F>
nb::ndarray<F> tensor_view(const ctx::Tensor& t);

}  // namespace ctxpy
