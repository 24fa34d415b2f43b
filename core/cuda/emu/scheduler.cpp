// core/cuda/emu/scheduler.cpp — runs a launch: validates the configuration, spreads the blocks
// over a small pool of OS threads, and runs each block's CUDA threads as fibers on one OS thread.
// A fiber runs until it reaches a barrier or a warp operation, or exits; a fiber whose CUDA thread
// returned goes on with the next never-started thread of the same round (so a kernel without
// barriers costs one fiber start per block and round, not one per thread). When no fiber can run,
// pending warp operations whose mask lanes have all arrived complete; when only barrier waiters
// remain, the barrier releases (all at one call site) or a divergent barrier is reported; anything
// else is a warp mask naming a lane that exited or waits elsewhere: a deadlock, reported with each
// waiter's call site. A barrier that some lanes of a warp reach while other lanes of that warp
// returned since the previous barrier is an error (a barrier in divergent code; whole warps may
// return). Faults unwind the faulting fiber (or, from the access hooks, abandon it) and abandon the
// block. Runnable threads are taken in the schedule order (forward, reverse or a seeded shuffle) so
// that a missing barrier shows. The executor also keeps what the access hooks need (access.cpp):
// the block's run id and barrier generation, the running thread, the guarded dynamic shared
// memory, for the race detector the warp clocks that __syncwarp() advances, and for the counters
// (counters.cpp) the start and end of each block.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/emu/emu_device.h"
#include "core/cuda/emu/emu_internal.h"
#include "core/cuda/emu/emu_launch.h"
#include "core/cuda/emu/emu_mma.h"  // MmaLane, mma_bf16_m16n8k16
#include "core/cuda/emu/fiber.h"

#include "core/cuda/emu/emu_asan.h"  // CUEMU_ASAN

namespace cuemu::detail {
namespace {

struct FiberAbort {};  // unwinds a CUDA thread that faulted (never escapes thread_main)

enum class TState : unsigned char { NotStarted, Ready, AtBarrier, AtWarp, Exited };

struct CudaThread {
  Fiber* fiber = nullptr;  // the fiber running this thread (null before it starts and after it ends)
  uint3 tid;
  int linear = 0;
  TState state = TState::NotStarted;
  const char* file = "";  // call site of the barrier / warp op it waits at
  int line = 0;
  // barrier
  int barrier_kind = -1;  // -1 plain __syncthreads, 0 count, 1 and, 2 or
  int pred = 0;
  // warp op
  WarpOp op = WarpOp::Sync;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0;
  int width = 32;
  uint64_t result = 0;
};

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::Sync: return "__syncwarp";
    case WarpOp::Shfl: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::Mma: return "mma.sync";
  }
  return "?";
}
const char* barrier_name(int kind) {
  switch (kind) {
    case 0: return "__syncthreads_count";
    case 1: return "__syncthreads_and";
    case 2: return "__syncthreads_or";
  }
  return "__syncthreads";
}
bool same_site(const char* f1, int l1, const char* f2, int l2) {
  return l1 == l2 && (f1 == f2 || std::strcmp(f1, f2) == 0);
}
std::string hex32(unsigned m) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", m);
  return b;
}

// One launch, shared by the OS threads that run its blocks.
struct LaunchRun {
  const LaunchSpec* spec = nullptr;
  unsigned nthreads = 0;
  uint64_t nblocks = 0;
  Schedule schedule = Schedule::Forward;
  uint64_t seed = 0;
  uint64_t run_base = 0;  // run ids of its blocks: run_base + linear block index (access checks)
  bool racecheck = false;
  CounterLaunch* counters = nullptr;  // null: the counters are off
  FenceTable fences;
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> abort{false};
  std::mutex mu;
  std::string fault;  // the first fault (empty: none)
  cudaError_t fault_code = cudaErrorLaunchFailure;
  void record_fault(cudaError_t code, const std::string& m) {
    std::lock_guard<std::mutex> lk(mu);
    if (fault.empty()) {
      fault = m;
      fault_code = code;
    }
    abort = true;
  }
};

// Run ids: every block of every launch gets its own (the race detector's records name them).
std::atomic<uint64_t> g_next_run{1};

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Runs blocks on the OS thread it belongs to (one per OS thread, thread_local).
class Executor {
 public:
  ~Executor() { free_smem(); }
  void run_blocks(LaunchRun& run);

