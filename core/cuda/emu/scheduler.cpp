// core/cuda/emu/scheduler.cpp — runs a launch: validates the configuration, spreads the blocks
// over a small pool of OS threads, and runs each block's CUDA threads as fibers on one OS thread.
// A fiber runs until it reaches a barrier or a warp operation, or exits. When no fiber can run,
// pending warp operations whose mask lanes have all arrived complete; when only barrier waiters
// remain, the barrier releases (all at one call site) or a divergent barrier is reported; anything
// else is a deadlock, reported with each waiter's call site. Runnable threads are taken in the
// schedule order (forward, reverse or a seeded shuffle) so that a missing barrier shows.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/cuda/emu/emu_device.h"
#include "core/cuda/emu/emu_internal.h"
#include "core/cuda/emu/emu_launch.h"
#include "core/cuda/emu/fiber.h"

namespace cuemu::detail {
namespace {

enum class TState : unsigned char { NotStarted, Ready, AtBarrier, AtWarp, Exited };

struct CudaThread {
  Fiber fiber;
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
  std::atomic<uint64_t> next_block{0};
  std::atomic<bool> abort{false};
  std::mutex mu;
  std::string fault;  // the first fault (empty: none)
  void record_fault(const std::string& m) {
    std::lock_guard<std::mutex> lk(mu);
    if (fault.empty()) fault = m;
    abort = true;
  }
};

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
  // A fault found by the running CUDA thread itself: the block is abandoned, the fiber never resumes.
  [[noreturn]] void fault_here(const char* kind, const std::string& what, const char* file, int line);
  unsigned char* smem() const { return smem_; }
  unsigned live_lanes_mask(int warp) const;
  unsigned active_mask(int warp) const { return warp_active_[warp]; }

 private:
  void run_block(uint64_t b);
  void run_thread(CudaThread& t);
  void resolve_warps();
  void complete_warp_group(int warp, unsigned mask);
  void resolve_barrier_or_fault();
  void order(std::vector<int>& v);
  void abandon_block();
  std::string where() const;
  std::string describe_wait(const CudaThread& t) const;
  std::string summarize(const std::vector<int>& ids) const;
  void block_fault(const std::string& kind, const std::string& detail);
  void free_smem();
  static void thread_main(void* arg);

