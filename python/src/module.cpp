// python/src/module.cpp — the nanobind extension `ctxlab._ctxlab`: ctx::Error as ctxlab.Error
// (same message), the devices of this build, and every bind_* of the other files.
// python/ctxlab/__init__.py is the PyTorch-like layer users import on top of it.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"

NB_MODULE(_ctxlab, m) {
  using namespace ctxpy;
  m.doc() = "ctxlab's C++ library (docs/python.md); import ctxlab rather than this module.";
  nb::exception<ctx::Error>(m, "Error", PyExc_RuntimeError);
  m.def("devices", [] {
    std::vector<std::string> d = {"cpu"};
#ifdef CTXLAB_WITH_CUDA
    try {
      (void)ctx::Tensor::zeros({1}, ctx::DType::F32, ctx::Device::CUDA);
      d.push_back("cuda");
    } catch (const ctx::Error&) {
      // no GPU, no driver or libctxlab_cuda.so not loadable: the CPU only (asking for 'cuda'
      // raises the reason as ctxlab.Error)
    }
#endif
    return d;
  }, "Devices this build can use now ('cpu', and 'cuda' where a GPU and the CUDA backend are).");
  m.attr("with_cuda") =
#ifdef CTXLAB_WITH_CUDA
      true;
#else
      false;
#endif
  // the CUDA device is the emulator's (CTXLAB_CUDA_EMULATOR: kernels run on the CPU, device memory
  // is host memory; DLPack export of 'cuda' tensors is refused there, docs/python.md "Devices")
  m.attr("cuda_emulator") =
#ifdef CTXLAB_CUDA_EMULATOR
      true;
#else
      false;
#endif
  bind_tensor(m);
  bind_model(m);
  bind_train(m);
}
