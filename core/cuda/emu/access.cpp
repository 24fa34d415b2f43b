// core/cuda/emu/access.cpp — the access hooks: what kernel code compiled against the emulator
// calls before every load and store, and the checks they make.
//
// Interception. Kernels are plain C++ here, with raw pointers, so the emulator cannot wrap their
// memory accesses in a type. Instead CMakeLists.txt compiles the kernel sources (core/cuda/*.cu in
// an emulator build, tests/emu/*.cpp) with GCC's ThreadSanitizer instrumentation and no libtsan:
// the compiler puts a call to __tsan_read4(p), __tsan_write8(p), __tsan_atomic32_fetch_add(p, v,
// mo)... before each memory access, and this file defines those functions. Outside a kernel the
// hook is one thread-local load and a return. The real nvcc build is untouched.
//
// Inside a kernel an access is classified by address: device memory (the arena, arena.cpp),
// dynamic shared memory (the running block's guarded region), static __shared__ memory (this OS
// thread's TLS block of the kernel's module), or anything else (the fiber's stack, the kernel's
// parameters, host globals: not checked). Then:
//   * memcheck (always): a device access outside a live allocation, a shared access outside the
//     launch's dynamic shared memory -> cudaErrorIllegalAddress naming the allocation / offset;
//     4M consecutive reads of one global address by one thread with no other access -> a
//     spin-wait on another block (blocks may never run concurrently) is reported;
//   * static __shared__ memory: the first touch of a byte in a block NaN-fills it (0xFF), as the
//     dynamic shared memory is filled at block start;
//   * racecheck (CTXLAB_EMU_RACECHECK=1): per 4-byte word, the last write and the last two
//     readers (thread, barrier interval, warp clock, atomic or not, call site). Two accesses of
//     different threads of one block, one a write, not both atomic, conflict when no
//     __syncthreads() lies between them and, for lanes of one warp, no __syncwarp() either;
//     accesses of two blocks to one global word conflict unless both are atomic or the earlier
//     one's block executed __threadfence() after it. A conflict is a launch failure that names
//     the kernel, both call sites (addr2line on the code addresses) and the address.
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/cuda/emu/emu_device.h"
#include "core/cuda/emu/emu_internal.h"

#include "core/cuda/emu/emu_asan.h"  // CUEMU_ASAN

extern "C" void* __tls_get_addr(void*);