  // ---- called from inside a CUDA thread (fiber) ----
  CudaThread* current() const { return current_; }
  void wait_at_barrier(int kind, int pred, const char* file, int line);
  uint64_t wait_at_warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);
  // A fault found by the running CUDA thread itself: records it and unwinds the thread's stack
  // (throws FiberAbort, caught in thread_main) so that nothing it holds leaks; the block is abandoned.
  [[noreturn]] void fault_here(const char* kind, const std::string& what, const char* file, int line);
  // A fault found by an access hook: records it and abandons the calling CUDA thread (never
  // resumed; no unwinding through the instrumented kernel code).
  [[noreturn]] void abandon_here(cudaError_t code, const std::string& kind, const std::string& what);
  unsigned char* smem() const { return smem_; }
  size_t smem_bytes() const { return smem_bytes_; }
  unsigned live_lanes_mask(int warp) const;
  unsigned active_mask(int warp) const { return warp_active_[warp]; }

 private:
  void run_block(uint64_t b);
  void run_round();
  void switch_out(CudaThread* t);
  Fiber* take_fiber();
  void drop_fiber(Fiber* f, bool abandoned);
  void resolve_warps();
  void complete_warp_group(int warp, unsigned mask);
  void resolve_barrier_or_fault();
  void order(std::vector<int>& v);
  void abandon_block();
  std::string where() const;
  std::string describe_wait(const CudaThread& t) const;
  std::string summarize(const std::vector<int>& ids) const;
  void block_fault(const std::string& kind, const std::string& detail, cudaError_t code = cudaErrorLaunchFailure);
  void free_smem();
  void set_current(CudaThread* t);
  void note_exit(const CudaThread& t) { exited_since_barrier_[t.linear / 32] |= 1u << (t.linear % 32); }
  void sync_clocks(int warp, unsigned mask);
  static void thread_main(void* arg);

  FiberHost host_;
  StackPool stacks_;
  std::deque<Fiber> fibers_;         // every fiber object this OS thread made (stable addresses)
  std::vector<Fiber*> idle_fibers_;  // of those, the ones not running a CUDA thread
  std::vector<CudaThread> threads_;
  std::vector<int> ready_;
  std::vector<int> batch_;  // the round being run, in schedule order
  size_t batch_pos_ = 0;    // next entry of batch_ to run
  std::vector<int> scratch_barrier_, scratch_warp_;  // resolve_barrier_or_fault's lists
  std::vector<int> warp_waiting_;  // lanes of each warp waiting at a warp op
  std::vector<unsigned> warp_active_;  // __activemask(): lanes alive when the warp last synchronised
  LaunchRun* run_ = nullptr;
  CudaThread* current_ = nullptr;
  uint3 block_{0, 0, 0};
  uint64_t block_linear_ = 0;
  uint64_t round_ = 0;
  unsigned alive_ = 0;
  bool faulted_ = false;
  unsigned char* smem_ = nullptr;  // dynamic shared memory: inside smem_region_, between guards
  size_t smem_bytes_ = 0;
  unsigned char* smem_region_ = nullptr;
  size_t smem_region_bytes_ = 0;
  std::vector<unsigned> exited_since_barrier_;  // per warp: lanes that returned since the last barrier
  std::vector<unsigned> scratch_arrived_;
  // access checks (access.cpp)
  AccessState acc_;
  std::vector<uint32_t> vc_;      // racecheck: each thread's warp clocks (32 per thread)
  std::vector<uint64_t> spin_;    // each thread's [address, count] of consecutive reads
  std::vector<RaceCell> smem_cells_;
};

thread_local Executor t_executor;
// The executor running blocks on this OS thread (a plain pointer: no TLS init guard on the hot path).
thread_local Executor* t_running = nullptr;
// The executor whose CUDA thread is running here, or null outside a kernel.
inline Executor* in_kernel() { return (t_running && t_running->current()) ? t_running : nullptr; }

void Executor::free_smem() {  // at exit of the OS thread
  if (smem_region_) munmap(smem_region_, smem_region_bytes_);
  smem_region_ = nullptr;
  smem_ = nullptr;
  smem_bytes_ = 0;
}

void Executor::set_current(CudaThread* t) {
  current_ = t;
  ::threadIdx = t->tid;
  acc_.tid = (uint32_t)t->linear;
  if (acc_.racecheck) acc_.vc = vc_.data() + (size_t)t->linear * 32;
  acc_.spin = spin_.data() + (size_t)t->linear * 2;
}

