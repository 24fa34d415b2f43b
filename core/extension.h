// core/extension.h — extension kernels: the kernels of one op that are not part of the backend
// contract. core/backend.h holds primitives and fused ops of general use; a kernel that belongs to
// one encoding (the rnn encoding's GRU cell, FLOATER's RK4 integration) is declared by the op that
// owns it as a typed slot, and implemented and registered per device by that owner, in its own
// folder (autograd/kernels/). docs/extending.md, "Kernels of your own, per device".
//
//   the owner's header (autograd/kernels/gru_cell.h)
//     using GruCellForward = void(const Tensor& xg, ..., Tensor& hn);    // the typed signature
//     extern ExtensionKernel<GruCellForward> gru_cell_forward;            // the slot
//   the owner's .cpp (autograd/kernels/gru_cell.cpp): the slot, with the argument checks that run
//   before every device's kernel (written once: one message per mistake on every device)
//     ExtensionKernel<GruCellForward> gru_cell_forward{"gru_cell_forward", &check_forward};
//   one file per device (gru_cell_cpu.cpp in the library, gru_cell_cuda.cu in libctxlab_cuda.so):
//   a static registrar, run as the library loads
//     const bool registered = (gru_cell_forward.add(Device::CPU, &forward_cpu, __FILE__), true);
//   the caller (autograd/ops_gru.cpp)
//     if (gru_cell_forward.has(d)) gru_cell_forward(d, xg, ..., hn); else <the composed path>
//
// The types stay: a slot is one function type, every device's kernel has exactly that type, and a
// call is checked by the compiler like any other (no string keys, no untyped argument arrays).
// A second registration for the same device throws naming both files; calling a device with no
// kernel throws naming the slot, the device and the devices that have one. Slots are constant-
// initialised (a constexpr constructor), so a registrar may run before any other static
// initialiser: libctxlab_cuda.so's run when it is loaded, possibly before the executable's.
#pragma once
#include <atomic>
#include <initializer_list>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"

namespace ctx {

class Tensor;

namespace extension_detail {
constexpr int kDevices = 2;  // Device::CPU, Device::CUDA
inline int slot_of(Device d) { return d == Device::CPU ? 0 : 1; }
// Loads the code that registers a device's kernels when it is not loaded yet: for CUDA,
// libctxlab_cuda.so (core/cuda_module.h; throws when it cannot be loaded); nothing for the CPU.
void load_device_code(Device d);
std::mutex& registration_mutex();
[[noreturn]] void throw_duplicate(const char* name, Device d, const char* first, const char* second);
[[noreturn]] void throw_missing(const char* name, Device d, const bool (&registered)[kDevices]);
}  // namespace extension_detail

// Every defined tensor in `ts` is on `d`, else "op: tensor f32[2, 3] is on cpu, expected cuda"
// (the first check of an extension kernel's argument checks).
void check_on_device(Device d, const char* op, std::initializer_list<const Tensor*> ts);

template <class Signature>
class ExtensionKernel;

template <class R, class... A>
class ExtensionKernel<R(A...)> {
 public:
  using Fn = R (*)(A...);
  // The argument checks every device's call runs first: the arguments read-only, and the device.
  using Check = void (*)(Device, const std::decay_t<A>&...);

  constexpr explicit ExtensionKernel(const char* name, Check check = nullptr)
      : name_(name), check_(check), impl_{{nullptr}, {nullptr}}, where_{nullptr, nullptr} {}
  ExtensionKernel(const ExtensionKernel&) = delete;
  ExtensionKernel& operator=(const ExtensionKernel&) = delete;

  const char* name() const { return name_; }

  // Registers the kernel of device d (`where`: the registering file, for the duplicate message).
  // Throws if d already has one.
  void add(Device d, Fn fn, const char* where) {
    CTX_CHECK(fn != nullptr, name_, ": null kernel registered for ", device_name(d), " by ", where);
    std::lock_guard<std::mutex> lk(extension_detail::registration_mutex());
    const int i = extension_detail::slot_of(d);
    if (impl_[i].load(std::memory_order_relaxed))
      extension_detail::throw_duplicate(name_, d, where_[i], where);
    where_[i] = where;
    impl_[i].store(fn, std::memory_order_release);
  }

  // Whether device d has a kernel (for CUDA this loads libctxlab_cuda.so first, whose kernels
  // register as it loads).
  bool has(Device d) const { return find(d) != nullptr; }

  // Runs the argument checks, then device d's kernel; throws when d has none.
  R operator()(Device d, A... a) const {
    const Fn fn = find(d);
    if (!fn) {
      bool reg[extension_detail::kDevices];
      for (int i = 0; i < extension_detail::kDevices; ++i) reg[i] = impl_[i].load(std::memory_order_acquire) != nullptr;
      extension_detail::throw_missing(name_, d, reg);
    }
    if (check_) check_(d, a...);
    return fn(std::forward<A>(a)...);
  }

 private:
  Fn find(Device d) const {
    const int i = extension_detail::slot_of(d);
    Fn fn = impl_[i].load(std::memory_order_acquire);
    if (!fn) {
      extension_detail::load_device_code(d);  // outside the registration lock: loading registers
      fn = impl_[i].load(std::memory_order_acquire);
    }
    return fn;
  }

  const char* name_;
  Check check_;
  std::atomic<Fn> impl_[extension_detail::kDevices];
  const char* where_[extension_detail::kDevices];  // guarded by registration_mutex()
};

}  // namespace ctx
