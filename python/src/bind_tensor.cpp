// python/src/bind_tensor.cpp — ctxlab.Tensor (ctx::Tensor: data), ctxlab.Variable (ctx::Variable:
// a graph node, what parameters, logits and losses are) and the no_grad context manager.
// Tensor -> NumPy / DLPack (torch.from_dlpack) is a view of the same memory; NumPy -> Tensor copies
// (ctx tensors own pool memory; docs/python.md).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <optional>
#include <vector>

#include "bindings.h"
#include "core/backend.h"  // synchronize_devices

namespace ctxpy {

ctx::DType parse_dtype(const std::string& name, const char* what) {
  if (name == "float32" || name == "f32") return ctx::DType::F32;
  if (name == "float64" || name == "f64") return ctx::DType::F64;
  if (name == "int32" || name == "i32") return ctx::DType::I32;
  if (name == "int64" || name == "i64") return ctx::DType::I64;
  throw ctx::Error(ctx::str(what, ": unknown dtype ", ctx::quoted_str(name),
                            " (expected float32, float64, int32 or int64)"));
}

const char* dtype_py_name(ctx::DType d) {
  switch (d) {
    case ctx::DType::F32: return "float32";
    case ctx::DType::F64: return "float64";
    case ctx::DType::I32: return "int32";
    case ctx::DType::I64: return "int64";
  }
  return "?";
}

ctx::Device parse_device(const std::string& name, const char* what) {
  if (name == "cpu") return ctx::Device::CPU;
  if (name == "cuda" || name == "cuda:0") return ctx::Device::CUDA;
  throw ctx::Error(ctx::str(what, ": unknown device ", ctx::quoted_str(name), " (expected cpu or cuda)"));
}

namespace {

nb::dlpack::dtype nb_dtype(ctx::DType d) {
  switch (d) {
    case ctx::DType::F32: return nb::dtype<float>();
    case ctx::DType::F64: return nb::dtype<double>();
    case ctx::DType::I32: return nb::dtype<int32_t>();
    case ctx::DType::I64: return nb::dtype<int64_t>();
  }
  return nb::dtype<float>();
}

ctx::DType ctx_dtype(nb::dlpack::dtype t, const char* what) {
  if (t == nb::dtype<float>()) return ctx::DType::F32;
  if (t == nb::dtype<double>()) return ctx::DType::F64;
  if (t == nb::dtype<int32_t>()) return ctx::DType::I32;
  if (t == nb::dtype<int64_t>()) return ctx::DType::I64;
  throw ctx::Error(ctx::str(what, ": arrays of this dtype (DLPack code ", (int)t.code, ", ", (int)t.bits,
                            " bits) cannot become a ctxlab tensor (expected float32, float64, int32 or int64)"));
}

std::vector<int64_t> shape_of(const ctx::Tensor& t) { return t.shape(); }

std::string tensor_repr(const ctx::Tensor& t) {
  if (!t.defined()) return "ctxlab.Tensor(undefined)";
  return ctx::str("ctxlab.Tensor(", dtype_py_name(t.dtype()), ctx::shape_str(t.shape()), ", device='",
                  ctx::device_name(t.device()), "')");
}

const ctx::Tensor& defined(const ctx::Tensor& t, const char* what) {
  if (!t.defined()) throw ctx::Error(ctx::str(what, ": the tensor is undefined"));
  return t;
}

// A CUDA tensor: the queued kernels finish before the consumer reads (synchronize_devices), then
// the capsule says kDLCUDA, device 0. The emulator's device memory is host memory that another
// framework would take for a GPU pointer: refused there (docs/python.md "Devices").
nb::object dlpack_of(const ctx::Tensor& t, nb::args args, nb::kwargs kwargs) {
  defined(t, "Tensor.__dlpack__");
  if (t.device() != ctx::Device::CPU) {
#ifdef CTXLAB_CUDA_EMULATOR
    throw ctx::Error(ctx::str("Tensor.__dlpack__: tensor ", t.str(), " is on the emulated CUDA device "
                              "(a CTXLAB_CUDA_EMULATOR build: its memory is host memory, not a GPU's); "
                              "copy it with .to('cpu') first"));
#else
    ctx::synchronize_devices();
#endif
  }
  nb::object view = nb::cast(tensor_view<nb::array_api>(t));
  return view.attr("__dlpack__")(*args, **kwargs);
}

nb::object dlpack_device_of(const ctx::Tensor& t) {
  // (kDLCPU = 1 | kDLCUDA = 2, device id)
  return nb::make_tuple(t.device() == ctx::Device::CPU ? 1 : 2, 0);
}

}  // namespace

ctx::Tensor tensor_from_array(const HostArray& a, const char* what) {
  ctx::DType dt = ctx_dtype(a.dtype(), what);
  ctx::Shape shape;
  for (size_t i = 0; i < a.ndim(); ++i) shape.push_back((int64_t)a.shape(i));
  ctx::Tensor t = ctx::Tensor::empty(shape, dt);
  if (t.nbytes()) std::memcpy(t.raw(), a.data(), t.nbytes());
  return t;
}

template <class F>
nb::ndarray<F> tensor_view(const ctx::Tensor& t) {
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  // the capsule owns a Tensor sharing the storage: the memory lives as long as the array
  auto* keep = new ctx::Tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<ctx::Tensor*>(p); });
  const int dev = t.device() == ctx::Device::CPU ? nb::device::cpu::value : nb::device::cuda::value;
  return nb::ndarray<F>(const_cast<void*>(t.raw()), shape.size(), shape.data(), owner, nullptr, nb_dtype(t.dtype()),
                        dev, 0);
}
template nb::ndarray<nb::numpy> tensor_view<nb::numpy>(const ctx::Tensor&);
template nb::ndarray<nb::array_api> tensor_view<nb::array_api>(const ctx::Tensor&);