void Executor::run_blocks(LaunchRun& run) {
  run_ = &run;
  t_running = this;
  const LaunchSpec& s = *run.spec;
  if (threads_.size() < run.nthreads) threads_.resize(run.nthreads);
  warp_waiting_.assign((run.nthreads + 31) / 32, 0);
  warp_active_.assign((run.nthreads + 31) / 32, 0);
  exited_since_barrier_.assign((run.nthreads + 31) / 32, 0);
  // Dynamic shared memory: one mapping per OS thread, the largest a launch may ask for between two
  // 64 KiB PROT_NONE guards. The bytes past the launch's size are out of bounds: the access hooks
  // report an access there, and ASan (they are poisoned) in sanitizer builds.
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t smem_cap = (kMaxDynamicShared + page - 1) / page * page;
  if (!smem_region_) {
    smem_region_bytes_ = kGuardBytes + smem_cap + kGuardBytes;
    void* m = mmap(nullptr, smem_region_bytes_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED || mprotect(static_cast<char*>(m) + kGuardBytes, smem_cap, PROT_READ | PROT_WRITE) != 0) {
      std::fprintf(stderr, "[cuda-emu] cannot map the shared memory region\n");
      std::abort();
    }
    smem_region_ = static_cast<unsigned char*>(m);
    smem_ = smem_region_ + kGuardBytes;
  }
  smem_bytes_ = s.smem_bytes;
#if defined(CUEMU_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(smem_, smem_bytes_);
  ASAN_POISON_MEMORY_REGION(smem_ + smem_bytes_, smem_cap - smem_bytes_);
#endif
  // What the access hooks need for this launch.
  acc_.spec = &s;
  acc_.racecheck = run.racecheck;
  acc_.run_base = run.run_base;
  acc_.grid[0] = s.grid.x, acc_.grid[1] = s.grid.y, acc_.grid[2] = s.grid.z;
  acc_.block[0] = s.block.x, acc_.block[1] = s.block.y, acc_.block[2] = s.block.z;
  acc_.fences = &run.fences;
  acc_.aborted = &run.abort;
  acc_.smem_lo = reinterpret_cast<uintptr_t>(smem_);
  acc_.smem_bytes = smem_bytes_;
  acc_.smem_region_lo = reinterpret_cast<uintptr_t>(smem_region_);
  acc_.smem_region_len = smem_region_bytes_;
  acc_.tls_lo = 0;
  acc_.tls_len = 0;
  if (access_hooks_present()) module_tls_block(s.kernel_id, &acc_.tls_lo, &acc_.tls_len);
  acc_.ok_lo = acc_.ok_hi = 0;
  acc_.executor = this;
  spin_.assign((size_t)run.nthreads * 2, 0);
  acc_.vc = nullptr;
  if (run.racecheck) {
    vc_.assign((size_t)run.nthreads * 32, 0);
    smem_cells_.resize((smem_bytes_ + 3) / 4 + 1);
    acc_.smem_cells = smem_cells_.data();
  }
  acc_.counters = run.counters ? counters_thread_begin(run.counters) : nullptr;
  set_access_state(&acc_);
  ::blockDim = s.block;
  ::gridDim = s.grid;
  for (unsigned i = 0; i < run.nthreads; ++i) {  // thread indices are the same in every block
    CudaThread& t = threads_[i];
    t.tid = uint3{i % s.block.x, (i / s.block.x) % s.block.y, i / (s.block.x * s.block.y)};
    t.linear = (int)i;
    t.fiber = nullptr;
  }
  while (!run.abort.load(std::memory_order_relaxed)) {
    uint64_t b = run.next_block.fetch_add(1);
    if (b >= run.nblocks) break;
    if (acc_.counters) counters_block_begin(acc_.counters);
    run_block(b);
    if (acc_.counters) counters_block_end(acc_.counters);
    if (faulted_) break;
  }
  set_access_state(nullptr);
  if (acc_.counters) counters_thread_end(acc_.counters);
  acc_.counters = nullptr;
  acc_.fences = nullptr;
  run_ = nullptr;
  t_running = nullptr;
}

void Executor::run_block(uint64_t b) {
  const LaunchSpec& s = *run_->spec;
  block_linear_ = b;
  block_ = uint3{(unsigned)(b % s.grid.x), (unsigned)((b / s.grid.x) % s.grid.y),
                 (unsigned)(b / ((uint64_t)s.grid.x * s.grid.y))};
  ::blockIdx = block_;
  ::blockDim = s.block;
  ::gridDim = s.grid;
  if (smem_bytes_) std::memset(smem_, kNanByte, smem_bytes_);
  const unsigned n = run_->nthreads;
  for (unsigned i = 0; i < n; ++i) threads_[i].state = TState::NotStarted;
  std::fill(warp_waiting_.begin(), warp_waiting_.end(), 0);
  std::fill(exited_since_barrier_.begin(), exited_since_barrier_.end(), 0);
  acc_.run = run_->run_base + b;
  acc_.gen = 0;
  acc_.block_fence = 0;
  if (acc_.racecheck) std::fill(vc_.begin(), vc_.end(), 0);
  for (size_t w = 0; w < warp_active_.size(); ++w) {
    const unsigned lanes = std::min(32u, n - (unsigned)w * 32u);
    warp_active_[w] = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
  }
  alive_ = n;
  round_ = 0;
  faulted_ = false;
  ready_.resize(n);
  for (unsigned i = 0; i < n; ++i) ready_[i] = (int)i;
  order(ready_);
  for (;;) {
    batch_.swap(ready_);
    ready_.clear();
    run_round();
    if (faulted_) return abandon_block();
    resolve_warps();
    if (faulted_) return abandon_block();
    if (ready_.empty()) {
      if (alive_ == 0) return;
      resolve_barrier_or_fault();
      if (faulted_) return abandon_block();
    }
    order(ready_);
  }
}

Fiber* Executor::take_fiber() {
  Fiber* f;
  if (!idle_fibers_.empty()) {
    f = idle_fibers_.back();
    idle_fibers_.pop_back();
  } else {
    fibers_.emplace_back();
    f = &fibers_.back();
  }
  const Stack s = stacks_.acquire();
  *f = Fiber{};
  f->fn = &Executor::thread_main;
  f->arg = this;
  f->stack = s;
  return f;
}

void Executor::drop_fiber(Fiber* f, bool abandoned) {
  stacks_.release(f->stack, abandoned);
  idle_fibers_.push_back(f);
}

// Runs batch_ in order. A thread that never ran gets a fiber; a fiber whose thread returns picks
// up the following never-started threads itself (thread_main), advancing batch_pos_.
void Executor::run_round() {
  batch_pos_ = 0;
  while (batch_pos_ < batch_.size()) {
    CudaThread& t = threads_[batch_[batch_pos_++]];
    if (t.state == TState::NotStarted) {
      t.fiber = take_fiber();
      spin_[(size_t)t.linear * 2] = 0;  // a new CUDA thread has read nothing yet
    }
    t.state = TState::Ready;
    set_current(&t);
    host_.resume(*t.fiber);
    CudaThread* last = current_;  // the thread whose fiber came back (fibers chain and switch)
    current_ = nullptr;
    if (faulted_) return;
    if (last->fiber->finished) {
      drop_fiber(last->fiber, false);
      last->fiber = nullptr;
      last->state = TState::Exited;
      note_exit(*last);
      --alive_;
    }
  }
}