namespace cuemu::detail {

namespace {

// Initial-exec: one %fs-relative load per hook (a few bytes of the static TLS surplus when
// libctxlab_cuda.so is dlopen()ed).
#if defined(CUEMU_ASAN)
thread_local AccessState* t_access = nullptr;
#else
__attribute__((tls_model("initial-exec"))) thread_local AccessState* t_access = nullptr;
#endif

std::atomic<bool> g_hooks{false};
std::atomic<int> g_racecheck{-1};  // -1: not read from CTXLAB_EMU_RACECHECK yet

constexpr uint64_t kSpinLimit = uint64_t(1) << 22;

std::string hexa(uintptr_t p) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%" PRIxPTR, p);
  return b;
}
std::string pc_token(uintptr_t pc) { return "@pc:" + hexa(pc) + "@"; }

std::string coords(uint64_t linear, const unsigned d[3]) {
  std::ostringstream os;
  os << "(" << linear % d[0] << "," << (linear / d[0]) % d[1] << "," << linear / ((uint64_t)d[0] * d[1]) << ")";
  return os.str();
}
std::string thread_name(const AccessState* s, uint32_t tid) { return "thread " + coords(tid, s->block); }
std::string block_name(const AccessState* s, uint64_t run) { return "block " + coords(run - s->run_base, s->grid); }

const char* verb(unsigned kind) {
  if (kind & kAtomic) return (kind & kRmw) ? "atomically updates" : (kind & kWrite) ? "atomically writes" : "atomically reads";
  return (kind & kWrite) ? "writes" : "reads";
}
const char* past_verb(uint64_t info) {
  const bool write = info & 1, atomic = info & 2;
  return atomic ? (write ? "atomically wrote" : "atomically read") : (write ? "wrote" : "read");
}

// ---- the race detector ----
constexpr uint64_t kGenMask = 0xFFFFFF;
inline uint64_t run_of(uint64_t when) { return when >> 24; }
inline uint32_t tid_of(uint64_t info) { return (uint32_t)(info >> 6) & 1023u; }
inline unsigned mask_of(uint64_t info) { return (unsigned)(info >> 2) & 15u; }
inline uintptr_t pc_of(uint64_t info) { return (uintptr_t)(info >> 16); }

inline RaceRec load(const RaceRec& r) {  // global cells are shared by the OS threads running blocks
  RaceRec x;
  x.when = __atomic_load_n(&r.when, __ATOMIC_RELAXED);
  x.info = __atomic_load_n(&r.info, __ATOMIC_RELAXED);
  x.cf = __atomic_load_n(&r.cf, __ATOMIC_RELAXED);
  return x;
}
inline void store(RaceRec& r, const RaceRec& x) {
  __atomic_store_n(&r.when, x.when, __ATOMIC_RELAXED);
  __atomic_store_n(&r.info, x.info, __ATOMIC_RELAXED);
  __atomic_store_n(&r.cf, x.cf, __ATOMIC_RELAXED);
}

bool block_fenced_since(const AccessState* s, uint64_t run, uint32_t fences_then) {
  if (!s->fences) return false;
  std::lock_guard<std::mutex> lk(s->fences->mu);
  auto it = s->fences->by_run.find(run);
  return it != s->fences->by_run.end() && it->second > fences_then;
}

// True when the recorded access r happens before the running thread's access.
bool ordered(const AccessState* s, const RaceRec& r, bool global) {
  const uint64_t run = run_of(r.when);
  if (run < s->run_base) return true;  // an earlier launch (or no record)
  if (run != s->run) return !global || block_fenced_since(s, run, (uint32_t)(r.cf >> 32));
  const uint32_t tid = tid_of(r.info);
  if (tid == s->tid) return true;
  if ((r.when & kGenMask) != (s->gen & kGenMask)) return true;  // a __syncthreads() between
  if ((tid >> 5) == (s->tid >> 5)) return s->vc[tid & 31] > (uint32_t)r.cf;  // a __syncwarp() between
  return false;
}

enum class Space { Dynamic, Static, Global };

[[noreturn]] void hazard(AccessState* s, const char* type, const RaceRec& prior, unsigned kind, uintptr_t a,
                         size_t n, uintptr_t pc, Space space) {
  std::ostringstream os;
  const uint64_t prior_run = run_of(prior.when);
  const uint32_t prior_tid = tid_of(prior.info);
  const bool cross_block = prior_run != s->run;
  os << "(" << type << ") on " << (space == Space::Global ? "global" : "shared") << " memory: ";
  if (cross_block) os << block_name(s, s->run) << " ";
  os << thread_name(s, s->tid) << " " << verb(kind) << " " << n << " bytes at " << pc_token(pc) << "; ";
  if (cross_block) os << block_name(s, prior_run) << " ";
  os << thread_name(s, prior_tid) << " " << past_verb(prior.info) << " them at " << pc_token(pc_of(prior.info));
  if (cross_block) {
    os << " (blocks of one launch are not ordered: plain accesses to one global address from two blocks race; "
          "use atomics, or __threadfence() in the writing block before it signals the reader)";
  } else {
    os << ", in the same barrier interval (no __syncthreads() between";
    if ((prior_tid >> 5) == (s->tid >> 5)) os << ", and no __syncwarp() between these lanes of warp " << (s->tid >> 5);
    os << ")";
  }
  os << "; address " << hexa(a);
  if (space == Space::Global) {
    DeviceRegion r;
    if (arena_region(a, &r))
      os << " = allocation #" << r.serial << " (" << r.bytes << " bytes at " << hexa(r.base) << ") + " << (a - r.base);
  } else if (space == Space::Dynamic) {
    os << " = dynamic shared memory + " << (a - s->smem_lo) << " (of " << s->smem_bytes << " bytes)";
  } else {
    os << " (static __shared__ memory)";
  }
  access_fault(s, cudaErrorLaunchFailure, "race hazard", os.str());
}

// A conflict found in a cell: its kind and the earlier access.
struct Conflict {
  const char* type = nullptr;  // nullptr: none
  RaceRec prior;
};

// One 4-byte word: check the running access against the cell, then record it (not recorded when
// it conflicts: the launch fails there).
Conflict race_step(AccessState* s, RaceCell& c, unsigned mask, unsigned kind, uintptr_t pc, bool global) {
  const bool write = kind & kWrite, atomic = kind & kAtomic;
  const uint64_t when = (s->run << 24) | (s->gen & kGenMask);
  RaceRec cur;
  cur.when = when;
  cur.info = ((uint64_t)pc << 16) | ((uint64_t)s->tid << 6) | ((uint64_t)mask << 2) | (atomic ? 2u : 0u) |
             (write ? 1u : 0u);
  cur.cf = ((uint64_t)s->block_fence << 32) | (s->vc ? s->vc[s->tid & 31] : 0u);
  auto conflicts = [&](const RaceRec& r) {
    return r.when != 0 && (mask_of(r.info) & mask) && !(atomic && (r.info & 2)) && !ordered(s, r, global);
  };
  const RaceRec w = load(c.w);
  if (conflicts(w)) return {write ? "write-after-write" : "read-after-write", w};
  if (write) {
    const RaceRec r1 = load(c.r1), r2 = load(c.r2);
    if (conflicts(r1)) return {"write-after-read", r1};
    if (conflicts(r2)) return {"write-after-read", r2};
    if (w.when == when && tid_of(w.info) == s->tid) cur.info |= (uint64_t)mask_of(w.info) << 2;
    store(c.w, cur);
    store(c.r1, RaceRec{});
    store(c.r2, RaceRec{});
  } else {
    const RaceRec r1 = load(c.r1);
    if (r1.when == when && tid_of(r1.info) == s->tid) {
      cur.info |= (uint64_t)mask_of(r1.info) << 2;
      store(c.r1, cur);
    } else {
      if (r1.when != 0 && !(run_of(r1.when) == s->run && tid_of(r1.info) == s->tid)) store(c.r2, r1);
      store(c.r1, cur);
    }
  }
  return {};
}

// A cell of global memory is shared by the OS threads that run blocks. Its check and update are
// one step under a lock (one of kCellLocks, by the 64 bytes of data the word lies in): unlocked,
// two blocks writing the two halves of one word at the same instant tore the record (one block's
// run id with the other's byte mask), and a block reading back its own half then met "another
// block's" write: a hazard that was not there (EmuChecks.BlocksWritingTheTwoHalvesOfOneWordAtOnce...).
constexpr size_t kCellLocks = 4096;
struct alignas(64) CellLock {
  std::atomic<bool> held{false};
  void lock() {
    while (held.exchange(true, std::memory_order_acquire))
      while (held.load(std::memory_order_relaxed)) __builtin_ia32_pause();
  }
  void unlock() { held.store(false, std::memory_order_release); }
};
CellLock g_cell_locks[kCellLocks];

// One 4-byte word: race_step, and the hazard it found (after the cell's lock is let go: a hazard
// abandons the running CUDA thread, which never returns here).
void race_word(AccessState* s, RaceCell& c, uintptr_t word, unsigned mask, unsigned kind, uintptr_t a, size_t n,
               uintptr_t pc, Space space) {
  Conflict k;
  if (space == Space::Global) {
    CellLock& l = g_cell_locks[(word >> 4) % kCellLocks];
    l.lock();
    k = race_step(s, c, mask, kind, pc, true);
    l.unlock();
  } else {
    k = race_step(s, c, mask, kind, pc, false);
  }
  if (k.type) hazard(s, k.type, k.prior, kind, a, n, pc, space);
}

// The words of [a, a + n) with the byte mask of each.
template <class F>
inline void for_words(uintptr_t a, size_t n, F f) {
  uintptr_t w = a >> 2;
  const uintptr_t last = (a + n - 1) >> 2;
  for (; w <= last; ++w) {
    const uintptr_t lo = std::max(a, w << 2), hi = std::min(a + n, (w << 2) + 4);
    const unsigned mask = ((1u << (hi - lo)) - 1u) << (lo & 3);
    f(w, mask);
  }
}

// ---- the three kinds of memory ----
void device_access(AccessState* s, uintptr_t a, size_t n, unsigned kind, uintptr_t pc) {
  if (!(a >= s->ok_lo && a + n <= s->ok_hi)) {
    DeviceRegion r;
    if (!arena_region(a, &r) || !r.live || a < r.base || a + n > r.base + r.bytes)
      access_fault(s, cudaErrorIllegalAddress, "out-of-bounds access",
                   thread_name(s, s->tid) + " " + verb(kind) + " " + std::to_string(n) + " bytes of global memory at " +
                       pc_token(pc) + ": " + describe_device_address(a, n));
    s->ok_lo = r.base;
    s->ok_hi = r.base + r.bytes;
  }
  if (!(kind & kWrite) || (kind & kRmw)) {
    if (s->spin[0] == a) {
      if ((++s->spin[1] & 0xFFFF) == 0 && s->aborted && s->aborted->load(std::memory_order_relaxed))
        access_fault(s, cudaErrorLaunchFailure, "spin-wait", "abandoned: another block faulted");
      if (s->spin[1] >= kSpinLimit)
        access_fault(s, cudaErrorLaunchFailure, "spin-wait",
                     thread_name(s, s->tid) + " read one global address " + std::to_string(kSpinLimit) +
                         " times in a row at " + pc_token(pc) + " with no other memory access (" +
                         describe_device_address(a, n) +
                         "): a wait for another block's write, which may never come (blocks of a launch need "
                         "not run concurrently, on a GPU as here)");
    } else {
      s->spin[0] = a;
      s->spin[1] = 1;
    }
  } else {
    s->spin[0] = 0;
  }
  if (s->racecheck) {
    RaceCell* cells = global_cells();
    if (!cells) return;
    const uintptr_t lo = g_arena_lo;
    for_words(a, n, [&](uintptr_t w, unsigned mask) {
      race_word(s, cells[w - (lo >> 2)], w, mask, kind, a, n, pc, Space::Global);
    });
  }
}

void shared_access(AccessState* s, uintptr_t a, size_t n, unsigned kind, uintptr_t pc) {
  s->spin[0] = 0;
  if (a < s->smem_lo || a + n > s->smem_lo + s->smem_bytes)
    access_fault(s, cudaErrorIllegalAddress, "out-of-bounds access",
                 thread_name(s, s->tid) + " " + verb(kind) + " " + std::to_string(n) + " bytes of shared memory at " +
                     pc_token(pc) + ": " + describe_shared_address(s, a, n));
  if (s->racecheck) {
    const uintptr_t base = s->smem_lo >> 2;  // smem_lo is 4-byte aligned
    for_words(a, n, [&](uintptr_t w, unsigned mask) {
      race_word(s, s->smem_cells[w - base], w, mask, kind, a, n, pc, Space::Dynamic);
    });
  }
}

bool is_builtin_variable(uintptr_t a) {
  auto in = [a](const void* v, size_t n) {
    return a - reinterpret_cast<uintptr_t>(v) < n;
  };
  return in(&threadIdx, sizeof threadIdx) || in(&blockIdx, sizeof blockIdx) || in(&blockDim, sizeof blockDim) ||
         in(&gridDim, sizeof gridDim);
}

void static_access(AccessState* s, uintptr_t a, size_t n, unsigned kind, uintptr_t pc) {
  s->spin[0] = 0;
  const bool reads = !(kind & kWrite) || (kind & kRmw);
  for_words(a, n, [&](uintptr_t w, unsigned mask) {
    StaticWord& e = s->static_words[w];
    if (e.run != s->run) {
      e.run = s->run;
      e.touched = 0;
      e.cell = RaceCell{};
    }
    const unsigned fresh = mask & ~e.touched;
    if (fresh && reads) {  // never written in this block: reads NaN bytes, as dynamic shared memory
      unsigned char* p = reinterpret_cast<unsigned char*>(w << 2);
      for (int b = 0; b < 4; ++b)
        if (fresh & (1u << b)) p[b] = kNanByte;
    }
    e.touched |= (unsigned char)mask;
    if (s->racecheck) race_word(s, e.cell, w, mask, kind, a, n, pc, Space::Static);
  });
}

__attribute__((noinline)) void on_access(AccessState* s, uintptr_t a, size_t n, unsigned kind, uintptr_t pc) {
  if (n == 0) return;
  if (a - g_arena_lo < g_arena_len) {
    device_access(s, a, n, kind, pc);
    if (s->counters) count_access(s->counters, s->tid, false, a, n, kind, pc);
  } else if (a - s->smem_region_lo < s->smem_region_len) {
    shared_access(s, a, n, kind, pc);
    if (s->counters) count_access(s->counters, s->tid, true, a, n, kind, pc);
  } else if (a - s->tls_lo < s->tls_len && !is_builtin_variable(a)) {
    static_access(s, a, n, kind, pc);
    if (s->counters) count_access(s->counters, s->tid, true, a, n, kind, pc);
  }
}

void device_fence_here(AccessState* s) {
  ++s->block_fence;
  if (s->racecheck && s->fences) {
    std::lock_guard<std::mutex> lk(s->fences->mu);
    s->fences->by_run[s->run] = s->block_fence;
  }
}

// ---- symbolizing code addresses ----
struct Module {
  std::string path;
  uintptr_t bias = 0;  // load bias: file address = pc - bias
  size_t tls_modid = 0, tls_size = 0;
};
bool find_module(const void* code, Module* m) {
  Dl_info di;
  if (!dladdr(code, &di) || !di.dli_fbase) return false;
  struct Q {
    uintptr_t fbase;
    Module* m;
    bool found;
  } q{reinterpret_cast<uintptr_t>(di.dli_fbase), m, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* d) -> int {
        Q* q = static_cast<Q*>(d);
        uintptr_t first = UINTPTR_MAX;
        const ElfW(Phdr)* tls = nullptr;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_LOAD) first = std::min<uintptr_t>(first, info->dlpi_phdr[i].p_vaddr);
          if (info->dlpi_phdr[i].p_type == PT_TLS) tls = &info->dlpi_phdr[i];
        }
        if (first == UINTPTR_MAX) return 0;
        const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
        if (info->dlpi_addr + (first & ~(page - 1)) != q->fbase) return 0;
        if (info->dlpi_name && info->dlpi_name[0]) {
          q->m->path = info->dlpi_name;
        } else {  // the program itself: its file, not the link (which a child process reads as its own)
          char buf[4096];
          const ssize_t k = readlink("/proc/self/exe", buf, sizeof buf - 1);
          q->m->path = k > 0 ? std::string(buf, (size_t)k) : std::string("/proc/self/exe");
        }
        q->m->bias = info->dlpi_addr;
        if (tls) {
          q->m->tls_modid = info->dlpi_tls_modid;
          q->m->tls_size = tls->p_memsz;
        }
        q->found = true;
        return 1;
      },
      &q);
  return q.found;
}