namespace {

// NumPy view of a host tensor; a CUDA tensor is refused (NumPy arrays live in host memory; as
// torch does, the copy is the caller's: .to('cpu'))
nb::ndarray<nb::numpy> numpy_view(const ctx::Tensor& t) {
  if (defined(t, "Tensor.numpy").device() != ctx::Device::CPU)
    throw ctx::Error(ctx::str("Tensor.numpy: tensor ", t.str(), " is on ", ctx::device_name(t.device()),
                              "; NumPy arrays live in host memory: copy it with .to('cpu') first"));
  return tensor_view<nb::numpy>(t);
}

// The value of a one-element tensor as a Python float; a CUDA tensor is read back (as torch's .item())
double item_of(const ctx::Tensor& t) {
  defined(t, "Tensor.item");
  return t.device() == ctx::Device::CPU ? t.item() : t.to(ctx::Device::CPU).item();
}

struct NoGrad {
  std::optional<ctx::NoGradGuard> guard;
};

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<ctx::Tensor>(m, "Tensor",
                          "Dense, contiguous, row-major tensor (ctx::Tensor). .numpy() and DLPack "
                          "(torch.from_dlpack) view its memory without a copy.")
      .def_static("from_numpy", [](const HostArray& a) { return tensor_from_array(a, "Tensor.from_numpy"); },
                  nb::arg("array"), "A new tensor holding a copy of a C-contiguous host array.")
      .def_static("zeros", [](const std::vector<int64_t>& shape, const std::string& dtype, const std::string& device) {
            return ctx::Tensor::zeros(shape, parse_dtype(dtype, "Tensor.zeros"), parse_device(device, "Tensor.zeros"));
          }, nb::arg("shape"), nb::arg("dtype") = "float32", nb::arg("device") = "cpu")
      .def_prop_ro("shape", &shape_of, "Sizes of every dimension.")
      .def_prop_ro("dtype", [](const ctx::Tensor& t) { return std::string(dtype_py_name(t.dtype())); })
      .def_prop_ro("device", [](const ctx::Tensor& t) { return std::string(ctx::device_name(t.device())); })
      .def_prop_ro("ndim", &ctx::Tensor::dim)
      .def("numel", &ctx::Tensor::numel)
      .def("dim", &ctx::Tensor::dim)
      .def("numpy", &numpy_view, "A NumPy array sharing this tensor's memory (host tensors only).")
      .def("__array__", [](const ctx::Tensor& t, nb::args, nb::kwargs) { return numpy_view(t); })
      .def("__dlpack__", &dlpack_of, "DLPack capsule of this tensor's memory (no copy).")
      .def("__dlpack_device__", &dlpack_device_of)
      .def("item", &item_of, "The value of a one-element tensor (a CUDA tensor is read back).")
      .def("clone", &ctx::Tensor::clone)
      .def("to", [](const ctx::Tensor& t, const std::string& what) {
            if (what == "cpu" || what == "cuda" || what == "cuda:0") return t.to(parse_device(what, "Tensor.to"));
            return t.to(parse_dtype(what, "Tensor.to"));
          }, nb::arg("device_or_dtype"), "A copy on another device ('cpu', 'cuda') or with another dtype.")
      .def("__repr__", &tensor_repr);