void Executor::thread_main(void* arg) {
  Executor* self = static_cast<Executor*>(arg);
  const LaunchSpec& s = *self->run_->spec;
  for (;;) {
    try {
      s.body(s.ctx);
    } catch (const FiberAbort&) {
      return;  // the fault is recorded; the scheduler abandons the block
    } catch (const std::exception& e) {
      self->block_fault("exception in a kernel", std::string("an exception escaped the kernel: ") + e.what());
      return;
    } catch (...) {
      self->block_fault("exception in a kernel", "an exception escaped the kernel");
      return;
    }
    // current_ returned. Go on with the next thread of the round if it never started.
    if (self->batch_pos_ >= self->batch_.size()) return;
    CudaThread& next = self->threads_[self->batch_[self->batch_pos_]];
    if (next.state != TState::NotStarted) return;
    ++self->batch_pos_;
    CudaThread* done = self->current_;
    next.fiber = done->fiber;
    done->fiber = nullptr;
    done->state = TState::Exited;
    self->note_exit(*done);
    --self->alive_;
    next.state = TState::Ready;
    self->spin_[(size_t)next.linear * 2] = 0;
    self->set_current(&next);
  }
}

void Executor::abandon_block() {
  for (unsigned i = 0; i < run_->nthreads; ++i) {
    CudaThread& t = threads_[i];
    if (t.fiber) drop_fiber(t.fiber, true);
    t.fiber = nullptr;
    t.state = TState::Exited;
  }
}

void Executor::order(std::vector<int>& v) {
  switch (run_->schedule) {
    case Schedule::Forward:
      if (!std::is_sorted(v.begin(), v.end())) std::sort(v.begin(), v.end());
      break;
    case Schedule::Reverse:
      if (std::is_sorted(v.begin(), v.end()))
        std::reverse(v.begin(), v.end());
      else
        std::sort(v.begin(), v.end(), [](int a, int b) { return a > b; });
      break;
    case Schedule::Shuffle: {
      std::sort(v.begin(), v.end());
      uint64_t st = splitmix64(run_->seed ^ splitmix64(block_linear_ * 0x100000001b3ull + round_));
      for (size_t i = v.size(); i > 1; --i) {
        st = splitmix64(st);
        std::swap(v[i - 1], v[st % i]);
      }
      break;
    }
  }
  ++round_;
}

// ---- synchronisation from inside a fiber ----
void Executor::wait_at_barrier(int kind, int pred, const char* file, int line) {
  CudaThread* t = current_;
  t->state = TState::AtBarrier;
  t->barrier_kind = kind;
  t->pred = pred;
  t->file = file;
  t->line = line;
  switch_out(t);
}

unsigned Executor::live_lanes_mask(int warp) const {
  unsigned m = 0;
  const unsigned n = run_->nthreads;
  for (unsigned l = 0; l < 32 && warp * 32u + l < n; ++l)
    if (threads_[warp * 32 + l].state != TState::Exited) m |= 1u << l;
  return m;
}

uint64_t Executor::wait_at_warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file,
                                   int line) {
  CudaThread* t = current_;
  t->file = file;
  t->line = line;
  const int warp = t->linear / 32;
  const unsigned lane = (unsigned)t->linear % 32;
  const unsigned n = run_->nthreads;
  const unsigned lanes_in_warp = std::min(32u, n - (unsigned)warp * 32u);
  const unsigned existing = lanes_in_warp == 32 ? 0xffffffffu : ((1u << lanes_in_warp) - 1u);
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fault_here("bad warp operation", std::string(op_name(op)) + " with width " + std::to_string(width) +
               " (must be a power of two in 1..32)", file, line);
  if (!(mask & (1u << lane)))
    fault_here("bad warp mask", std::string(op_name(op)) + " with mask " + hex32(mask) + " called by lane " +
               std::to_string(lane) + ", which the mask does not name", file, line);
  if (mask & ~existing)
    fault_here("bad warp mask", std::string(op_name(op)) + " with mask " + hex32(mask) + " names lanes " +
               hex32(mask & ~existing) + " that do not exist (warp " + std::to_string(warp) + " has " +
               std::to_string(lanes_in_warp) + " threads in a block of " + std::to_string(n) + ")", file, line);
  t->state = TState::AtWarp;
  t->op = op;
  t->mask = mask;
  t->value = value;
  t->arg = arg;
  t->width = width;
  ++warp_waiting_[warp];
  switch_out(t);
  return t->result;
}

// t waits: run the round's next thread directly if it is suspended (one fiber switch instead of
// two through the scheduler); the scheduler starts never-started threads and ends the round.
void Executor::switch_out(CudaThread* t) {
  if (batch_pos_ < batch_.size()) {
    CudaThread& next = threads_[batch_[batch_pos_]];
    if (next.state != TState::NotStarted) {
      ++batch_pos_;
      next.state = TState::Ready;
      set_current(&next);
      host_.switch_to(*t->fiber, *next.fiber);
      return;  // t runs again: whoever resumed it set current_ and threadIdx
    }
  }
  host_.yield(*t->fiber);
}

