// core/cuda/emu/emu_internal.h — state shared between the emulator's translation units (not for
// kernel code): the device-allocation registry, launch-time lookups, the schedule setting.
#pragma once
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/cuda/emu/emu_counters.h"
#include "core/cuda/emu/emu_runtime.h"

// Streams and events (created by runtime.cpp; graph.cpp reads and sets their capture fields).
struct CUstream_st {
  unsigned flags;
  uint64_t capture = 0;  // the capture this stream belongs to (graph.cpp; 0: none). Under its mutex.
};
struct CUevent_st {
  unsigned flags;
  bool recorded;
  std::chrono::steady_clock::time_point when;
  // where its latest cudaEventRecord went when that was recorded into a capture (capture 0: not)
  uint64_t capture = 0;
  cudaStream_t capture_stream = nullptr;
  size_t capture_seq = 0;  // nodes in the capture at that point
};

namespace cuemu::detail {

constexpr size_t kAllocAlign = 256;         // cudaMalloc's alignment (the arena gives 64 KiB)
constexpr size_t kRedzoneBytes = 256;       // slack bytes after each allocation checked after every kernel
constexpr size_t kGuardBytes = 64 * 1024;   // PROT_NONE guard before and (at least) after each allocation
constexpr unsigned char kRedzoneByte = 0xA5;
constexpr unsigned char kNanByte = 0xFF;    // 0xFFFFFFFF is a float NaN, 0xFF..FF a double NaN
constexpr size_t kDefaultDynamicShared = 48 * 1024;
constexpr size_t kMaxDynamicShared = 227 * 1024;  // H100's opt-in limit per block

// ---- the device arena (arena.cpp) ----
extern uintptr_t g_arena_lo;  // [g_arena_lo, g_arena_lo + g_arena_len): device memory's address range
extern size_t g_arena_len;    // 0 before the first cudaMalloc
struct DeviceRegion {
  uintptr_t base;   // the allocation's first byte
  size_t bytes;     // its size
  uint64_t serial;  // cudaMalloc's count (#N in messages)
  bool live;        // false: freed (its region not reused yet)
};
// A new region of the arena for `bytes` (> 0): NaN-filled data, guards; nullptr when full.
void* arena_alloc(size_t bytes, uint64_t serial);
void arena_free(void* base);
// Without a lock: the region (guards included) that holds address a, live or freed.
bool arena_region(uintptr_t a, DeviceRegion* out);
// "address 0x.. (4 bytes) is 4 bytes past the end of allocation #3 (400 bytes at 0x..)".
std::string describe_device_address(uintptr_t a, size_t n);
// The race detector's shadow of the arena: one cell_bytes cell per 4-byte word, mapped on first
// call (nullptr if the address space cannot be had).
void* race_shadow(size_t cell_bytes);

// After a kernel: checks every allocation's guard bytes; reports (and repairs) overwritten ones.
// Returns "" or the report.
std::string check_redzones(const char* kernel_name);
// The dynamic shared memory a kernel may use (48 KiB or what cudaFuncSetAttribute raised it to).
size_t max_dynamic_shared(const void* kernel);
bool valid_stream(cudaStream_t s);
void count_launch();
void count_captured_node();
void count_graph_launch();
uint64_t schedule_seed();
bool quiet();  // CTXLAB_EMU_QUIET=1: faults are recorded but not printed
void set_last_error(cudaError_t e);

// ---- stream capture (graph.cpp; README "Stream capture and graphs") ----
// Every call below is made only while capture_active(): no cost when nothing captures.
extern std::atomic<int> g_active_captures;
inline bool capture_active() { return g_active_captures.load(std::memory_order_relaxed) != 0; }
// A recorded operation, run by cudaGraphLaunch on `stream`: cudaSuccess, or the error that stops the replay.
using GraphWork = std::function<cudaError_t(cudaStream_t stream)>;
enum class Queued { Run, Recorded, Refused };
// Where a recorded operation went (cudaEventRecord keeps it: joins, captured-event checks).
struct CaptureMark {
  uint64_t capture = 0;
  size_t seq = 0;  // nodes in the capture after this one
};
// For a call `fn` that queues work on `stream`: Run (no capture concerns it: do the work now),
// Recorded (`work` appended to the stream's capture; *mark filled), or Refused (the legacy stream
// while a blocking stream captures, or a capture invalidated earlier: reported, *err set).
Queued capture_queue(cudaStream_t stream, const char* fn, GraphWork work, cudaError_t* err,
                     CaptureMark* mark = nullptr);
// capture_queue for a call that returns cudaError_t: true when the capture took the call (recorded:
// *ret = cudaSuccess; refused: *ret = the error), false when the call must run now.
inline bool capture_takes(cudaStream_t stream, const char* fn, GraphWork work, cudaError_t* ret,
                          CaptureMark* mark = nullptr) {
  *ret = cudaSuccess;
  return capture_queue(stream, fn, std::move(work), ret, mark) != Queued::Run;
}
// True when `stream` belongs to a capture (active or invalidated).
bool stream_capturing(cudaStream_t stream);
// Invalidates the capture of `stream` (if any) because of `why`; refuses the call with `code`.
cudaError_t capture_refuse(cudaStream_t stream, cudaError_t code, const std::string& why);
// Invalidates the capture of `stream` (if any) without refusing anything (a sticky fault did).
void capture_invalidate(cudaStream_t stream, const std::string& why);
// cudaMalloc, cudaFree, cudaMallocHost, cudaFreeHost: cudaSuccess, or the refusal by CUDA's
// capture-mode rules (reported; the captures that forbid it invalidated).
cudaError_t capture_unsafe_call(const char* fn);
// A synchronous copy or memset (legacy stream): the unsafe-call rule, then the legacy stream's.
cudaError_t capture_sync_call(const char* fn);
// cudaStreamSynchronize(stream), cudaDeviceSynchronize (stream == nullptr, all = true),
// cudaEventSynchronize / cudaEventQuery of an event recorded into capture `event_capture`.
cudaError_t capture_sync_stream(cudaStream_t stream, const char* fn);
cudaError_t capture_sync_device(const char* fn);
cudaError_t capture_sync_event(uint64_t event_capture, const char* fn);
// cudaStreamWaitEvent(stream, e, flags) for an event whose latest record was `recorded`, into
// `mark.capture` (0: not captured) on `event_stream`: joins, isolation, merges.
cudaError_t capture_wait_event(cudaStream_t stream, bool recorded, const CaptureMark& mark, cudaStream_t event_stream,
                               unsigned flags);
// cudaStreamDestroy of a stream that captures: refused (cudaErrorIllegalState), capture invalidated.
cudaError_t capture_stream_destroy(cudaStream_t stream);

// ---- access checks (access.cpp): the hooks that instrumented kernel code calls ----
// Kernel sources compiled against the emulator with GCC's ThreadSanitizer instrumentation
// (-fsanitize=thread, but the emulator's own __tsan_* functions instead of libtsan: CMakeLists.txt)
// call a hook before every load and store. Outside a kernel (t_access null) the hook returns at once.

// The race detector's record of one access to a 4-byte word.
struct RaceRec {
  uint64_t when = 0;  // (block run id << 24) | barrier generation; 0: none
  uint64_t info = 0;  // (pc << 16) | (thread << 6) | (byte mask << 2) | (atomic << 1) | write
  uint64_t cf = 0;    // (__threadfence() calls of its block before it << 32) | the thread's own warp clock
};
struct RaceCell {
  RaceRec w, r1, r2;  // the last write; the last two readers (of different threads) since
};
// A word of static __shared__ memory: its first touch in a block NaN-fills the bytes not written yet.
struct StaticWord {
  uint64_t run = 0;         // the block that touched it last
  unsigned char touched = 0;  // bytes written or poisoned in that block
  RaceCell cell;
};
// __threadfence() counts per block of the running launch (cross-block ordering, racecheck).
struct FenceTable {
  std::mutex mu;
  std::unordered_map<uint64_t, uint32_t> by_run;
};

// The kind of an access as the hooks pass it on (bits).
enum AccessKind : unsigned { kRead = 0, kWrite = 1, kAtomic = 2, kRmw = 4, kVolatile = 8 };

// ---- counters (counters.cpp; emu_counters.h is the public side) ----
struct CounterLaunch;  // one counted launch's totals
struct CounterThread;  // what one OS thread counts while it runs blocks of a counted launch
// A launch about to run: its record, or nullptr when the counters are off.
CounterLaunch* counters_launch_begin(const char* kernel, const char* file, int line, dim3 grid, dim3 block,
                                     size_t smem_bytes);
void counters_launch_end(CounterLaunch* l);  // files the record
// This OS thread's counting state for l.
CounterThread* counters_thread_begin(CounterLaunch* l);
void counters_block_begin(CounterThread* c);
void counters_block_end(CounterThread* c);   // groups the block's accesses into warp requests
void counters_thread_end(CounterThread* c);  // adds this OS thread's totals to the launch's
// From the hooks: one access of global (shared = false) or shared memory by CUDA thread tid.
void count_access(CounterThread* c, uint32_t tid, bool shared, uintptr_t a, size_t n, unsigned kind, uintptr_t pc);
// A cuBLAS / cuBLASLt call's record (FLOPs, operand bytes), filed when the counters are on.
void counters_library_call(const LaunchCounters& rec);

// What the hooks see: one per OS thread that runs blocks (the scheduler's Executor fills it).
struct AccessState {
  // the launch
  const void* spec = nullptr;  // LaunchSpec
  bool racecheck = false;
  uint64_t run_base = 0;  // run ids of this launch's blocks: run_base + linear block index
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  FenceTable* fences = nullptr;
  const std::atomic<bool>* aborted = nullptr;  // another block faulted: a spinning thread gives up
  // dynamic shared memory [smem_lo, smem_lo + smem_bytes) inside [region_lo, region_lo + region_len)
  uintptr_t smem_lo = 0;
  size_t smem_bytes = 0;
  uintptr_t smem_region_lo = 0;
  size_t smem_region_len = 0;
  RaceCell* smem_cells = nullptr;
  // static __shared__ memory lives in this OS thread's TLS block of the kernel's module
  uintptr_t tls_lo = 0;
  size_t tls_len = 0;
  std::unordered_map<uintptr_t, StaticWord> static_words;  // by address / 4
  // the block
  uint64_t run = 0;
  uint32_t gen = 0;          // barriers completed
  uint32_t block_fence = 0;  // __threadfence() calls so far
  // the CUDA thread running
  uint32_t tid = 0;           // linear thread index
  uint32_t* vc = nullptr;     // its warp clocks (32 lanes), racecheck only
  uint64_t* spin = nullptr;   // [address, count] of its consecutive reads of one global address
  // one-entry cache: a live allocation already checked
  uintptr_t ok_lo = 0, ok_hi = 0;
  void* executor = nullptr;
  CounterThread* counters = nullptr;  // null: the counters are off
};
// The state the hooks read on this OS thread (null outside run_blocks): set by the scheduler.
void set_access_state(AccessState* s);
AccessState* access_state();
// True once instrumented code has been loaded (its constructors call __tsan_init).
bool access_hooks_present();
bool racecheck_enabled();
// The racecheck shadow of global memory (nullptr: unavailable).
RaceCell* global_cells();
// From a hook, inside a kernel: records the fault against the running block and abandons it (the
// calling CUDA thread never resumes). scheduler.cpp.
[[noreturn]] void access_fault(AccessState* s, cudaError_t code, const std::string& kind, const std::string& what);
// Replaces every "@pc:0x...@" in a message by the source location of that code address
// (addr2line on the module, or module+offset).
std::string symbolize(const std::string& message);
// For the TLS range: this OS thread's TLS block of the module holding `code` ([*lo, *lo + *len)).
bool module_tls_block(const void* code, uintptr_t* lo, size_t* len);
// Describes an address in the running block's dynamic shared memory region ("" if it is not).
std::string describe_shared_address(const AccessState* s, uintptr_t a, size_t n);

}  // namespace cuemu::detail
