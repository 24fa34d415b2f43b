// core/cuda/emu/emu_runtime.h — the CUDA runtime API subset the emulator provides, with CUDA's
// names and signatures in the global namespace (memory, copies, streams, events, device queries,
// errors), plus the emulator's own inspection API in namespace cuemu (faults, counters, schedule).
// Work is done synchronously on the calling thread: every "async" call has completed on return,
// except while its stream captures (then it is recorded into a graph: graph.cpp, README "Stream
// capture and graphs").
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cuda/emu/emu_types.h"

// ---- errors ----
cudaError_t cudaGetLastError();   // last error of this host thread (or the sticky fault); resets it
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);

// ---- device ----
cudaError_t cudaGetDeviceCount(int* count);  // 1: the emulated device
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();  // frees every allocation and clears every error, as on hardware
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

// ---- memory ----
cudaError_t cudaMalloc(void** ptr, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** ptr, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
template <class T>
cudaError_t cudaMallocHost(T** ptr, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream = 0);

// ---- streams and events ----
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaEventDestroy(cudaEvent_t event);

// ---- stream capture and CUDA Graphs (graph.cpp; CUDA 12 signatures) ----
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* pCaptureStatus);
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

// ---- kernel attributes ----
namespace cuemu::detail {
cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value);
}
template <class F>
cudaError_t cudaFuncSetAttribute(F* kernel, cudaFuncAttribute attr, int value) {
  return ::cuemu::detail::func_set_attribute(reinterpret_cast<const void*>(kernel), attr, value);
}

// ---- the emulator's own API ----
namespace cuemu {

// Counters since start (or the last reset_stats): a warm training step should add launches only.
struct Stats {
  uint64_t mallocs = 0;    // successful cudaMalloc calls
  uint64_t frees = 0;      // successful cudaFree calls
  uint64_t launches = 0;   // kernels launched (valid configurations, including faulting ones)
  uint64_t memcpys = 0;    // cudaMemcpy / cudaMemcpyAsync calls that copied
  // of those, by where the bytes went (from the pointers, whatever the cudaMemcpyKind): host ->
  // device (pinned host memory is host memory) and device -> host; cudaMemset is neither
  uint64_t uploads = 0, downloads = 0;
  uint64_t upload_bytes = 0, download_bytes = 0;
  uint64_t live_allocations = 0;
  uint64_t live_bytes = 0;
  // stream capture (README "Stream capture and graphs"): nodes recorded into captures (kernels,
  // copies, memsets, event records, cuBLAS calls, graph launches), and cudaGraphLaunch calls that
  // ran. A replayed kernel counts in `launches` (and a replayed copy in `memcpys`...) when it runs.
  uint64_t captured_nodes = 0;
  uint64_t graph_launches = 0;
};
Stats stats();
void reset_stats();

// The detailed message of the latest fault or rejected call ("" if none), e.g.
// "divergent barrier in kernel reduce (block (0,0,0)): threads 0-31 wait at k.cu:12, ...".
std::string last_fault();
// Clears the sticky fault and the last errors (tests that plant faults call it afterwards).
void clear_faults();
// Plants a failure at the end of the next capture: its cudaStreamEndCapture finds it invalidated
// (cudaErrorStreamCaptureInvalidated, no graph), as if an unrecordable call had come last. For
// tests of what a recording refused after all its host code ran must undo.
void fail_next_capture_end();

// Order in which the threads of a block run between two synchronisation points.
enum class Schedule { Forward, Reverse, Shuffle };
// Set programmatically (tests) or from CTXLAB_EMU_SCHEDULE=forward|reverse|shuffle[:SEED].
void set_schedule(Schedule s, uint64_t seed = 0);
// Reads "forward", "reverse", "shuffle" or "shuffle:SEED" (decimal); false for anything else.
bool parse_schedule(const std::string& text, Schedule* s, uint64_t* seed);
Schedule schedule();
// OS threads that run blocks (CTXLAB_EMU_THREADS, default 2); takes effect at the next launch.
void set_worker_threads(int n);
int worker_threads();

// Access checks (README "Access checks"): kernels compiled against the emulator call a hook before
// every load and store (not in ASan builds, whose instrumentation excludes it). True when such
// kernels are loaded: out-of-bounds device and shared accesses are then errors at the access and
// static __shared__ memory is NaN-filled per block.
bool access_checks();
// The race detector (compute-sanitizer racecheck's hazards, shared and global memory), off by
// default; CTXLAB_EMU_RACECHECK=1, or set here (takes effect at the next launch). Without the
// access hooks it checks nothing (a warning is printed once).
void set_racecheck(bool on);
bool racecheck();

// Device-allocation queries used by the launch checks and the cuBLAS stand-in.
// True when [p, p + bytes) lies inside one live cudaMalloc allocation.
bool is_device_range(const void* p, size_t bytes);
// True when p points into (or one past the end of) a live cudaMalloc allocation.
bool is_device_pointer(const void* p);
// is_device_pointer, or inside pinned host memory from cudaMallocHost (mapped: kernels may use it).
bool is_kernel_accessible(const void* p);

namespace detail {
// Records a fault found while running device work: sets the sticky error, prints to stderr.
void raise_fault(cudaError_t code, const std::string& message);
// Records a rejected call (not sticky): the thread's last error and the message.
cudaError_t reject(cudaError_t code, const std::string& message);
// Records and prints a message without touching any error state (rejected cuBLAS calls).
void report(const std::string& message);
cudaError_t sticky_error();
}  // namespace detail
}  // namespace cuemu