std::string symbolize_pc(uintptr_t pc) {
  static std::mutex mu;
  static std::map<uintptr_t, std::string> cache;
  std::lock_guard<std::mutex> lk(mu);
  auto it = cache.find(pc);
  if (it != cache.end()) return it->second;
  const uintptr_t at = pc - 1;  // the call instruction, not the one after it
  Module m;
  std::string out = hexa(pc);
  if (find_module(reinterpret_cast<void*>(at), &m)) {
    const uintptr_t off = at - m.bias;
    std::string quoted = "'";
    for (char c : m.path) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    const std::string cmd = "addr2line -C -f -i -e " + quoted + " " + hexa(off) + " 2>/dev/null";
    std::vector<std::pair<std::string, std::string>> frames;  // (function, file:line), innermost first
    if (FILE* f = popen(cmd.c_str(), "r")) {
      char line[4096];
      std::string fn;
      bool want_fn = true;
      while (std::fgets(line, sizeof line, f)) {
        std::string l(line);
        while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
        if (want_fn) {
          fn = l;
        } else {
          const size_t d = l.find(" (discriminator");
          if (d != std::string::npos) l.resize(d);
          frames.emplace_back(fn, l);
        }
        want_fn = !want_fn;
      }
      pclose(f);
    }
    for (auto& fr : frames) {  // "/a/build/../core/x.cu" -> "/a/core/x.cu"
      std::string& f = fr.second;
      for (size_t up; (up = f.find("/../")) != std::string::npos && up > 0;) {
        const size_t prev = f.rfind('/', up - 1);
        if (prev == std::string::npos || f.compare(prev, 4, "/../") == 0) break;
        f.erase(prev, up + 3 - prev);
      }
    }
    if (!frames.empty() && frames[0].second.rfind("??", 0) != 0) {
      out = frames[0].second + " (" + frames[0].first;
      for (size_t i = 1; i < frames.size(); ++i)
        out += ", inlined into " + frames[i].first + " at " + frames[i].second;
      out += ")";
    } else {
      Dl_info di;
      const char* sym = (dladdr(reinterpret_cast<void*>(at), &di) && di.dli_sname) ? di.dli_sname : nullptr;
      out = m.path + "+" + hexa(off) + (sym ? std::string(" (in ") + sym + ")" : std::string()) +
            " (no line table: compile with -g1)";
    }
  }
  cache[pc] = out;
  return out;
}

