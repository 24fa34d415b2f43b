// core/cuda/cuda_runtime.cu — device discovery, the caching device allocator and the copy hook
// that Tensor::to uses (see cuda_runtime.h).
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/cuda_runtime.h"
#include "core/cuda/kernels.h"
#include "core/tensor.h"

namespace ctx::cuda {

cudaStream_t stream() {
  static cudaStream_t s = [] {
    cudaStream_t made = nullptr;
    CTX_CUDA_CHECK(cudaStreamCreateWithFlags(&made, cudaStreamDefault));
    return made;
  }();
  return s;
}

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string device_name() {
  if (device_count() == 0) return "";
  cudaDeviceProp p;
  CTX_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  return p.name;
}

bool emulated() {
#if defined(CTXLAB_CUDA_EMULATOR)
  return true;
#else
  return false;
#endif
}

// The device memory of a captured graph. A CUDA Graph bakes in the pointers of every kernel it
// records, so the blocks a captured step used must not be handed to anyone else while the graph
// lives: while the library stream captures, Step allocations come from this pool (a block taken
// from the general free lists, or from cudaMalloc, becomes the pool's), and a block the pool owns
// returns to it when freed, during the capture and after it. Only the capture allocates from it,
// so between replays the rest of the program (evaluation, checkpoints) gets other blocks, as with
// PyTorch's private graph pools. Destroying the graph gives the pool's free blocks back.
struct GraphPool {
  std::map<size_t, std::vector<void*>> free;
  std::vector<void*> owned;  // every block the pool took (free or held by a tensor)
};

namespace {
std::atomic<uint64_t> g_to_host{0}, g_to_device{0}, g_to_device_queued{0};  // host_copy_stats()
std::atomic<bool> g_capturing{false};  // the library stream is being captured (capture_begin)
std::atomic<uint64_t> g_captures{0}, g_replays{0};

// A copy between the host and the device inside a captured step would be baked into the graph
// (the same host bytes every replay) or refused by CUDA: say which copy, before CUDA does.
void refuse_while_capturing(const char* what, size_t bytes) {
  if (g_capturing.load())
    throw Error(str("a ", what, " of ", bytes, " bytes inside a captured step (CUDA Graph): a captured "
                    "step must not copy between the host and the device (docs/cuda.md, \"A CUDA Graph of the "
                    "warm step\")"));
}

// Size-class caches of device blocks (same classes as the host pool), one per Arena: Step for
// every tensor, Table for device_table's kept tables. Blocks are never given back to the driver:
// a training step asks for the same sizes every step.
struct DevicePool {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free[2];  // by Arena
  DeviceAllocStats stats;
  GraphPool* capturing = nullptr;                 // the pool of the capture under way
  std::unordered_map<void*, GraphPool*> owner;    // blocks owned by a live graph's pool
};
DevicePool& pool() {
  static DevicePool* p = new DevicePool();  // never destroyed: tensors may outlive statics
  return *p;
}
// A Step allocation during a capture: from the graph's pool, else a general block that becomes
// the pool's; nullptr when cudaMalloc must be asked (the caller then gives the block to the pool).
void* graph_pool_take(GraphPool& g, size_t cls) {
  auto& own = g.free[cls];
  if (!own.empty()) {
    void* p = own.back();
    own.pop_back();
    return p;
  }
  auto& v = pool().free[(int)Arena::Step][cls];
  if (v.empty()) return nullptr;
  void* p = v.back();
  v.pop_back();
  pool().stats.bytes_cached -= cls;
  g.owned.push_back(p);
  pool().owner[p] = &g;
  return p;
}

void* dev_alloc(size_t bytes, Arena arena) {
  size_t cls = BufferPool::size_class(bytes);
  GraphPool* capturing = nullptr;
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    pool().stats.requests++;
    if (arena == Arena::Step && pool().capturing) {
      capturing = pool().capturing;
      if (void* p = graph_pool_take(*capturing, cls)) return p;
    }
    auto& v = pool().free[(int)arena][cls];
    if (!v.empty()) {
      void* p = v.back();
      v.pop_back();
      pool().stats.bytes_cached -= cls;
      return p;
    }
  }
  CTX_CHECK(device_count() > 0, "no CUDA GPU available (cudaGetDeviceCount found none): cannot allocate a "
            "CUDA tensor of ", bytes, " bytes; use the cpu device");
  void* p = nullptr;
  if (capturing) {  // cudaMalloc is refused during a global-mode capture: this thread relaxes it
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    CTX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    const cudaError_t e = cudaMalloc(&p, cls);
    CTX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    CTX_CUDA_CHECK(e);
  } else {
    CTX_CUDA_CHECK(cudaMalloc(&p, cls));
  }
  std::lock_guard<std::mutex> lk(pool().mu);
  pool().stats.device_mallocs++;
  if (capturing) {
    capturing->owned.push_back(p);
    pool().owner[p] = capturing;
  }
  return p;
}
void dev_free(void* p, size_t bytes, Arena arena) {
  const size_t cls = BufferPool::size_class(bytes);
  std::lock_guard<std::mutex> lk(pool().mu);
  if (!pool().owner.empty()) {
    auto it = pool().owner.find(p);
    if (it != pool().owner.end()) {
      it->second->free[cls].push_back(p);
      return;
    }
  }
  pool().free[(int)arena][cls].push_back(p);
  pool().stats.bytes_cached += cls;
}

// Host -> device through pinned staging (what PyTorch's pin_memory + non_blocking does): the
// source is copied into a pinned block, the block is queued with cudaMemcpyAsync on the stream
// the kernels use, and an event recorded behind it says when the block may be reused. The host
// does not wait for the device (a cudaMemcpy from pageable memory synchronises the stream first).
// Blocks are cached by size (powers of two from kStagedMin); a block comes back when its event has
// completed, so after the first steps no upload allocates. Uploads above kStagedMax (a model's weights, a checkpoint)
// take the plain synchronous cudaMemcpy instead of keeping a pinned block that large.
constexpr size_t kStagedMax = size_t(4) << 20;
constexpr size_t kStagedMin = size_t(64) << 10;
struct PinnedBlock {
  void* p = nullptr;
  size_t cls = 0;
  cudaEvent_t done = nullptr;
};
struct Staging {
  std::mutex mu;
  std::map<size_t, std::vector<PinnedBlock>> free;
  std::vector<PinnedBlock> in_flight;  // queued copies whose event may not have completed
  uint64_t allocs = 0;
};
Staging& staging() {
  static Staging* s = new Staging();  // never destroyed (as the pool)
  return *s;
}
void staged_upload(void* dst, const void* src, size_t bytes) {
  Staging& st = staging();
  std::lock_guard<std::mutex> lk(st.mu);
  for (size_t i = 0; i < st.in_flight.size();) {  // retire the blocks whose copy has finished
    const cudaError_t q = cudaEventQuery(st.in_flight[i].done);
    if (q == cudaErrorNotReady) {
      ++i;
      continue;
    }
    CTX_CUDA_CHECK(q);
    st.free[st.in_flight[i].cls].push_back(st.in_flight[i]);
    st.in_flight[i] = st.in_flight.back();
    st.in_flight.pop_back();
  }
  // Blocks come in powers of two from 64 KiB, and any free block at least as large serves: an
  // upload whose size varies from step to step (the index_add plan depends on the batch's tokens)
  // still finds a block, so only a step with more uploads in flight than ever before allocates.
  size_t cls = kStagedMin;
  while (cls < bytes) cls <<= 1;
  PinnedBlock b;
  auto it = st.free.lower_bound(cls);
  while (it != st.free.end() && it->second.empty()) ++it;
  if (it != st.free.end()) {
    b = it->second.back();
    it->second.pop_back();
  } else {
    b.cls = cls;
    CTX_CUDA_CHECK(cudaMallocHost(&b.p, cls));
    CTX_CUDA_CHECK(cudaEventCreateWithFlags(&b.done, cudaEventDisableTiming));
    st.allocs++;
  }
  std::memcpy(b.p, src, bytes);
  CTX_CUDA_CHECK(cudaMemcpyAsync(dst, b.p, bytes, cudaMemcpyHostToDevice, stream()));
  CTX_CUDA_CHECK(cudaEventRecord(b.done, stream()));
  st.in_flight.push_back(b);
}

void upload(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  refuse_while_capturing("host -> device copy", bytes);
  if (bytes <= kStagedMax) {
    g_to_device_queued++;
    staged_upload(dst, src, bytes);
  } else {
    g_to_device++;
    CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
  }
}

void dev_copy(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  if (dst_dev != Device::CPU && src_dev == Device::CPU) return upload(dst, src, bytes);
  const cudaMemcpyKind kind = dst_dev == Device::CPU
                                  ? (src_dev == Device::CPU ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost)
                                  : cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDeviceToHost) {
    refuse_while_capturing("device -> host copy", bytes);
    g_to_host++;
  }
  if (kind == cudaMemcpyDeviceToDevice)  // queued on the library's stream (a step's copies: capturable)
    CTX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream()));
  else
    CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, kind));
}
}  // namespace

