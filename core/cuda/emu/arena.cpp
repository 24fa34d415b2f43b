// core/cuda/emu/arena.cpp — where device memory lives. One reserved range of address space (the
// arena, PROT_NONE until used); every cudaMalloc gets its own region in it:
//
//   [64 KiB guard, PROT_NONE][data: `bytes`, then slack to the page end][>= 64 KiB guard, PROT_NONE]
//
// so an access just before or after an allocation, or up to 64 KiB away, lands in that allocation's
// own guard and is reported naming it (the access hooks, access.cpp; ASan, which sees the slack and
// the guards poisoned, in sanitizer builds; the hardware's PROT_NONE fault in any build). Regions
// are placed next-fit: freed address space is reused only after the arena's whole range has been
// gone through once, so a use after free finds the freed allocation's region, not a new one.
// A table with one entry per 64 KiB granule names the region a granule belongs to: the hooks look
// an address up without a lock. The race detector's shadow (one cell per 4-byte word of the arena)
// is mapped on first use, with the same layout.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>

#include "core/cuda/emu/emu_internal.h"

#include "core/cuda/emu/emu_asan.h"  // CUEMU_ASAN

namespace cuemu::detail {

uintptr_t g_arena_lo = 0;
size_t g_arena_len = 0;  // 0 until the arena is mapped: then no address is device memory

namespace {

constexpr size_t kArenaBytes = size_t(128) << 30;  // address space only (the emulated device has 80 GiB)
constexpr size_t kGranuleShift = 16;
constexpr size_t kGranule = size_t(1) << kGranuleShift;  // = kGuardBytes
constexpr size_t kGranules = kArenaBytes >> kGranuleShift;
static_assert(kGranule == kGuardBytes, "one guard is one granule");

struct Head {  // at a region's first granule
  uintptr_t base;  // the allocation's first byte (region start + one guard)
  size_t bytes;    // what cudaMalloc was asked for
  size_t region;   // the region's length (guards included)
  uint64_t serial;
  uint32_t live;
};

struct Arena {
  std::mutex mu;
  bool mapped = false;
  bool failed = false;
  // 1 + the index of the granule where the region holding this granule starts; 0: never used
  uint32_t* start = nullptr;
  Head* head = nullptr;  // indexed by granule (valid at region starts)
  std::map<size_t, size_t> free;  // free runs of granules: first granule -> count
  size_t cursor = 0;              // next-fit: search from here
  void* shadow = nullptr;         // the race detector's shadow (race_shadow())
  size_t shadow_cell = 0;
};
Arena& arena() {
  static Arena* a = new Arena();  // never destroyed: kernels may run during static teardown
  return *a;
}

void* map_or_null(size_t bytes, int prot) {
  void* p = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

#if !defined(CUEMU_ASAN)
// A hardware fault in a guard (an access that neither the hooks nor ASan saw: a kernel compiled
// without the hooks, or host code) gets a line naming the allocation before the usual crash.
struct sigaction g_prev_segv;
void on_segv(int sig, siginfo_t* si, void* uc) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  std::string d;
  if (a - g_arena_lo < g_arena_len)
    d = describe_device_address(a, 1);
  else
    d = describe_shared_address(access_state(), a, 1);
  if (!d.empty()) {
    const std::string m = "[cuda-emu] memory fault on device memory (an access the access hooks did not see): " + d + "\n";
    if (write(2, m.data(), m.size()) < 0) {
    }
  }
  // Let the previous handler (or the default action) have the fault: it happens again on return.
  sigaction(SIGSEGV, &g_prev_segv, nullptr);
  (void)sig;
  (void)uc;
}
#endif

bool ensure_mapped(Arena& A) {  // caller holds mu
  if (A.mapped) return true;
  if (A.failed) return false;
  void* lo = map_or_null(kArenaBytes, PROT_NONE);
  A.start = static_cast<uint32_t*>(map_or_null(kGranules * sizeof(uint32_t), PROT_READ | PROT_WRITE));
  A.head = static_cast<Head*>(map_or_null(kGranules * sizeof(Head), PROT_READ | PROT_WRITE));
  if (!lo || !A.start || !A.head) {
    std::fprintf(stderr, "[cuda-emu] cannot reserve the %zu-GiB device arena: %s\n", kArenaBytes >> 30,
                 std::strerror(errno));
    A.failed = true;
    return false;
  }
  // Granule 0 stays unused: no region starts at the arena's first byte, and the table's 0 means none.
  A.free[1] = kGranules - 1;
  A.cursor = 1;
  __atomic_store_n(&g_arena_lo, reinterpret_cast<uintptr_t>(lo), __ATOMIC_RELEASE);
  __atomic_store_n(&g_arena_len, kArenaBytes, __ATOMIC_RELEASE);
  A.mapped = true;
#if !defined(CUEMU_ASAN)
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_prev_segv);
#endif
  return true;
}

// First free run of at least n granules at or after the cursor, wrapping once. Returns its first
// granule (0: none) and takes it from the free map.
size_t take_run(Arena& A, size_t n) {
  auto carve = [&](std::map<size_t, size_t>::iterator it, size_t from) {
    const size_t first = it->first, count = it->second;
    A.free.erase(it);
    if (from > first) A.free[first] = from - first;
    if (from + n < first + count) A.free[from + n] = first + count - (from + n);
    A.cursor = from + n;
    return from;
  };
  auto it = A.free.upper_bound(A.cursor);
  if (it != A.free.begin() && std::prev(it)->first + std::prev(it)->second > A.cursor) --it;
  for (; it != A.free.end(); ++it) {
    const size_t from = std::max(it->first, A.cursor);
    if (it->first + it->second >= from + n) return carve(it, from);
  }
  for (it = A.free.begin(); it != A.free.end(); ++it)  // wrapped around: anything that fits
    if (it->second >= n) return carve(it, it->first);
  return 0;
}

void give_run(Arena& A, size_t first, size_t n) {
  auto next = A.free.lower_bound(first);
  if (next != A.free.end() && next->first == first + n) {
    n += next->second;
    A.free.erase(next);
  }
  auto prev = A.free.lower_bound(first);
  if (prev != A.free.begin()) {
    --prev;
    if (prev->first + prev->second == first) {
      prev->second += n;
      return;
    }
  }
  A.free[first] = n;
}

size_t page_size() {
  static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
  return p;
}

std::string hexp(uintptr_t p) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%zx", (size_t)p);
  return b;
}

}  // namespace

