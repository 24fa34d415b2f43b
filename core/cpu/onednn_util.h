// core/cpu/onednn_util.h — what the oneDNN fast paths share (internal to core/cpu/):
// the one engine and stream, a keyed primitive cache that creates a primitive once per
// (shape, parameters, thread count) and never again, and execute(), which runs a cached
// primitive on raw pointers through memory objects made once per thread (a call costs
// about as much as a raw oneDNN execute: no memory objects or argument maps built per call).
#pragma once
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include <omp.h>

#include "core/cpu/parallel.h"
#include "core/error.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace ctx::cpu::onednn {

inline dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
// One stream per calling thread (in practice: one, the main thread's), so that primitives
// called from inside our own parallel regions never share a stream.
inline dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Sets omp_get_max_threads() of the calling thread to `n` while a primitive is created or run.
class ScopedMaxThreads {
 public:
  explicit ScopedMaxThreads(int n) : saved_(omp_get_max_threads()) {
    if (n != saved_) omp_set_num_threads(n);
  }
  ~ScopedMaxThreads() {
    if (omp_get_max_threads() != saved_) omp_set_num_threads(saved_);
  }
  ScopedMaxThreads(const ScopedMaxThreads&) = delete;
  ScopedMaxThreads& operator=(const ScopedMaxThreads&) = delete;

 private:
  int saved_;
};

// Cache key: up to 15 integers (op tag, shapes, flags, float bits); the cache adds the thread
// count as the 16th.
struct Key {
  std::array<int64_t, 16> v{};
  bool operator==(const Key& o) const { return v == o.v; }
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t x : k.v) h = (h ^ (uint64_t)x) * 1099511628211ull;
    return (size_t)h;
  }
};
inline int64_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return (int64_t)u;
}

// Primitives (immutable once created, safe to execute from several threads) by key.
// get() holds the lock while creating, so concurrent first calls create one primitive.
template <class Value>
class PrimitiveCache {
 public:
  // The engine is made first, so that it outlives the primitives at exit.
  PrimitiveCache() { engine(); }
  // The threads a primitive over `work` units (core/cpu/parallel.h) gets: threads_for(work), 1
  // below the fork threshold or inside one of our parallel regions. oneDNN (OpenMP runtime) plans
  // its work split for omp_get_max_threads() when the primitive is created, so the count is part
  // of every cache key, and execute() runs the primitive with the same count (Value::threads).
  const Value& get(Key key, int64_t work, const std::function<Value()>& create) {
    const int nthr = threads_for(work);
    key.v[15] = nthr;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      ScopedMaxThreads scope(nthr);
      it = map_.emplace(key, std::make_unique<Value>(create())).first;
      it->second->threads = nthr;
    }
    return *it->second;  // node storage: stable while the cache lives
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return map_.size();
  }

 private:
  mutable std::mutex mu_;
  std::unordered_map<Key, std::unique_ptr<Value>, KeyHash> map_;
};

// A cached primitive and what it takes: (DNNL_ARG_*, descriptor) in the order execute() is
// given pointers. ok == false: oneDNN has no implementation for the case (caller falls back).
struct Prim {
  bool ok = false;
  dnnl::primitive prim;
  std::vector<std::pair<int, dnnl::memory::desc>> args;
  size_t scratch_bytes = 0;  // > 0: the last entry of args is DNNL_ARG_SCRATCHPAD (see attr())
  int threads = 1;           // what it was created for (PrimitiveCache::get); execute() runs it so
};

// The attributes every primitive here is created with: a user-managed scratchpad. oneDNN's
// default (library mode; Debian builds without DNNL_ENABLE_CONCURRENT_EXEC) ties a primitive's
// scratchpad to the thread that created it, so a cached primitive run from two threads at once
// (GEMMs issued inside our own parallel regions) shares it: measured as wrong GEMM results on
// an AVX-512 machine (tests/test_gemm.cpp, CalledFromInsideAParallelRegion). execute() gives each
// thread its own scratchpad buffer instead.
inline dnnl::primitive_attr attr() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// After p.prim and p.args are set: appends the scratchpad argument when the primitive needs one.
inline void bind_scratchpad(Prim& p) {
  const dnnl_memory_desc_t* md =
      dnnl_primitive_desc_query_md(p.prim.get_primitive_desc(), dnnl_query_scratchpad_md, 0);
  if (!md) return;
  dnnl::memory::desc d(*md);
  if (d.get_size() == 0) return;
  p.scratch_bytes = d.get_size();
  p.args.emplace_back(DNNL_ARG_SCRATCHPAD, d);
}

// Runs p on the caller's buffers, ptrs[i] for p.args[i], on this thread's stream.
// The scratchpad (when p has one) is this thread's own buffer, grown to the largest need seen.
inline void execute(const Prim& p, const void* const* ptrs, size_t n) {
  const size_t total = n + (p.scratch_bytes > 0 ? 1 : 0);
  CTX_CHECK(p.ok && total == p.args.size() && total <= 16, "onednn::execute: primitive/argument mismatch");
  thread_local std::unordered_map<const Prim*, std::vector<dnnl::memory>> bound;
  thread_local std::vector<char> scratch;
  std::vector<dnnl::memory>& mem = bound[&p];
  if (mem.empty())  // made once for this thread and primitive; no buffer until set below
    for (const auto& a : p.args) mem.emplace_back(a.second, engine(), static_cast<void*>(nullptr));
  if (scratch.size() < p.scratch_bytes) scratch.resize(p.scratch_bytes);
  dnnl_exec_arg_t args[16];
  for (size_t i = 0; i < total; ++i) {
    mem[i].set_data_handle(i < n ? const_cast<void*>(ptrs[i]) : static_cast<void*>(scratch.data()));
    args[i] = {p.args[i].first, mem[i].get()};
  }
  ScopedMaxThreads scope(p.threads);  // a primitive made for one thread never forks
  const dnnl_status_t st = dnnl_primitive_execute(p.prim.get(), stream().get(), (int)total, args);
  CTX_CHECK(st == dnnl_success, "oneDNN primitive execution failed (status ", (int)st, ")");
  stream().wait();
}
inline void execute(const Prim& p, std::initializer_list<const void*> ptrs) {
  execute(p, ptrs.begin(), ptrs.size());
}

}  // namespace ctx::cpu::onednn