// ---- the hooks' entry points ----
inline void hook(const volatile void* p, size_t n, unsigned kind, void* ret) {
  AccessState* s = t_access;
  if (__builtin_expect(s != nullptr, 0))
    on_access(s, reinterpret_cast<uintptr_t>(p), n, kind, reinterpret_cast<uintptr_t>(ret));
}

}  // namespace

// ---- internal API ----
void set_access_state(AccessState* s) { t_access = s; }

__attribute__((noinline)) void hooked_memset(void* d, int c, size_t n) {
  hook(d, n, kWrite, __builtin_return_address(0));  // the call site, as the hooks' own
  std::memset(d, c, n);
}
__attribute__((noinline)) void hooked_memcpy(void* d, const void* s, size_t n) {
  hook(s, n, kRead, __builtin_return_address(0));
  hook(d, n, kWrite, __builtin_return_address(0));
  std::memcpy(d, s, n);
}
AccessState* access_state() { return t_access; }

bool access_hooks_present() { return g_hooks.load(std::memory_order_relaxed); }

bool racecheck_enabled() {
  int v = g_racecheck.load(std::memory_order_relaxed);
  if (v >= 0) return v != 0;
  v = 0;
  if (const char* e = std::getenv("CTXLAB_EMU_RACECHECK")) {
    if (std::strcmp(e, "1") == 0)
      v = 1;
    else if (std::strcmp(e, "0") != 0 && e[0] != '\0')
      std::fprintf(stderr, "[cuda-emu] CTXLAB_EMU_RACECHECK='%s' is not 0 or 1; the race detector stays off\n", e);
  }
  int expected = -1;
  g_racecheck.compare_exchange_strong(expected, v);
  return g_racecheck.load() != 0;
}