void* arena_alloc(size_t bytes, uint64_t serial) {
  Arena& A = arena();
  std::lock_guard<std::mutex> lk(A.mu);
  if (bytes == 0 || bytes > kArenaBytes / 2 || !ensure_mapped(A)) return nullptr;
  const size_t page = page_size();
  const size_t data_pages = (bytes + page - 1) / page * page;
  const size_t n = 1 + (data_pages + kGranule - 1) / kGranule + 1;  // guard, data, guard
  const size_t g = take_run(A, n);
  if (g == 0) return nullptr;
  char* region = reinterpret_cast<char*>(g_arena_lo) + g * kGranule;
  char* base = region + kGranule;
  if (mprotect(base, data_pages, PROT_READ | PROT_WRITE) != 0) {
    give_run(A, g, n);
    return nullptr;
  }
  std::memset(base, kNanByte, bytes);
  std::memset(base + bytes, kRedzoneByte, data_pages - bytes);
#if defined(CUEMU_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(base, bytes);
  ASAN_POISON_MEMORY_REGION(region, kGranule);
  ASAN_POISON_MEMORY_REGION(base + bytes, n * kGranule - kGranule - bytes);
#endif
  A.head[g] = Head{reinterpret_cast<uintptr_t>(base), bytes, n * kGranule, serial, 1};
  for (size_t i = 0; i < n; ++i) __atomic_store_n(&A.start[g + i], (uint32_t)(g + 1), __ATOMIC_RELEASE);
  return base;
}

