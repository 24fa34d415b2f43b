// core/cuda/emu/counters.cpp — the performance counters (emu_counters.h): the access hooks hand
// every global and shared access of a counted launch here with its CUDA thread and call site; a
// block's accesses are kept in a log and, when the block ends, grouped into warp requests — the
// lanes of one warp at one call site and the same dynamic occurrence of it (the k-th time each
// lane executed that instruction: lanes run as fibers between synchronisation points, so a warp's
// lockstep is rebuilt by counting) — and each request is scored as Nsight Compute does: distinct
// 32-byte sectors for global memory, for shared memory the most distinct 4-byte words one of the
// 32 banks serves (wavefronts; the same word to many lanes is a broadcast, free). Distinct sectors
// over a whole launch (compulsory DRAM traffic) are marked in an epoch shadow of the arena.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cuda/emu/emu_counters.h"
#include "core/cuda/emu/emu_internal.h"

namespace cuemu::detail {

struct CounterLaunch {
  LaunchCounters rec;
  uint32_t epoch = 0;  // marks this launch's distinct sectors in the shadow
  std::mutex mu;
};

namespace {

enum Cls : uint8_t { kLd, kSt, kAtom, kShared };

struct Access {  // one lane's access, as logged during a block
  uintptr_t pk;     // (call site << 1) | write
  uintptr_t a;
  uint32_t occ;     // this lane's how-many-th execution of that call site
  uint32_t n;
  uint16_t warp;
  uint8_t cls;
};

std::atomic<int> g_on{-1};  // -1: CTXLAB_EMU_COUNTERS not read yet
std::mutex g_mu;            // the records, the shadow
std::vector<LaunchCounters> g_records;
std::atomic<uint32_t> g_epoch{0};
uint32_t* g_shadow[2] = {nullptr, nullptr};  // per 32-byte sector of the arena: epoch of its last read / write

std::string g_path;  // CTXLAB_EMU_COUNTERS
void write_at_exit() {
  if (!cuemu::write_counters(g_path))
    std::fprintf(stderr, "[cuda-emu] cannot write the counters to CTXLAB_EMU_COUNTERS='%s'\n", g_path.c_str());
}

bool enabled() {
  int v = g_on.load(std::memory_order_relaxed);
  if (v >= 0) return v != 0;
  static std::once_flag once;
  std::call_once(once, [] {
    const char* e = std::getenv("CTXLAB_EMU_COUNTERS");
    int expected = -1;
    if (e && e[0] != '\0' && g_on.compare_exchange_strong(expected, 1)) {
      g_path = e;
      std::atexit(write_at_exit);
    } else {
      g_on.compare_exchange_strong(expected, 0);
    }
  });
  return g_on.load() != 0;
}

bool map_shadow() {  // caller holds g_mu; the arena exists (g_arena_len > 0)
  if (g_shadow[0]) return true;
  const size_t bytes = g_arena_len / 32 * sizeof(uint32_t);
  for (uint32_t*& s : g_shadow) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      std::fprintf(stderr, "[cuda-emu] cannot map the counters' sector shadow: DRAM bytes are not counted\n");
      return false;
    }
    s = static_cast<uint32_t*>(p);
  }
  return true;
}

// Marks the sectors of [a, a + n) as read or written by this launch; returns the new ones x 32.
uint64_t mark_sectors(int rw, uintptr_t a, size_t n, uint32_t epoch) {
  uint32_t* shadow = g_shadow[rw];
  if (!shadow) return 0;
  uint64_t fresh = 0;
  for (uintptr_t s = a >> 5, last = (a + n - 1) >> 5; s <= last; ++s)
    if (__atomic_exchange_n(&shadow[s - (g_arena_lo >> 5)], epoch, __ATOMIC_RELAXED) != epoch) fresh += 32;
  return fresh;
}

void add(LaunchCounters& to, const LaunchCounters& from) {
  to.ld_requests += from.ld_requests, to.ld_sectors += from.ld_sectors, to.ld_ideal_sectors += from.ld_ideal_sectors;
  to.st_requests += from.st_requests, to.st_sectors += from.st_sectors, to.st_ideal_sectors += from.st_ideal_sectors;
  to.atom_requests += from.atom_requests, to.atom_sectors += from.atom_sectors;
  to.atom_ideal_sectors += from.atom_ideal_sectors;
  to.bytes_read += from.bytes_read, to.bytes_written += from.bytes_written;
  to.dram_read_bytes += from.dram_read_bytes, to.dram_write_bytes += from.dram_write_bytes;
  to.shared_requests += from.shared_requests, to.shared_wavefronts += from.shared_wavefronts;
  to.shared_ideal_wavefronts += from.shared_ideal_wavefronts;
  for (int t = 0; t < kMmaTypes; ++t) to.mma[t] += from.mma[t], to.tensor_flops[t] += from.tensor_flops[t];
  to.fp32_flops += from.fp32_flops;
}

}  // namespace

struct CounterThread {
  CounterLaunch* launch = nullptr;
  LaunchCounters part;  // this OS thread's share of the launch
  std::vector<Access> log;
  std::unordered_map<uint64_t, uint32_t> occ;  // (thread << 48) | pk -> executions so far
  std::vector<uintptr_t> units;                // scratch: a request's sectors / words
  std::vector<std::pair<uintptr_t, uintptr_t>> spans;  // scratch: its byte ranges

  void score(const Access* b, const Access* e);
};