void Executor::fault_here(const char* kind, const std::string& what, const char* file, int line) {
  CudaThread* t = current_;
  std::ostringstream os;
  os << what << " at " << file << ":" << line << " (thread (" << t->tid.x << "," << t->tid.y << "," << t->tid.z
     << "))";
  block_fault(kind, os.str());
  throw FiberAbort{};
}

std::string Executor::where() const {
  const LaunchSpec& s = *run_->spec;
  std::ostringstream os;
  os << "kernel " << s.kernel_name << " (launched at " << s.file << ":" << s.line << "), block (" << block_.x << ","
     << block_.y << "," << block_.z << ")";
  return os.str();
}

void Executor::block_fault(const std::string& kind, const std::string& detail, cudaError_t code) {
  faulted_ = true;
  run_->record_fault(code, kind + " in " + where() + ": " + detail);
}

void Executor::abandon_here(cudaError_t code, const std::string& kind, const std::string& what) {
  CudaThread* t = current_;
  if (!t || !t->fiber) {
    std::fprintf(stderr, "[cuda-emu] %s outside a CUDA thread: %s\n", kind.c_str(), what.c_str());
    std::abort();
  }
  block_fault(kind, what, code);
  host_.yield(*t->fiber);  // the scheduler sees the fault and abandons the block, this fiber included
  std::abort();
}

// __syncwarp() over `mask`: each lane's own clock advances, then every lane learns the others'.
void Executor::sync_clocks(int warp, unsigned mask) {
  uint32_t joined[32] = {};
  const int base = warp * 32;
  for (unsigned l = 0; l < 32; ++l)
    if (mask & (1u << l)) ++vc_[(size_t)(base + l) * 32 + l];
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l))) continue;
    const uint32_t* v = &vc_[(size_t)(base + l) * 32];
    for (int k = 0; k < 32; ++k) joined[k] = std::max(joined[k], v[k]);
  }
  for (unsigned l = 0; l < 32; ++l)
    if (mask & (1u << l)) std::memcpy(&vc_[(size_t)(base + l) * 32], joined, sizeof joined);
}

// ---- resolution when no fiber is runnable ----
void Executor::complete_warp_group(int warp, unsigned mask) {
  const int base = warp * 32;
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l))) continue;
    CudaThread& t = threads_[base + l];
    const unsigned w = (unsigned)t.width;
    const unsigned seg = l & ~(w - 1);
    unsigned src = l;
    switch (t.op) {
      case WarpOp::Sync:
        t.result = 0;
        break;
      case WarpOp::Shfl:
        src = seg + ((unsigned)t.arg & (w - 1));
        break;
      case WarpOp::ShflUp:
        src = (l - seg) >= (unsigned)t.arg ? l - (unsigned)t.arg : l;
        break;
      case WarpOp::ShflDown:
        src = (l - seg) + (unsigned)t.arg < w ? l + (unsigned)t.arg : l;
        break;
      case WarpOp::ShflXor:
        src = l ^ (unsigned)t.arg;
        if (src >= seg + w) src = l;  // later groups are not reachable: own value
        break;
      case WarpOp::Mma:  // computed for the whole warp below
        break;
      case WarpOp::Ballot:
      case WarpOp::Any:
      case WarpOp::All: {
        unsigned bits = 0;
        for (unsigned k = 0; k < 32; ++k)
          if ((mask & (1u << k)) && threads_[base + k].value) bits |= 1u << k;
        t.result = t.op == WarpOp::Ballot ? bits : t.op == WarpOp::Any ? (bits != 0) : (bits == mask);
        break;
      }
    }
    if (t.op == WarpOp::Shfl || t.op == WarpOp::ShflUp || t.op == WarpOp::ShflDown || t.op == WarpOp::ShflXor) {
      if (!(mask & (1u << src))) {
        std::ostringstream os;
        os << op_name(t.op) << " at " << t.file << ":" << t.line << ": lane " << l << " of warp " << warp
           << " reads lane " << src << ", which mask " << hex32(mask) << " does not name";
        return block_fault("bad warp mask", os.str());
      }
      t.result = threads_[base + src].value;
    }
  }
  if (threads_[base + __builtin_ctz(mask)].op == WarpOp::Mma) {  // full mask (emu_mma.h): 32 records
    MmaLane* lanes[32];
    for (unsigned l = 0; l < 32; ++l) lanes[l] = reinterpret_cast<MmaLane*>(threads_[base + l].value);
    mma_bf16_m16n8k16(lanes);
  }
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l))) continue;
    threads_[base + l].state = TState::Ready;
    ready_.push_back(base + (int)l);
  }
  warp_waiting_[warp] -= __builtin_popcount(mask);
  warp_active_[warp] = live_lanes_mask(warp);
  if (acc_.racecheck && threads_[base + __builtin_ctz(mask)].op == WarpOp::Sync) sync_clocks(warp, mask);
}

