// core/allocator.cpp — BufferPool implementation (see allocator.h).
#include "core/allocator.h"

#include <cstdlib>
#include <new>
#include <string>

#include "core/error.h"
#include "core/settings.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ctx {

BufferPool& BufferPool::host() {
  static BufferPool* pool = new BufferPool();  // never destroyed: tensors may outlive statics
  return *pool;
}

size_t BufferPool::size_class(size_t bytes) {
  if (bytes <= 256) return 256;
  // Round up to 1/4 steps between powers of two: waste at most 25%, few classes.
  size_t p = 1;
  while (p < bytes) p <<= 1;
  size_t step = p / 8;  // between p/2 and p: p/2 + k*p/8
  size_t r = (bytes + step - 1) / step * step;
  return r;
}

bool BufferPool::huge(size_t bytes) {
  static const bool on = [] {
    const char* e = setting_env("CTXLAB_HUGE_PAGES");
    if (!e) return true;
    const std::string s = e;
    CTX_CHECK(s == "0" || s == "1", "CTXLAB_HUGE_PAGES='", s, "': expected 0 or 1");
    return s == "1";
  }();
  return on && bytes >= kHugePage;
}

void* BufferPool::alloc(size_t bytes) {
  size_t cls = size_class(bytes);
  {
    std::lock_guard<std::mutex> lk(mu_);
    st_.requests++;
    auto it = free_.find(cls);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      st_.bytes_cached -= cls;
      st_.bytes_in_use += cls;
      if (st_.bytes_in_use > st_.peak_in_use) st_.peak_in_use = st_.bytes_in_use;
      return p;
    }
    st_.system_allocs++;
    st_.bytes_in_use += cls;
    if (st_.bytes_in_use > st_.peak_in_use) st_.peak_in_use = st_.bytes_in_use;
  }
  // (a huge block: 2 MiB-aligned so that its whole 2 MiB ranges can be huge pages; its tail, if
  // any, stays in 4 KiB pages: nothing is rounded up, nothing more becomes resident)
  // (posix_memalign: aligned_alloc wants the size a multiple of the alignment, as ASan enforces)
  const bool hp = huge(cls);
  void* p = nullptr;
  if (hp) {
    if (posix_memalign(&p, kHugePage, cls) != 0) p = nullptr;
  } else {
    p = std::aligned_alloc(64, cls);
  }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (p && hp) (void)madvise(p, cls, MADV_HUGEPAGE);  // advice: refused (no THP) is not an error
#endif
  if (!p) {
    std::lock_guard<std::mutex> lk(mu_);
    st_.bytes_in_use -= cls;
    throw Error(str("BufferPool: out of host memory allocating ", cls, " bytes"));
  }
  return p;
}

void BufferPool::free(void* p, size_t bytes) {
  if (!p) return;
  size_t cls = size_class(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  free_[cls].push_back(p);
  st_.bytes_in_use -= cls;
  st_.bytes_cached += cls;
}

void BufferPool::release_cached() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& kv : free_)
    for (void* p : kv.second) std::free(p);
  free_.clear();
  st_.bytes_cached = 0;
}

PoolStats BufferPool::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return st_;
}

BufferPool::~BufferPool() { release_cached(); }

}  // namespace ctx