RaceCell* global_cells() {
  static RaceCell* cells = static_cast<RaceCell*>(race_shadow(sizeof(RaceCell)));
  return cells;
}

std::string describe_shared_address(const AccessState* s, uintptr_t a, size_t n) {
  if (!s || a - s->smem_region_lo >= s->smem_region_len) return "";
  std::ostringstream os;
  os << "address " << hexa(a) << " (" << n << " bytes) is ";
  if (a < s->smem_lo)
    os << (s->smem_lo - a) << " bytes before the start of";
  else if (a >= s->smem_lo + s->smem_bytes)
    os << (a - (s->smem_lo + s->smem_bytes)) << " bytes past the end of";
  else
    os << "at offset " << (a - s->smem_lo) << ", overrunning by " << (a + n - (s->smem_lo + s->smem_bytes))
       << " bytes,";
  os << " the launch's " << s->smem_bytes << " bytes of dynamic shared memory";
  return os.str();
}

std::string symbolize(const std::string& message) {
  std::string out;
  size_t i = 0;
  for (;;) {
    const size_t at = message.find("@pc:0x", i);
    const size_t end = at == std::string::npos ? at : message.find('@', at + 6);
    if (at == std::string::npos || end == std::string::npos) {
      out += message.substr(i);
      return out;
    }
    out += message.substr(i, at - i);
    const uintptr_t pc = (uintptr_t)std::strtoull(message.c_str() + at + 6, nullptr, 16);
    out += symbolize_pc(pc);
    i = end + 1;
  }
}