void Executor::resolve_warps() {
  const int nwarps = (int)warp_waiting_.size();
  for (int w = 0; w < nwarps; ++w) {
    if (warp_waiting_[w] == 0) continue;
    const int base = w * 32;
    const int lanes = std::min(32, (int)run_->nthreads - base);
    for (int l = 0; l < lanes && warp_waiting_[w] > 0; ++l) {
      const CudaThread& t = threads_[base + l];
      if (t.state != TState::AtWarp) continue;
      bool complete = true;
      for (int k = 0; k < lanes && complete; ++k) {
        if (!(t.mask & (1u << k))) continue;
        const CudaThread& o = threads_[base + k];
        complete = o.state == TState::AtWarp && o.mask == t.mask && o.op == t.op;
      }
      if (complete) {
        complete_warp_group(w, t.mask);
        if (faulted_) return;
      }
    }
  }
}

std::string Executor::describe_wait(const CudaThread& t) const {
  std::ostringstream os;
  if (t.state == TState::AtBarrier) {
    os << barrier_name(t.barrier_kind) << "() at " << t.file << ":" << t.line;
  } else if (t.state == TState::AtWarp) {
    os << op_name(t.op) << "(mask " << hex32(t.mask) << ") at " << t.file << ":" << t.line;
  } else if (t.state == TState::Exited) {
    os << "exited";
  } else {
    os << "running";
  }
  return os.str();
}

// "threads 0-15 wait at X; threads 16-31 wait at Y" over linear ids, grouping equal descriptions.
std::string Executor::summarize(const std::vector<int>& ids) const {
  std::ostringstream os;
  size_t i = 0;
  bool first = true;
  while (i < ids.size()) {
    std::string d = describe_wait(threads_[ids[i]]);
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1 && describe_wait(threads_[ids[j + 1]]) == d) ++j;
    if (!first) os << "; ";
    first = false;
    if (i == j)
      os << "thread " << ids[i];
    else
      os << "threads " << ids[i] << "-" << ids[j];
    os << (d == "exited" ? " " : " wait at ") << d;
    i = j + 1;
  }
  return os.str();
}

void Executor::resolve_barrier_or_fault() {
  std::vector<int>& at_barrier = scratch_barrier_;
  std::vector<int>& at_warp = scratch_warp_;
  at_barrier.clear();
  at_warp.clear();
  for (unsigned i = 0; i < run_->nthreads; ++i) {
    const CudaThread& t = threads_[i];
    if (t.state == TState::AtBarrier) at_barrier.push_back((int)i);
    if (t.state == TState::AtWarp) at_warp.push_back((int)i);
  }
  if (at_warp.empty()) {
    const CudaThread& f = threads_[at_barrier.front()];
    for (int i : at_barrier) {
      const CudaThread& t = threads_[i];
      if (!same_site(t.file, t.line, f.file, f.line) || t.barrier_kind != f.barrier_kind)
        return block_fault("divergent barrier",
                           "threads wait at different barriers (threads that exited do not count): " +
                               summarize(at_barrier));
    }
    // Every thread that has not exited must reach the barrier. Lanes of a warp that returned since
    // the previous barrier while other lanes of that warp wait here took a branch around it: the
    // barrier is in divergent code (undefined on a GPU, which may hang). Whole warps that returned
    // drop out, as on the hardware, which stops counting a warp once all its threads have exited.
    const size_t nwarps = exited_since_barrier_.size();
    scratch_arrived_.assign(nwarps, 0);
    for (int i : at_barrier) scratch_arrived_[i / 32] |= 1u << (i % 32);
    for (size_t w = 0; w < nwarps; ++w) {
      if (!exited_since_barrier_[w] || !scratch_arrived_[w]) continue;
      std::vector<int> gone, waiting;
      for (int l = 0; l < 32; ++l) {
        if (exited_since_barrier_[w] & (1u << l)) gone.push_back((int)w * 32 + l);
        if (scratch_arrived_[w] & (1u << l)) waiting.push_back((int)w * 32 + l);
      }
      return block_fault("barrier in divergent code",
                         "in warp " + std::to_string(w) + ", " + summarize(gone) +
                             " since the previous barrier without reaching " + barrier_name(f.barrier_kind) +
                             "() at " + f.file + ":" + std::to_string(f.line) + "; " + summarize(waiting) +
                             " (every thread of the block that has not exited must reach a barrier; only whole "
                             "warps may return before it)");
    }
    std::fill(exited_since_barrier_.begin(), exited_since_barrier_.end(), 0);
    ++acc_.gen;
    int count = 0, all = 1, any = 0;
    for (int i : at_barrier) {
      count += threads_[i].pred != 0;
      all &= threads_[i].pred != 0;
      any |= threads_[i].pred != 0;
    }
    const int kind = f.barrier_kind;
    for (int i : at_barrier) {
      CudaThread& t = threads_[i];
      t.result = (uint64_t)(kind == 0 ? count : kind == 1 ? all : kind == 2 ? any : 0);
      t.state = TState::Ready;
      ready_.push_back(i);
    }
    for (size_t w = 0; w < warp_active_.size(); ++w) warp_active_[w] = live_lanes_mask((int)w);
    return;
  }
  // A warp operation cannot complete: its mask names a lane that exited or waits elsewhere (at a
  // barrier, or at another warp operation or mask). Name what each such lane is doing.
  std::ostringstream os;
  for (int i : at_warp) {
    const CudaThread& t = threads_[i];
    const int base = (t.linear / 32) * 32;
    for (unsigned k = 0; k < 32; ++k) {
      if (!(t.mask & (1u << k))) continue;
      const CudaThread& o = threads_[base + k];
      if (o.state == TState::AtWarp && o.mask == t.mask && o.op == t.op) continue;
      os << "; " << op_name(t.op) << "(mask " << hex32(t.mask) << ") at " << t.file << ":" << t.line << " by thread "
         << t.linear << " names lane " << k << " (thread " << base + (int)k << "), which "
         << (o.state == TState::Exited ? "exited" : "waits at " + describe_wait(o));
      break;  // one missing lane per waiter is enough
    }
  }
  std::vector<int> waiting = at_barrier;
  waiting.insert(waiting.end(), at_warp.begin(), at_warp.end());
  std::sort(waiting.begin(), waiting.end());
  block_fault("bad warp mask", "deadlock, no thread can proceed: " + summarize(waiting) + os.str());
}

