// core/cuda/emu/fiber.cpp — fiber stacks (mmap + guard page, pooled) and the fcontext switches
// with AddressSanitizer annotations (see fiber.h).
#include "core/cuda/emu/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cuda/emu/emu_asan.h"  // CUEMU_ASAN

#if defined(CUEMU_ASAN)
#include <sanitizer/common_interface_defs.h>
#define CUEMU_START_SWITCH(save, bottom, size) __sanitizer_start_switch_fiber((save), (bottom), (size))
#define CUEMU_FINISH_SWITCH(save, bottom, size) __sanitizer_finish_switch_fiber((save), (bottom), (size))
#else
#define CUEMU_START_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#define CUEMU_FINISH_SWITCH(save, bottom, size) ((void)(save), (void)(bottom), (void)(size))
#endif

namespace ctxd = boost::context::detail;

namespace cuemu::detail {

size_t fiber_stack_bytes() {
  static const size_t bytes = [] {
    size_t kb = 256;
    if (const char* e = std::getenv("CTXLAB_EMU_STACK_KB")) {
      char* end = nullptr;
      long v = std::strtol(e, &end, 10);
      if (end == e || *end != '\0' || v < 64) {
        std::fprintf(stderr, "[cuda-emu] CTXLAB_EMU_STACK_KB='%s' must be an integer >= 64; using 256\n", e);
      } else {
        kb = (size_t)v;
      }
    }
    return kb * 1024;
  }();
  return bytes;
}

StackPool::~StackPool() {
  for (const Stack& s : free_) munmap(s.mapping, s.mapping_bytes);
}

Stack StackPool::acquire() {
  if (!free_.empty()) {
    Stack s = free_.back();
    free_.pop_back();
    return s;
  }
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t usable = (fiber_stack_bytes() + page - 1) / page * page;
  Stack s;
  s.mapping_bytes = usable + page;
  s.mapping = mmap(nullptr, s.mapping_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
  if (s.mapping == MAP_FAILED) {
    std::fprintf(stderr, "[cuda-emu] cannot map a %zu-byte fiber stack: %s\n", s.mapping_bytes, std::strerror(errno));
    std::abort();
  }
  if (mprotect(s.mapping, page, PROT_NONE) != 0) {  // guard page: a stack overflow faults
    std::fprintf(stderr, "[cuda-emu] cannot protect a fiber guard page: %s\n", std::strerror(errno));
    std::abort();
  }
  s.bottom = static_cast<char*>(s.mapping) + page;
  s.usable = usable;
  // Stacks are page aligned, so every fiber's hot top-of-stack lines would fall into the same
  // cache sets; shifting each start by a different multiple of 64 bytes (up to 64 KiB, at most a
  // quarter of the stack) spreads them over the sets.
  const size_t span = std::min<size_t>(64 * 1024, usable / 4);
  s.color = (made_++ * 17 * 64) % span;
  return s;
}

void StackPool::release(const Stack& s, bool abandoned) {
#if defined(CUEMU_ASAN)
  if (abandoned) ASAN_UNPOISON_MEMORY_REGION(s.bottom, s.usable);
#else
  (void)abandoned;
#endif
  free_.push_back(s);
}

// Every jump passes, as its data, the slot where the context of the fiber (or scheduler) that
// jumps must be stored; whoever wakes up stores it there. So fibers may also switch to each other
// directly, and every suspended context is kept by its owner.
namespace {
thread_local Fiber* t_starting = nullptr;  // the fiber resume() is starting (read by FiberEntry)
inline void keep(const ctxd::transfer_t& t) { *static_cast<void**>(t.data) = t.fctx; }
}  // namespace

struct FiberEntry {
  static void run(ctxd::transfer_t t) {
    Fiber* f = t_starting;
    FiberHost* h = f->host;
    keep(t);  // fibers are started by the scheduler only: this is its context
    CUEMU_FINISH_SWITCH(nullptr, &h->sched_bottom_, &h->sched_size_);
    f->fn(f->arg);
    h->finish(*f);
  }
};

void FiberHost::resume(Fiber& f) {
  if (!f.started) {
    f.started = true;
    f.finished = false;
    f.host = this;
    f.ctx = ctxd::make_fcontext(static_cast<char*>(f.stack.bottom) + f.stack.usable - f.stack.color,
                                f.stack.usable - f.stack.color, &FiberEntry::run);
    t_starting = &f;
  }
  void* fake = nullptr;
  CUEMU_START_SWITCH(&fake, f.stack.bottom, f.stack.usable);
  ctxd::transfer_t t = ctxd::jump_fcontext(f.ctx, &sched_ctx_);
  CUEMU_FINISH_SWITCH(fake, nullptr, nullptr);
  keep(t);  // the fiber that came back (not necessarily f) keeps its context
}

void FiberHost::yield(Fiber& f) {
  CUEMU_START_SWITCH(&f.fake_stack, sched_bottom_, sched_size_);
  ctxd::transfer_t t = ctxd::jump_fcontext(sched_ctx_, &f.ctx);
  keep(t);
  CUEMU_FINISH_SWITCH(f.fake_stack, nullptr, nullptr);
}

void FiberHost::switch_to(Fiber& from, Fiber& to) {
  if (!to.started || to.finished) std::abort();  // only suspended fibers are switched to directly
  CUEMU_START_SWITCH(&from.fake_stack, to.stack.bottom, to.stack.usable);
  ctxd::transfer_t t = ctxd::jump_fcontext(to.ctx, &from.ctx);
  keep(t);
  CUEMU_FINISH_SWITCH(from.fake_stack, nullptr, nullptr);
}

void FiberHost::finish(Fiber& f) {
  f.finished = true;
  CUEMU_START_SWITCH(nullptr, sched_bottom_, sched_size_);  // nullptr: this fiber's fake stack dies
  ctxd::jump_fcontext(sched_ctx_, &f.ctx);
  std::abort();  // a finished fiber is never resumed
}

}  // namespace cuemu::detail