void arena_free(void* p) {
  Arena& A = arena();
  std::lock_guard<std::mutex> lk(A.mu);
  if (!A.mapped) return;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const size_t g = (a - g_arena_lo) / kGranule - 1;
  Head& h = A.head[g];
  const size_t page = page_size();
  const size_t data_pages = (h.bytes + page - 1) / page * page;
#if defined(CUEMU_ASAN)
  ASAN_POISON_MEMORY_REGION(p, h.bytes);  // a use after free is ASan's use-after-poison
#endif
  madvise(p, data_pages, MADV_DONTNEED);
  mprotect(p, data_pages, PROT_NONE);
  if (A.shadow) {  // the race detector's cells of the data words
    char* s = static_cast<char*>(A.shadow) + (a - g_arena_lo) / 4 * A.shadow_cell;
    const uintptr_t s_lo = reinterpret_cast<uintptr_t>(s) / page * page;
    const uintptr_t s_hi = (reinterpret_cast<uintptr_t>(s) + data_pages / 4 * A.shadow_cell) / page * page;
    if (s_hi > s_lo) madvise(reinterpret_cast<void*>(s_lo), s_hi - s_lo, MADV_DONTNEED);
  }
  __atomic_store_n(&h.live, 0u, __ATOMIC_RELEASE);
  // The table keeps naming the freed region until its granules are handed out again.
  give_run(A, g, h.region / kGranule);
}

bool arena_region(uintptr_t a, DeviceRegion* out) {
  const uintptr_t lo = __atomic_load_n(&g_arena_lo, __ATOMIC_ACQUIRE);
  if (a - lo >= __atomic_load_n(&g_arena_len, __ATOMIC_ACQUIRE)) return false;
  Arena& A = arena();
  const uint32_t s = __atomic_load_n(&A.start[(a - lo) >> kGranuleShift], __ATOMIC_ACQUIRE);
  if (s == 0) return false;
  const Head& h = A.head[s - 1];
  out->base = h.base;
  out->bytes = h.bytes;
  out->serial = h.serial;
  out->live = __atomic_load_n(&h.live, __ATOMIC_ACQUIRE) != 0;
  return true;
}

std::string describe_device_address(uintptr_t a, size_t n) {
  DeviceRegion r;
  std::ostringstream os;
  if (!arena_region(a, &r)) {
    os << "address " << hexp(a) << " is inside no allocation's region (device memory that was never allocated)";
    return os.str();
  }
  os << "address " << hexp(a) << " (" << n << " bytes) is ";
  const std::string what = std::string(r.live ? "" : "freed ") + "allocation #" + std::to_string(r.serial) + " (" +
                           std::to_string(r.bytes) + " bytes at " + hexp(r.base) + ")";
  if (a < r.base)
    os << (r.base - a) << " bytes before the start of " << what;
  else if (a + n > r.base + r.bytes && a >= r.base + r.bytes)
    os << (a - (r.base + r.bytes)) << " bytes past the end of " << what;
  else if (a + n > r.base + r.bytes)
    os << "at offset " << (a - r.base) << " of " << what << ", overrunning its end by "
       << (a + n - (r.base + r.bytes)) << " bytes";
  else
    os << "at offset " << (a - r.base) << " of " << what;
  return os.str();
}

void* race_shadow(size_t cell_bytes) {
  Arena& A = arena();
  std::lock_guard<std::mutex> lk(A.mu);
  if (!ensure_mapped(A)) return nullptr;
  if (A.shadow) return A.shadow_cell == cell_bytes ? A.shadow : nullptr;
  A.shadow = map_or_null(kArenaBytes / 4 * cell_bytes, PROT_READ | PROT_WRITE);
  if (!A.shadow) {
    std::fprintf(stderr, "[cuda-emu] cannot map the race detector's shadow (%zu GiB of address space): %s\n",
                 (kArenaBytes / 4 * cell_bytes) >> 30, std::strerror(errno));
    return nullptr;
  }
  A.shadow_cell = cell_bytes;
  return A.shadow;
}

}  // namespace cuemu::detail