// ---- the pool of OS threads ----
class Pool {
 public:
  // Runs run's blocks on n OS threads: the caller and n - 1 workers.
  void execute(LaunchRun& run, int n) {
    const int helpers = n - 1;
    {
      std::unique_lock<std::mutex> lk(mu_);
      while ((int)workers_.size() < helpers) {
        int index = (int)workers_.size();
        workers_.emplace_back([this, index] { worker(index); });
        workers_.back().detach();
      }
      job_ = &run;
      participants_ = helpers;
      remaining_ = helpers;
      ++generation_;
    }
    cv_.notify_all();
    t_executor.run_blocks(run);
    std::unique_lock<std::mutex> lk(mu_);
    done_cv_.wait(lk, [this] { return remaining_ == 0; });
    job_ = nullptr;
  }

 private:
  void worker(int index) {
    uint64_t seen = 0;
    for (;;) {
      LaunchRun* job;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_.wait(lk, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= participants_) continue;
        job = job_;
      }
      t_executor.run_blocks(*job);
      std::lock_guard<std::mutex> lk(mu_);
      if (--remaining_ == 0) done_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<std::thread> workers_;
  LaunchRun* job_ = nullptr;
  int participants_ = 0;
  int remaining_ = 0;
  uint64_t generation_ = 0;
};

Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: its workers live as long as the process
  return *p;
}

std::atomic<int> g_workers{0};  // 0: not read from CTXLAB_EMU_THREADS yet

std::string site(const LaunchSpec& s) {
  return std::string("kernel ") + s.kernel_name + " launched at " + s.file + ":" + std::to_string(s.line);
}

std::mutex g_launch_mu;

}  // namespace

// ---- entry points used by the device header ----
void syncthreads(const char* file, int line) {
  Executor* ex = in_kernel();
  if (!ex) device_trap("__syncthreads() outside a kernel", file, line);
  ex->wait_at_barrier(-1, 0, file, line);
}
int syncthreads_reduce(int kind, int pred, const char* file, int line) {
  Executor* ex = in_kernel();
  if (!ex) device_trap("__syncthreads_count/and/or outside a kernel", file, line);
  ex->wait_at_barrier(kind, pred, file, line);
  return (int)ex->current()->result;
}
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
  Executor* ex = in_kernel();
  if (!ex) device_trap("a warp intrinsic outside a kernel", file, line);
  return ex->wait_at_warp_op(op, mask, value, arg, width, file, line);
}
unsigned activemask() {
  Executor* ex = in_kernel();
  if (!ex) device_trap("__activemask() outside a kernel", "?", 0);
  return ex->active_mask(ex->current()->linear / 32);
}
size_t dynamic_shared_bytes() {
  Executor* ex = in_kernel();
  if (!ex) device_trap("dynamic shared memory outside a kernel", "?", 0);
  return ex->smem_bytes();
}
unsigned char* dynamic_shared_base() {
  Executor* ex = in_kernel();
  if (!ex) device_trap("dynamic shared memory outside a kernel", "?", 0);
  return ex->smem();
}
void device_trap(const char* what, const char* file, int line) {
  if (Executor* ex = in_kernel()) ex->fault_here("device trap", what, file, line);
  std::fprintf(stderr, "[cuda-emu] %s at %s:%d\n", what, file, line);
  std::abort();
}
void access_fault(AccessState* s, cudaError_t code, const std::string& kind, const std::string& what) {
  static_cast<Executor*>(s->executor)->abandon_here(code, kind, what);
}