bool module_tls_block(const void* code, uintptr_t* lo, size_t* len) {
  thread_local std::map<const void*, std::pair<size_t, size_t>> cache;  // code -> (modid, size)
  auto it = cache.find(code);
  if (it == cache.end()) {
    Module m;
    if (!find_module(code, &m)) m.tls_modid = 0;
    it = cache.emplace(code, std::make_pair(m.tls_modid, m.tls_size)).first;
  }
  if (it->second.first == 0 || it->second.second == 0) return false;
  struct {
    unsigned long module, offset;
  } ti{it->second.first, 0};
  *lo = reinterpret_cast<uintptr_t>(__tls_get_addr(&ti));
  *len = it->second.second;
  return true;
}

void device_fence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
  if (AccessState* s = t_access) device_fence_here(s);
}

}  // namespace cuemu::detail

namespace cuemu {
bool access_checks() { return detail::access_hooks_present(); }
void set_racecheck(bool on) { detail::g_racecheck = on ? 1 : 0; }
bool racecheck() { return detail::racecheck_enabled(); }
}  // namespace cuemu

// ---- the instrumentation's entry points (GCC's -fsanitize=thread ABI; clang's is a superset) ----
// Not in ASan builds: no kernel is instrumented there (ASan excludes it), and GCC declares these
// names as its own built-ins.
#if !defined(CUEMU_ASAN)
using cuemu::detail::hook;
#define CUEMU_HOOK extern "C" __attribute__((visibility("hidden")))
#define CUEMU_RET __builtin_return_address(0)