  nb::class_<ctx::Variable>(m, "Variable",
                            "A tensor in the autograd graph (ctx::Variable): parameters, logits, losses. "
                            ".grad is the gradient after backward().")
      .def("__init__", [](ctx::Variable* self, const HostArray& a, bool requires_grad) {
            new (self) ctx::Variable(tensor_from_array(a, "Variable"), requires_grad);
          }, nb::arg("array"), nb::arg("requires_grad") = false)
      .def_prop_ro("data", [](const ctx::Variable& v) { return v.data(); }, "The value (shares memory).")
      .def_prop_ro("grad", [](const ctx::Variable& v) -> std::optional<ctx::Tensor> {
            if (!v.grad().defined()) return std::nullopt;
            return v.grad();
          }, "The gradient after backward() (shares memory), or None.")
      .def_prop_rw("requires_grad", &ctx::Variable::requires_grad, &ctx::Variable::set_requires_grad)
      .def_prop_ro("shape", [](const ctx::Variable& v) { return v.shape(); })
      .def_prop_ro("dtype", [](const ctx::Variable& v) { return std::string(dtype_py_name(v.dtype())); })
      .def_prop_ro("device", [](const ctx::Variable& v) { return std::string(ctx::device_name(v.device())); })
      .def_prop_ro("op_name", &ctx::Variable::op_name, "The op that made it ('leaf' for parameters).")
      .def("backward", [](ctx::Variable& v, bool retain_graph) {
            nb::gil_scoped_release release;
            v.backward(ctx::Tensor(), retain_graph);
          }, nb::arg("retain_graph") = false, "Backpropagate from this scalar.")
      .def("zero_grad", &ctx::Variable::zero_grad)
      .def("detach", &ctx::Variable::detach)
      .def("item", [](const ctx::Variable& v) { return item_of(v.data()); })
      .def("numpy", [](const ctx::Variable& v) { return numpy_view(v.data()); },
           "The value as a NumPy array sharing memory.")
      .def("__array__", [](const ctx::Variable& v, nb::args, nb::kwargs) { return numpy_view(v.data()); })
      .def("__dlpack__", [](const ctx::Variable& v, nb::args a, nb::kwargs k) { return dlpack_of(v.data(), a, k); })
      .def("__dlpack_device__", [](const ctx::Variable& v) { return dlpack_device_of(v.data()); })
      .def("copy_", [](ctx::Variable& v, const HostArray& a) {
            ctx::Tensor src = tensor_from_array(a, "Variable.copy_");
            if (src.shape() != v.shape())
              throw ctx::Error(ctx::str("Variable.copy_: array of shape ", ctx::shape_str(src.shape()),
                                        " for a variable of shape ", ctx::shape_str(v.shape())));
            ctx::NoGradGuard ng;
            ctx::Tensor host = src.to(v.dtype());
            if (v.device() == ctx::Device::CPU)
              v.data().copy_from(host);
            else
              v.data().copy_from(host.to(v.device()));
            return v;
          }, nb::arg("array"), "Overwrites the value in place (the same storage) with an array of its shape.")
      .def("__repr__", [](const ctx::Variable& v) {
            if (!v.defined()) return std::string("ctxlab.Variable(undefined)");
            return ctx::str("ctxlab.Variable(", dtype_py_name(v.dtype()), ctx::shape_str(v.shape()), ", op='",
                            v.op_name(), "', requires_grad=", v.requires_grad() ? "True" : "False", ")");
          });

  nb::class_<NoGrad>(m, "no_grad", "Context manager: no graph is recorded inside (ctx::NoGradGuard).")
      .def(nb::init<>())
      .def("__enter__", [](NoGrad& g) { g.guard.emplace(); })
      .def("__exit__", [](NoGrad& g, nb::args) { g.guard.reset(); });
}

}  // namespace ctxpy
