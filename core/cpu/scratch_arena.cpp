// core/cpu/scratch_arena.cpp — the per-thread LIFO arena (see scratch_arena.h).
#include "core/cpu/scratch_arena.h"

#include <algorithm>

#include <cstdio>
#include <cstdlib>

namespace ctx::cpu {

ScratchArena& ScratchArena::mine() {
  thread_local ScratchArena a;
  return a;
}

unsigned char* ScratchArena::Block::base() const {
  const uintptr_t p = reinterpret_cast<uintptr_t>(mem.get());
  return reinterpret_cast<unsigned char*>((p + 63) / 64 * 64);
}

void* ScratchArena::push(size_t bytes) {  // bytes: a multiple of 64 (Scratch rounds)
  if (blocks_.empty() || blocks_.back().size - blocks_.back().used < bytes) {
    // a new block, twice the last one at least: the earlier blocks keep their live requests
    const size_t size = std::max(bytes, blocks_.empty() ? (size_t)1 << 16 : 2 * blocks_.back().size);
    Block b;
    b.mem.reset(new unsigned char[size + 64]);
    b.size = size;
    blocks_.push_back(std::move(b));
    ++allocs_;
  }
  Block& b = blocks_.back();
  void* p = b.base() + b.used;
  b.used += bytes;
  return p;
}

void ScratchArena::pop(size_t bytes) {
  // the top of the stack is in the last block that holds anything
  size_t i = blocks_.size();
  while (i > 0 && blocks_[i - 1].used == 0) --i;
  if (i == 0 || blocks_[i - 1].used < bytes) {  // (called from destructors: no exception)
    std::fprintf(stderr, "ScratchArena: a pop of %zu bytes matches no push (scratch is released in reverse order)\n",
                 bytes);
    std::abort();
  }
  blocks_[i - 1].used -= bytes;
  // everything released: keep only the largest block (the last), so the next call fits in one
  if (i == 1 && blocks_.size() > 1 && blocks_[0].used == 0) blocks_.erase(blocks_.begin(), blocks_.end() - 1);
}

}  // namespace ctx::cpu