CUEMU_HOOK void __tsan_init() { cuemu::detail::g_hooks.store(true); }
CUEMU_HOOK void __tsan_func_entry(void*) {}
CUEMU_HOOK void __tsan_func_exit(void*) {}
CUEMU_HOOK void __tsan_vptr_read(void**) {}
CUEMU_HOOK void __tsan_vptr_update(void**, void*) {}
CUEMU_HOOK void __tsan_ignore_thread_begin() {}
CUEMU_HOOK void __tsan_ignore_thread_end() {}

#define CUEMU_PLAIN_HOOKS(N)                                                                            \
  CUEMU_HOOK void __tsan_read##N(void* p) { hook(p, N, cuemu::detail::kRead, CUEMU_RET); }            \
  CUEMU_HOOK void __tsan_write##N(void* p) { hook(p, N, cuemu::detail::kWrite, CUEMU_RET); }          \
  CUEMU_HOOK void __tsan_unaligned_read##N(void* p) { hook(p, N, cuemu::detail::kRead, CUEMU_RET); }  \
  CUEMU_HOOK void __tsan_unaligned_write##N(void* p) { hook(p, N, cuemu::detail::kWrite, CUEMU_RET); } \
  CUEMU_HOOK void __tsan_volatile_read##N(void* p) {                                                   \
    hook(p, N, cuemu::detail::kRead | cuemu::detail::kVolatile, CUEMU_RET);                            \
  }                                                                                                     \
  CUEMU_HOOK void __tsan_volatile_write##N(void* p) {                                                  \
    hook(p, N, cuemu::detail::kWrite | cuemu::detail::kVolatile, CUEMU_RET);                           \
  }
CUEMU_PLAIN_HOOKS(1)
CUEMU_PLAIN_HOOKS(2)
CUEMU_PLAIN_HOOKS(4)
CUEMU_PLAIN_HOOKS(8)
CUEMU_PLAIN_HOOKS(16)
#undef CUEMU_PLAIN_HOOKS
CUEMU_HOOK void __tsan_read_range(void* p, unsigned long n) { hook(p, n, cuemu::detail::kRead, CUEMU_RET); }
CUEMU_HOOK void __tsan_write_range(void* p, unsigned long n) { hook(p, n, cuemu::detail::kWrite, CUEMU_RET); }
CUEMU_HOOK void* __tsan_memcpy(void* d, const void* s, unsigned long n) {
  hook(s, n, cuemu::detail::kRead, CUEMU_RET);
  hook(d, n, cuemu::detail::kWrite, CUEMU_RET);
  return std::memcpy(d, s, n);
}
CUEMU_HOOK void* __tsan_memmove(void* d, const void* s, unsigned long n) {
  hook(s, n, cuemu::detail::kRead, CUEMU_RET);
  hook(d, n, cuemu::detail::kWrite, CUEMU_RET);
  return std::memmove(d, s, n);
}
CUEMU_HOOK void* __tsan_memset(void* d, int c, unsigned long n) {
  hook(d, n, cuemu::detail::kWrite, CUEMU_RET);
  return std::memset(d, c, n);
}

