// core/cpu/scratch_arena.h — per-thread scratch memory for CPU kernels: a LIFO arena each thread
// keeps from call to call. A kernel's scratch buffers are scoped, so they are released in the
// reverse order of their requests; once a thread's arena has grown to what its kernels ask for, a
// request is a pointer bump: no lock (the host BufferPool takes one, which two threads of a
// decoding team contended for, docs/sampling.md) and no allocation in a warm step.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace ctx::cpu {

class ScratchArena {
 public:
  // This thread's arena.
  static ScratchArena& mine();
  // `bytes` (64-byte aligned), valid until the matching pop; pops in the reverse order of pushes.
  void* push(size_t bytes);
  void pop(size_t bytes);
  // Blocks the system allocator has given this arena since the thread started (tests).
  size_t system_allocs() const { return allocs_; }

 private:
  struct Block {
    std::unique_ptr<unsigned char[]> mem;
    size_t size = 0, used = 0;
    unsigned char* base() const;  // mem, rounded up to 64 bytes
  };
  std::vector<Block> blocks_;  // the last is the one in use; the others hold live earlier requests
  size_t allocs_ = 0;
};

// A scoped buffer of n values of F from this thread's arena (contents undefined).
template <class F>
class Scratch {
 public:
  explicit Scratch(int64_t n)
      : bytes_(round((size_t)(n > 0 ? n : 1) * sizeof(F))), p_((F*)ScratchArena::mine().push(bytes_)) {}
  ~Scratch() { ScratchArena::mine().pop(bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  F* data() { return p_; }
  F& operator[](int64_t i) { return p_[i]; }

 private:
  static size_t round(size_t b) { return (b + 63) / 64 * 64; }
  size_t bytes_;
  F* p_;
};

}  // namespace ctx::cpu