namespace {
thread_local CounterThread t_counter;

// Distinct bytes of the lanes' ranges (overlaps once).
uint64_t distinct_bytes(std::vector<std::pair<uintptr_t, uintptr_t>>& spans) {
  std::sort(spans.begin(), spans.end());
  uint64_t total = 0;
  uintptr_t lo = spans[0].first, hi = spans[0].second;
  for (const auto& s : spans) {
    if (s.first > hi) {
      total += hi - lo;
      lo = s.first;
    }
    hi = std::max(hi, s.second);
  }
  return total + (hi - lo);
}
}  // namespace

// One warp request: the accesses [b, e) share warp, class, call site and occurrence.
void CounterThread::score(const Access* b, const Access* e) {
  units.clear();
  spans.clear();
  const int shift = b->cls == kShared ? 2 : 5;  // 4-byte words (banks) or 32-byte sectors
  for (const Access* x = b; x != e; ++x) {
    spans.emplace_back(x->a, x->a + x->n);
    for (uintptr_t u = x->a >> shift, last = (x->a + x->n - 1) >> shift; u <= last; ++u) units.push_back(u);
  }
  std::sort(units.begin(), units.end());
  const uint64_t distinct = (uint64_t)(std::unique(units.begin(), units.end()) - units.begin());
  if (b->cls == kShared) {
    unsigned per_bank[32] = {};
    unsigned most = 0;
    for (uint64_t i = 0; i < distinct; ++i) most = std::max(most, ++per_bank[units[i] & 31]);
    part.shared_requests += 1;
    part.shared_wavefronts += most;
    part.shared_ideal_wavefronts += (distinct + 31) / 32;
    return;
  }
  const uint64_t ideal = (distinct_bytes(spans) + 31) / 32;
  uint64_t* req = b->cls == kLd ? &part.ld_requests : b->cls == kSt ? &part.st_requests : &part.atom_requests;
  uint64_t* sec = b->cls == kLd ? &part.ld_sectors : b->cls == kSt ? &part.st_sectors : &part.atom_sectors;
  uint64_t* idl = b->cls == kLd ? &part.ld_ideal_sectors : b->cls == kSt ? &part.st_ideal_sectors
                                                                         : &part.atom_ideal_sectors;
  *req += 1;
  *sec += distinct;
  *idl += ideal;
}

CounterLaunch* counters_launch_begin(const char* kernel, const char* file, int line, dim3 grid, dim3 block,
                                     size_t smem_bytes) {
  if (!enabled()) return nullptr;
  CounterLaunch* l = new CounterLaunch();
  l->rec.kernel = kernel;
  l->rec.site = std::string(file) + ":" + std::to_string(line);
  const unsigned g[3] = {grid.x, grid.y, grid.z}, bl[3] = {block.x, block.y, block.z};
  std::copy(g, g + 3, l->rec.grid);
  std::copy(bl, bl + 3, l->rec.block);
  l->rec.smem_bytes = smem_bytes;
  l->epoch = g_epoch.fetch_add(1) + 1;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_arena_len) map_shadow();
  return l;
}

void counters_launch_end(CounterLaunch* l) {
  if (!l) return;
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_records.push_back(l->rec);
  }
  delete l;
}

CounterThread* counters_thread_begin(CounterLaunch* l) {
  CounterThread* c = &t_counter;
  c->launch = l;
  c->part = LaunchCounters{};
  return c;
}

void counters_block_begin(CounterThread* c) {
  c->log.clear();
  c->occ.clear();
}

void counters_block_end(CounterThread* c) {
  auto key = [](const Access& x) { return std::make_tuple(x.warp, x.cls, x.pk, x.occ); };
  std::sort(c->log.begin(), c->log.end(), [&](const Access& x, const Access& y) { return key(x) < key(y); });
  for (size_t i = 0, j; i < c->log.size(); i = j) {
    for (j = i + 1; j < c->log.size() && key(c->log[j]) == key(c->log[i]);) ++j;
    c->score(c->log.data() + i, c->log.data() + j);
  }
  c->log.clear();
}

void counters_thread_end(CounterThread* c) {
  std::lock_guard<std::mutex> lk(c->launch->mu);
  add(c->launch->rec, c->part);
  c->launch = nullptr;
}

void count_access(CounterThread* c, uint32_t tid, bool shared, uintptr_t a, size_t n, unsigned kind, uintptr_t pc) {
  const bool write = kind & kWrite, rmw = kind & kRmw;
  const uintptr_t pk = (pc << 1) | (write ? 1u : 0u);
  const uint32_t occ = c->occ[((uint64_t)tid << 48) | pk]++;
  const uint8_t cls = shared ? kShared : rmw ? kAtom : write ? kSt : kLd;
  c->log.push_back(Access{pk, a, occ, (uint32_t)n, (uint16_t)(tid >> 5), cls});
  if (shared) return;
  if (!write || rmw) {
    c->part.bytes_read += n;
    c->part.dram_read_bytes += mark_sectors(0, a, n, c->launch->epoch);
  }
  if (write) {
    c->part.bytes_written += n;
    c->part.dram_write_bytes += mark_sectors(1, a, n, c->launch->epoch);
  }
}

void counters_library_call(const LaunchCounters& rec) {
  if (!enabled()) return;
  std::lock_guard<std::mutex> lk(g_mu);
  g_records.push_back(rec);
}

}  // namespace cuemu::detail

namespace cuemu {
using namespace detail;

void count_mma(int m, int n, int k, MmaType type) {
  AccessState* s = access_state();
  if (!s || !s->counters) return;
  const int t = (int)type;
  s->counters->part.mma[t] += 1;
  s->counters->part.tensor_flops[t] += 2.0 * m * n * k;
}

void set_counters(bool on) {
  enabled();  // the environment is read once, first
  g_on = on ? 1 : 0;
}
bool counters() { return enabled(); }

std::vector<LaunchCounters> counter_records() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_records;
}
void reset_counters() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_records.clear();
}

}  // namespace cuemu
