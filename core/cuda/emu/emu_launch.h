// core/cuda/emu/emu_launch.h — cuemu::launch, what CTX_LAUNCH expands to under the emulator:
// converts the arguments to the kernel's parameter types (one copy, read by every CUDA thread as
// by-value parameters), checks every pointer argument against the device-allocation registry,
// and hands a type-erased body to the scheduler (core/cuda/emu/scheduler.cpp), with what a stream
// capture needs to keep the arguments (graph.cpp).
#pragma once
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/cuda/emu/emu_runtime.h"
#include "core/cuda/emu/emu_types.h"

namespace cuemu {
namespace detail {

struct LaunchSpec {
  const char* kernel_name;  // as written at the launch site
  const char* file;         // launch site
  int line;
  const void* kernel_id;    // the kernel's address (cudaFuncSetAttribute key)
  dim3 grid, block;
  size_t smem_bytes;
  cudaStream_t stream;
  void (*body)(const void* ctx);  // runs the kernel for the current CUDA thread
  const void* ctx;
  int bad_pointer_arg;        // index of the first host pointer argument, -1 if none
  const void* bad_pointer;
  // For stream capture (graph.cpp): an owned heap copy of ctx (the arguments outlive the call),
  // its deleter, and the pointer check on such a copy (bad_pointer_arg again when a graph runs).
  void* (*clone_ctx)(const void* ctx) = nullptr;
  void (*free_ctx)(void* ctx) = nullptr;
  int (*check_pointers)(const void* ctx, const void** bad) = nullptr;
};
void launch(const LaunchSpec& spec);

// Index of the first pointer argument that is neither null nor inside a device allocation (or
// pinned host memory).
template <class Tuple, size_t... I>
int first_host_pointer(const Tuple& t, const void** bad, std::index_sequence<I...>) {
  int found = -1;
  auto check = [&](int index, const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_pointer<V>::value && !std::is_function<std::remove_pointer_t<V>>::value) {
      if (found < 0 && v != nullptr && !is_kernel_accessible((const void*)v)) {
        found = index;
        *bad = (const void*)v;
      }
    }
  };
  (check((int)I, std::get<I>(t)), ...);
  return found;
}

}  // namespace detail

// kernel(args...) over grid x block CUDA threads with smem_bytes of dynamic shared memory.
template <class... P, class... A>
void launch(const char* name, const char* file, int line, void (*kernel)(P...), dim3 grid, dim3 block,
            size_t smem_bytes, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "CTX_LAUNCH: wrong number of kernel arguments");
  using Params = std::tuple<std::decay_t<P>...>;
  struct Ctx {
    void (*kernel)(P...);
    Params params;
  };
  const Ctx ctx{kernel, Params(std::forward<A>(args)...)};
  detail::LaunchSpec spec{name, file, line, reinterpret_cast<const void*>(kernel), grid, block, smem_bytes,
                          stream, nullptr, &ctx, -1, nullptr};
  spec.body = [](const void* c) {
    const Ctx* k = static_cast<const Ctx*>(c);
    std::apply(k->kernel, k->params);
  };
  spec.bad_pointer_arg = detail::first_host_pointer(ctx.params, &spec.bad_pointer,
                                                    std::index_sequence_for<P...>{});
  spec.clone_ctx = [](const void* c) -> void* { return new Ctx(*static_cast<const Ctx*>(c)); };
  spec.free_ctx = [](void* c) { delete static_cast<Ctx*>(c); };
  spec.check_pointers = [](const void* c, const void** bad) {
    *bad = nullptr;
    return detail::first_host_pointer(static_cast<const Ctx*>(c)->params, bad, std::index_sequence_for<P...>{});
  };
  detail::launch(spec);
}

}  // namespace cuemu
