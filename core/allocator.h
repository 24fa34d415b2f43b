// core/allocator.h — a size-class buffer pool for host memory.
// A training step allocates the same intermediate sizes every step; the pool keeps freed
// blocks in per-size free lists so that after the first step no allocation reaches malloc.
// Blocks are 64-byte aligned (AVX-512 loads, oneDNN). Thread-safe. Blocks of 2 MiB and more are
// 2 MiB-aligned and asked of Linux as transparent huge pages (madvise(MADV_HUGEPAGE): the
// "madvise" THP mode gives huge pages only to ranges that ask), so that streaming a flat buffer of
// parameters, a decoder's packed weights or a large activation does not miss the TLB every 4 KiB
// (docs/performance.md, "Huge pages"); CTXLAB_HUGE_PAGES=0 keeps 4 KiB pages.
#pragma once
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace ctx {

struct PoolStats {
  uint64_t requests = 0;     // alloc() calls
  uint64_t system_allocs = 0;  // of which went to the system allocator
  size_t bytes_in_use = 0;   // handed out, not yet returned
  size_t bytes_cached = 0;   // held in free lists
  size_t peak_in_use = 0;
};

class BufferPool {
 public:
  static BufferPool& host();  // the process-wide host pool
  void* alloc(size_t bytes);  // returns 64-byte aligned memory of at least `bytes`
  void free(void* p, size_t bytes);
  void release_cached();      // give cached blocks back to the system
  PoolStats stats() const;
  static size_t size_class(size_t bytes);  // the rounded size a request is served with
  static constexpr size_t kHugePage = size_t(2) << 20;
  // Whether a block of `bytes` is asked for huge pages (>= kHugePage and CTXLAB_HUGE_PAGES on).
  static bool huge(size_t bytes);
  ~BufferPool();

 private:
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  PoolStats st_;
};

}  // namespace ctx
