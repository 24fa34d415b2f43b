// core/cuda/emu/fiber.h — user-space fibers for the emulator's CUDA threads: guard-paged stacks
// (reused through a per-OS-thread pool) and the switches between the scheduler and a fiber, on
// Boost.Context's fcontext primitives (make_fcontext / jump_fcontext: no syscall per switch).
// Every switch is annotated for AddressSanitizer (__sanitizer_{start,finish}_switch_fiber).
#pragma once
#include <cstddef>
#include <vector>

namespace cuemu::detail {

struct Stack {
  void* mapping = nullptr;  // whole mmap'd region; its lowest page is the PROT_NONE guard
  size_t mapping_bytes = 0;
  void* bottom = nullptr;   // lowest usable address (just above the guard page)
  size_t usable = 0;        // usable bytes; the stack grows down from bottom + usable
};

// Stacks of finished fibers are reused, so a kernel without barriers touches one stack.
class StackPool {
 public:
  StackPool() = default;
  StackPool(const StackPool&) = delete;
  StackPool& operator=(const StackPool&) = delete;
  ~StackPool();
  Stack acquire();
  // abandoned: the fiber never finished (its frames are discarded, ASan's shadow is cleared).
  void release(const Stack& s, bool abandoned);

 private:
  std::vector<Stack> free_;
};

size_t fiber_stack_bytes();  // CTXLAB_EMU_STACK_KB (default 256 KiB, at least 64 KiB)

struct Fiber {
  void (*fn)(void*) = nullptr;  // body; the fiber finishes when it returns
  void* arg = nullptr;
  Stack stack;
  void* ctx = nullptr;          // suspended context (fcontext_t)
  void* fake_stack = nullptr;   // ASan's fake stack while suspended
  bool started = false;
  bool finished = false;
  class FiberHost* host = nullptr;
};

// The scheduler side of one OS thread.
class FiberHost {
 public:
  // Runs f (starting it on its stack the first time) until it yields or finishes.
  // Returns true when it finished.
  bool resume(Fiber& f);
  // From inside f: back to the scheduler; returns when the scheduler resumes f.
  void yield(Fiber& f);
  // From inside f, when its body returned: back to the scheduler for good.
  [[noreturn]] void finish(Fiber& f);

 private:
  void* sched_ctx_ = nullptr;
  const void* sched_bottom_ = nullptr;
  size_t sched_size_ = 0;
  friend struct FiberEntry;
};

}  // namespace cuemu::detail