  FiberHost host_;
  StackPool stacks_;
  std::vector<CudaThread> threads_;
  std::vector<int> ready_;
  std::vector<int> warp_waiting_;  // lanes of each warp waiting at a warp op
  std::vector<unsigned> warp_active_;  // __activemask(): lanes alive when the warp last synchronised
  LaunchRun* run_ = nullptr;
  CudaThread* current_ = nullptr;
  uint3 block_{0, 0, 0};
  uint64_t block_linear_ = 0;
  uint64_t round_ = 0;
  unsigned alive_ = 0;
  bool faulted_ = false;
  unsigned char* smem_ = nullptr;
  size_t smem_bytes_ = 0;
};

thread_local Executor t_executor;

void Executor::free_smem() {
  if (smem_) ::operator delete(smem_, std::align_val_t(128));
  smem_ = nullptr;
  smem_bytes_ = 0;
}

void Executor::run_blocks(LaunchRun& run) {
  run_ = &run;
  const LaunchSpec& s = *run.spec;
  if (threads_.size() < run.nthreads) threads_.resize(run.nthreads);
  warp_waiting_.assign((run.nthreads + 31) / 32, 0);
  warp_active_.assign((run.nthreads + 31) / 32, 0);
  // Exactly the requested bytes (at least 1), so that ASan sees an overrun of dynamic shared memory.
  free_smem();
  smem_bytes_ = s.smem_bytes;
  smem_ = static_cast<unsigned char*>(::operator new(std::max<size_t>(smem_bytes_, 1), std::align_val_t(128)));
  ::blockDim = s.block;
  ::gridDim = s.grid;
  while (!run.abort.load(std::memory_order_relaxed)) {
    uint64_t b = run.next_block.fetch_add(1);
    if (b >= run.nblocks) break;
    run_block(b);
    if (faulted_) break;
  }
  free_smem();
  run_ = nullptr;
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
  for (unsigned i = 0; i < n; ++i) {
    CudaThread& t = threads_[i];
    t.tid = uint3{i % s.block.x, (i / s.block.x) % s.block.y, i / (s.block.x * s.block.y)};
    t.linear = (int)i;
    t.state = TState::NotStarted;
  }
  std::fill(warp_waiting_.begin(), warp_waiting_.end(), 0);
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
  std::vector<int> batch;
  for (;;) {
    batch.swap(ready_);
    ready_.clear();
    for (int i : batch) {
      run_thread(threads_[i]);
      if (faulted_) return abandon_block();
    }
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

void Executor::run_thread(CudaThread& t) {
  if (t.state == TState::NotStarted) {
    t.fiber = Fiber{};
    t.fiber.fn = &Executor::thread_main;
    t.fiber.arg = this;
    t.fiber.stack = stacks_.acquire();
  }
  t.state = TState::Ready;
  current_ = &t;
  ::threadIdx = t.tid;
  const bool finished = host_.resume(t.fiber);
  current_ = nullptr;
  if (finished) {
    t.state = TState::Exited;
    stacks_.release(t.fiber.stack, false);
    --alive_;
  }
}

void Executor::thread_main(void* arg) {
  Executor* self = static_cast<Executor*>(arg);
  const LaunchSpec& s = *self->run_->spec;
  s.body(s.ctx);
}

void Executor::abandon_block() {
  for (unsigned i = 0; i < run_->nthreads; ++i) {
    CudaThread& t = threads_[i];
    if (t.state != TState::Exited && t.state != TState::NotStarted) stacks_.release(t.fiber.stack, true);
    t.state = TState::Exited;
  }
}

void Executor::order(std::vector<int>& v) {
  switch (run_->schedule) {
    case Schedule::Forward:
      std::sort(v.begin(), v.end());
      break;
    case Schedule::Reverse:
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
  host_.yield(t->fiber);
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
  host_.yield(t->fiber);
  return t->result;
}

void Executor::fault_here(const char* kind, const std::string& what, const char* file, int line) {
  CudaThread* t = current_;
  std::ostringstream os;
  os << what << " at " << file << ":" << line << " (thread (" << t->tid.x << "," << t->tid.y << "," << t->tid.z
     << "))";
  block_fault(kind, os.str());
  host_.yield(t->fiber);  // never resumed: the block is abandoned
  std::abort();
}

std::string Executor::where() const {
  const LaunchSpec& s = *run_->spec;
  std::ostringstream os;
  os << "kernel " << s.kernel_name << " (launched at " << s.file << ":" << s.line << "), block (" << block_.x << ","
     << block_.y << "," << block_.z << ")";
  return os.str();
}

void Executor::block_fault(const std::string& kind, const std::string& detail) {
  faulted_ = true;
  run_->record_fault(kind + " in " + where() + ": " + detail);
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
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask & (1u << l))) continue;
    threads_[base + l].state = TState::Ready;
    ready_.push_back(base + (int)l);
  }
  warp_waiting_[warp] -= __builtin_popcount(mask);
  warp_active_[warp] = live_lanes_mask(warp);
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
  std::vector<int> at_barrier, at_warp;
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
  // A warp operation cannot complete: name what its mask's lanes are doing.
  std::ostringstream os;
  bool exited_lane = false;
  for (int i : at_warp) {
    const CudaThread& t = threads_[i];
    const int base = (t.linear / 32) * 32;
    for (unsigned k = 0; k < 32; ++k) {
      if (!(t.mask & (1u << k))) continue;
      const CudaThread& o = threads_[base + k];
      if (o.state == TState::AtWarp && o.mask == t.mask && o.op == t.op) continue;
      if (o.state == TState::Exited) exited_lane = true;
      os << "; " << op_name(t.op) << "(mask " << hex32(t.mask) << ") at " << t.file << ":" << t.line << " by thread "
         << t.linear << " names lane " << k << " (thread " << base + (int)k << "), which "
         << (o.state == TState::Exited ? "exited" : "waits at " + describe_wait(o));
      break;  // one missing lane per waiter is enough
    }
  }
  std::vector<int> waiting = at_barrier;
  waiting.insert(waiting.end(), at_warp.begin(), at_warp.end());
  std::sort(waiting.begin(), waiting.end());
  block_fault(exited_lane ? "bad warp mask" : "deadlock",
              "no thread can proceed: " + summarize(waiting) + os.str());
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
  Executor& ex = t_executor;
  if (!ex.current()) device_trap("__syncthreads() outside a kernel", file, line);
  ex.wait_at_barrier(-1, 0, file, line);
}
int syncthreads_reduce(int kind, int pred, const char* file, int line) {
  Executor& ex = t_executor;
  if (!ex.current()) device_trap("__syncthreads_count/and/or outside a kernel", file, line);
  ex.wait_at_barrier(kind, pred, file, line);
  return (int)ex.current()->result;
}
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
  Executor& ex = t_executor;
  if (!ex.current()) device_trap("a warp intrinsic outside a kernel", file, line);
  return ex.wait_at_warp_op(op, mask, value, arg, width, file, line);
}
unsigned activemask() {
  Executor& ex = t_executor;
  if (!ex.current()) device_trap("__activemask() outside a kernel", "?", 0);
  return ex.active_mask(ex.current()->linear / 32);
}
unsigned char* dynamic_shared_base() {
  Executor& ex = t_executor;
  if (!ex.current()) device_trap("dynamic shared memory outside a kernel", "?", 0);
  return ex.smem();
}
void device_trap(const char* what, const char* file, int line) {
  Executor& ex = t_executor;
  if (ex.current()) ex.fault_here("device trap", what, file, line);
  std::fprintf(stderr, "[cuda-emu] %s at %s:%d\n", what, file, line);
  std::abort();
}