// Atomics: the hook, then the operation itself, sequentially consistent whatever was asked.
#define CUEMU_A cuemu::detail::kAtomic
#define CUEMU_AW (cuemu::detail::kAtomic | cuemu::detail::kWrite)
#define CUEMU_ARMW (cuemu::detail::kAtomic | cuemu::detail::kWrite | cuemu::detail::kRmw)
#define CUEMU_ATOMIC_HOOKS(B, T)                                                                           \
  CUEMU_HOOK T __tsan_atomic##B##_load(const volatile T* a, int) {                                       \
    hook(a, sizeof(T), CUEMU_A, CUEMU_RET);                                                               \
    return __atomic_load_n(a, __ATOMIC_SEQ_CST);                                                         \
  }                                                                                                       \
  CUEMU_HOOK void __tsan_atomic##B##_store(volatile T* a, T v, int) {                                    \
    hook(a, sizeof(T), CUEMU_AW, CUEMU_RET);                                                              \
    __atomic_store_n(a, v, __ATOMIC_SEQ_CST);                                                            \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_exchange(volatile T* a, T v, int) {                                    \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_exchange_n(a, v, __ATOMIC_SEQ_CST);                                                  \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_fetch_add(volatile T* a, T v, int) {                                   \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_fetch_sub(volatile T* a, T v, int) {                                   \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_fetch_and(volatile T* a, T v, int) {                                   \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_fetch_and(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_fetch_or(volatile T* a, T v, int) {                                    \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_fetch_or(a, v, __ATOMIC_SEQ_CST);                                                    \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_fetch_xor(volatile T* a, T v, int) {                                   \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_fetch_xor(a, v, __ATOMIC_SEQ_CST);                                                   \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_fetch_nand(volatile T* a, T v, int) {                                  \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_fetch_nand(a, v, __ATOMIC_SEQ_CST);                                                  \
  }                                                                                                       \
  CUEMU_HOOK int __tsan_atomic##B##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {        \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);              \
  }                                                                                                       \
  CUEMU_HOOK int __tsan_atomic##B##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {          \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    return __atomic_compare_exchange_n(a, c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);              \
  }                                                                                                       \
  CUEMU_HOOK T __tsan_atomic##B##_compare_exchange_val(volatile T* a, T c, T v, int, int) {              \
    hook(a, sizeof(T), CUEMU_ARMW, CUEMU_RET);                                                            \
    __atomic_compare_exchange_n(a, &c, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);                    \
    return c;                                                                                             \
  }
CUEMU_ATOMIC_HOOKS(8, uint8_t)
CUEMU_ATOMIC_HOOKS(16, uint16_t)
CUEMU_ATOMIC_HOOKS(32, uint32_t)
CUEMU_ATOMIC_HOOKS(64, uint64_t)
#undef CUEMU_ATOMIC_HOOKS
CUEMU_HOOK void __tsan_atomic_thread_fence(int) { cuemu::detail::device_fence(); }
CUEMU_HOOK void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
#endif  // !CUEMU_ASAN

#if defined(CUEMU_ASAN)
// ASan's report of a bad access (the hooks are not compiled in with ASan) gets a line naming the
// device allocation or the dynamic shared memory it hit.
extern "C" void __asan_on_error() {
  const uintptr_t a = reinterpret_cast<uintptr_t>(__asan_get_report_address());
  const size_t n = __asan_get_report_access_size();
  std::string d;
  if (a - cuemu::detail::g_arena_lo < cuemu::detail::g_arena_len)
    d = cuemu::detail::describe_device_address(a, n);
  else
    d = cuemu::detail::describe_shared_address(cuemu::detail::access_state(), a, n);
  if (!d.empty())
    std::fprintf(stderr, "[cuda-emu] out-of-bounds %s of device memory: %s\n",
                 __asan_get_report_access_type() ? "write" : "read", d.c_str());
}
#endif