namespace {
cudaError_t launch_impl(const LaunchSpec& s, bool may_capture);

// The recorded node of a launch on a capturing stream: an owned copy of the arguments, run on the
// graph's stream through the same path as a direct launch, pointer check included.
GraphWork kernel_node(const LaunchSpec& s) {
  std::shared_ptr<void> ctx(s.clone_ctx(s.ctx), s.free_ctx);
  LaunchSpec recorded = s;
  recorded.ctx = ctx.get();
  return [recorded, ctx](cudaStream_t stream) {
    LaunchSpec r = recorded;
    r.stream = stream;
    r.bad_pointer_arg = r.check_pointers(r.ctx, &r.bad_pointer);
    return launch_impl(r, false);
  };
}

cudaError_t launch_impl(const LaunchSpec& s, bool may_capture) {
  if (Executor* ex = in_kernel()) {
    raise_fault(cudaErrorNotSupported, site(s) + ": launched from inside a kernel (dynamic parallelism is not emulated)");
    ex->fault_here("unsupported launch", std::string("launch of ") + s.kernel_name, s.file, s.line);
  }
  if (cudaError_t e = sticky_error(); e != cudaSuccess) {
    set_last_error(e);
    return e;
  }
  const dim3 g = s.grid, b = s.block;
  const uint64_t threads = (uint64_t)b.x * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024) {
    reject(cudaErrorInvalidConfiguration, site(s) + ": block (" + std::to_string(b.x) + "," + std::to_string(b.y) +
                                              "," + std::to_string(b.z) + ") = " + std::to_string(threads) +
                                              " threads; limits: x,y <= 1024, z <= 64, x*y*z <= 1024, none 0");
    return cudaErrorInvalidConfiguration;
  }
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
    reject(cudaErrorInvalidConfiguration, site(s) + ": grid (" + std::to_string(g.x) + "," + std::to_string(g.y) +
                                              "," + std::to_string(g.z) +
                                              "); limits: x < 2^31, y,z <= 65535, none 0");
    return cudaErrorInvalidConfiguration;
  }
  const size_t smem_limit = max_dynamic_shared(s.kernel_id);
  if (s.smem_bytes > smem_limit) {
    reject(cudaErrorInvalidValue,
           site(s) + ": " + std::to_string(s.smem_bytes) + " bytes of dynamic shared memory exceed the kernel's " +
               std::to_string(smem_limit) + "-byte limit" +
               (smem_limit == kDefaultDynamicShared
                    ? " (raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n), "
                      "at most 232448)"
                    : ""));
    return cudaErrorInvalidValue;
  }
  if (!valid_stream(s.stream)) {
    return reject(cudaErrorInvalidResourceHandle, site(s) + ": unknown stream");
  }
  if (may_capture && capture_active() && s.bad_pointer_arg < 0) {
    cudaError_t ret;
    if (capture_takes(s.stream, s.kernel_name, kernel_node(s), &ret)) return ret;
  }
  count_launch();
  if (s.bad_pointer_arg >= 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", s.bad_pointer);
    const std::string m = "host pointer passed to a kernel: " + site(s) + ": argument #" +
                          std::to_string(s.bad_pointer_arg) + " is " + buf +
                          ", which is not inside any cudaMalloc allocation";
    raise_fault(cudaErrorIllegalAddress, m);
    if (may_capture && capture_active()) capture_invalidate(s.stream, m);
    return cudaErrorIllegalAddress;
  }
  std::lock_guard<std::mutex> lk(g_launch_mu);
  LaunchRun run;
  run.spec = &s;
  run.nthreads = (unsigned)threads;
  run.nblocks = (uint64_t)g.x * g.y * g.z;
  run.schedule = cuemu::schedule();
  run.seed = schedule_seed();
  run.run_base = g_next_run.fetch_add(run.nblocks);
  run.racecheck = racecheck_enabled();
  if (run.racecheck && !access_hooks_present()) {
    static std::once_flag once;
    std::call_once(once, [] {
      std::fprintf(stderr, "[cuda-emu] the race detector is on (CTXLAB_EMU_RACECHECK=1) but no kernel was compiled "
                           "with the emulator's access hooks (an ASan build?): nothing is checked\n");
    });
    run.racecheck = false;
  }
  if (run.racecheck && !global_cells()) {
    static std::once_flag once;
    std::call_once(once, [] {
      std::fprintf(stderr, "[cuda-emu] the race detector is on (CTXLAB_EMU_RACECHECK=1) but its shadow memory "
                           "could not be mapped: nothing is checked\n");
    });
    run.racecheck = false;
  }
  run.counters = counters_launch_begin(s.kernel_name, s.file, s.line, g, b, s.smem_bytes);
  const int n = (int)std::min<uint64_t>((uint64_t)worker_threads(), run.nblocks);
  if (n <= 1)
    t_executor.run_blocks(run);
  else
    pool().execute(run, n);
  counters_launch_end(run.counters);
  if (!run.fault.empty()) raise_fault(run.fault_code, symbolize(run.fault));
  std::string oob = check_redzones(s.kernel_name);
  if (!oob.empty()) raise_fault(cudaErrorIllegalAddress, oob + " (" + site(s) + ")");
  return sticky_error();
}
}  // namespace

void launch(const LaunchSpec& s) { launch_impl(s, true); }


}  // namespace cuemu::detail

namespace cuemu {
void set_worker_threads(int n) { detail::g_workers = std::max(1, std::min(n, 64)); }
int worker_threads() {
  int n = detail::g_workers.load();
  if (n > 0) return n;
  n = 2;
  if (const char* e = std::getenv("CTXLAB_EMU_THREADS")) {
    char* end = nullptr;
    long v = std::strtol(e, &end, 10);
    if (end == e || *end != '\0' || v < 1 || v > 64)
      std::fprintf(stderr, "[cuda-emu] CTXLAB_EMU_THREADS='%s' must be an integer in 1..64; using 2\n", e);
    else
      n = (int)v;
  }
  int expected = 0;
  detail::g_workers.compare_exchange_strong(expected, n);
  return detail::g_workers.load();
}
}  // namespace cuemu