void launch(const LaunchSpec& s) {
  if (cudaError_t e = sticky_error(); e != cudaSuccess) {
    set_last_error(e);
    return;
  }
  const dim3 g = s.grid, b = s.block;
  const uint64_t threads = (uint64_t)b.x * b.y * b.z;
  if (b.x == 0 || b.y == 0 || b.z == 0 || b.x > 1024 || b.y > 1024 || b.z > 64 || threads > 1024) {
    reject(cudaErrorInvalidConfiguration, site(s) + ": block (" + std::to_string(b.x) + "," + std::to_string(b.y) +
                                              "," + std::to_string(b.z) + ") = " + std::to_string(threads) +
                                              " threads; limits: x,y <= 1024, z <= 64, x*y*z <= 1024, none 0");
    return;
  }
  if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535) {
    reject(cudaErrorInvalidConfiguration, site(s) + ": grid (" + std::to_string(g.x) + "," + std::to_string(g.y) +
                                              "," + std::to_string(g.z) +
                                              "); limits: x < 2^31, y,z <= 65535, none 0");
    return;
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
    return;
  }
  if (!valid_stream(s.stream)) {
    reject(cudaErrorInvalidResourceHandle, site(s) + ": unknown stream");
    return;
  }
  count_launch();
  if (s.bad_pointer_arg >= 0) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", s.bad_pointer);
    raise_fault(cudaErrorIllegalAddress, "host pointer passed to a kernel: " + site(s) + ": argument #" +
                                             std::to_string(s.bad_pointer_arg) + " is " + buf +
                                             ", which is not inside any cudaMalloc allocation");
    return;
  }
  std::lock_guard<std::mutex> lk(g_launch_mu);
  LaunchRun run;
  run.spec = &s;
  run.nthreads = (unsigned)threads;
  run.nblocks = (uint64_t)g.x * g.y * g.z;
  run.schedule = cuemu::schedule();
  run.seed = schedule_seed();
  const int n = (int)std::min<uint64_t>((uint64_t)worker_threads(), run.nblocks);
  if (n <= 1)
    t_executor.run_blocks(run);
  else
    pool().execute(run, n);
  if (!run.fault.empty()) raise_fault(cudaErrorLaunchFailure, run.fault);
  std::string oob = check_redzones(s.kernel_name);
  if (!oob.empty()) raise_fault(cudaErrorIllegalAddress, oob + " (" + site(s) + ")");
}

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
