// core/extension.cpp — the non-template side of core/extension.h: loading a device's code, the
// registration lock and the registry's messages.
#include "core/extension.h"

#include "core/cuda_module.h"
#include "core/tensor.h"

namespace ctx {
namespace extension_detail {

void load_device_code(Device d) {
#ifdef CTXLAB_WITH_CUDA
  if (d == Device::CUDA && !cuda_module_loaded()) (void)cuda_module();  // its registrars run as it loads
#else
  (void)d;
#endif
}

std::mutex& registration_mutex() {
  static std::mutex mu;
  return mu;
}

void throw_duplicate(const char* name, Device d, const char* first, const char* second) {
  throw Error(str(name, ": a second ", device_name(d), " kernel registered by ", second, " (the first: ", first,
                  "); an extension kernel has one kernel per device"));
}

void throw_missing(const char* name, Device d, const bool (&registered)[kDevices]) {
  std::string have;
  for (Device o : {Device::CPU, Device::CUDA})
    if (registered[slot_of(o)]) have += std::string(have.empty() ? "" : ", ") + device_name(o);
  throw Error(str(name, ": no ", device_name(d), " kernel registered for this extension kernel (registered: ",
                  have.empty() ? "none" : have, "); callers check has() first"));
}

}  // namespace extension_detail

void check_on_device(Device d, const char* op, std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->defined())
      CTX_CHECK(t->device() == d, op, ": tensor ", t->str(), " is on ", device_name(t->device()), ", expected ",
                device_name(d));
}

}  // namespace ctx