DeviceAllocStats device_alloc_stats() {
  std::lock_guard<std::mutex> lk(pool().mu);
  return pool().stats;
}

void ensure_allocator() {
  static std::once_flag once;
  std::call_once(once, [] { register_device_allocator(Device::CUDA, DeviceAllocator{dev_alloc, dev_free, dev_copy}); });
}

HostCopyStats host_copy_stats() {
  HostCopyStats h{g_to_host.load(), g_to_device.load(), g_to_device_queued.load(), 0};
  std::lock_guard<std::mutex> lk(staging().mu);
  h.staging_allocs = staging().allocs;
  return h;
}

void copy_to_device(void* dst, const void* src, size_t bytes) { upload(dst, src, bytes); }
void copy_to_host(void* dst, const void* src, size_t bytes) {
  refuse_while_capturing("device -> host copy", bytes);
  g_to_host++;
  CTX_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void synchronize() { CTX_CUDA_CHECK(cudaDeviceSynchronize()); }

// ---- captured steps (CUDA Graphs) ----

struct Graph {
  cudaGraphExec_t exec = nullptr;
  std::unique_ptr<GraphPool> mem;
  ~Graph() {
    if (exec) cudaGraphExecDestroy(exec);
    release(std::move(mem));
  }
  // The pool's free blocks back to the general lists; its blocks still held by tensors free
  // there later (the graph that wrote them is gone).
  static void release(std::unique_ptr<GraphPool> g) {
    if (!g) return;
    std::lock_guard<std::mutex> lk(pool().mu);
    for (void* p : g->owned) pool().owner.erase(p);
    for (auto& [cls, v] : g->free)
      for (void* p : v) {
        pool().free[(int)Arena::Step][cls].push_back(p);
        pool().stats.bytes_cached += cls;
      }
  }
};

namespace {
std::unique_ptr<GraphPool> g_capture_pool;  // the pool of the capture under way
}

void capture_begin() {
  CTX_CHECK(!g_capturing.load(), "capture_begin: a capture is already under way");
  g_capture_pool = std::make_unique<GraphPool>();
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    pool().capturing = g_capture_pool.get();
  }
  const cudaError_t e = cudaStreamBeginCapture(stream(), cudaStreamCaptureModeGlobal);
  if (e != cudaSuccess) {
    std::lock_guard<std::mutex> lk(pool().mu);
    pool().capturing = nullptr;
  }
  CTX_CUDA_CHECK(e);
  g_capturing = true;
}

std::shared_ptr<Graph> capture_end(bool keep) {
  CTX_CHECK(g_capturing.load(), "capture_end: no capture is under way");
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream(), &graph);
  g_capturing = false;
  {
    std::lock_guard<std::mutex> lk(pool().mu);
    pool().capturing = nullptr;
  }
  auto out = std::make_shared<Graph>();
  out->mem = std::move(g_capture_pool);
  if (e != cudaSuccess || !keep) {
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();  // the capture's error is reported here, not left for the next launch
    CTX_CHECK(!keep, "CUDA stream capture failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e),
              "): the step did something a CUDA Graph cannot record");
    return nullptr;
  }
  const cudaError_t ie = cudaGraphInstantiate(&out->exec, graph, 0);
  cudaGraphDestroy(graph);
  CTX_CUDA_CHECK(ie);
  g_captures++;
  return out;
}

void graph_replay(const Graph& g) {
  CTX_CUDA_CHECK(cudaGraphLaunch(g.exec, stream()));
  g_replays++;
}

GraphStats graph_stats() { return {g_captures.load(), g_replays.load()}; }

void fill_f32(float* dst, size_t n, float value) {
  fill<float>(dst, (int64_t)n, value);
  synchronize();
}

}  // namespace ctx::cuda
