// core/cuda/emu/runtime.cpp — the emulated CUDA runtime: errors (per-thread last error, sticky
// faults with a detailed message), the device-allocation registry (each cudaMalloc its own region
// of the device arena, arena.cpp: NaN-filled, 64 KiB guards on both sides; the mapped slack after
// the end is also checked after every kernel), copies with direction and bounds checks, streams,
// events, device properties, counters and the schedule setting.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "core/cuda/emu/emu_internal.h"
#include "core/cuda/emu/emu_runtime.h"

#include "core/cuda/emu/emu_asan.h"  // CUEMU_ASAN

namespace cuemu::detail {
namespace {

std::string hex(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

// ---- errors ----
std::atomic<int> g_sticky{cudaSuccess};
std::mutex g_msg_mu;
std::string g_last_message;
thread_local cudaError_t t_last_error = cudaSuccess;

void record_message(const std::string& m) {
  std::lock_guard<std::mutex> lk(g_msg_mu);
  g_last_message = m;
}

// ---- allocations ----
struct Alloc {
  size_t bytes;       // what the caller asked for
  uint64_t serial;    // 1 for the first cudaMalloc of the process, 2 for the next...
};
struct Registry {
  std::mutex mu;
  std::map<uintptr_t, Alloc> live;
  std::set<uintptr_t> freed;   // bases freed and not reused since: a second free is a double free
  std::map<uintptr_t, size_t> pinned;  // cudaMallocHost blocks (kernels may read them: mapped memory)
  uint64_t serial = 0;
  uint64_t live_bytes = 0;
};
Registry& reg() {
  static Registry* r = new Registry();  // never destroyed: kernels may run during static teardown
  return *r;
}
// The live allocation containing p (or ending exactly at p), nullptr if none. Caller holds mu.
const std::pair<const uintptr_t, Alloc>* find_alloc(Registry& r, const void* p) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.live.upper_bound(a);
  if (it == r.live.begin()) return nullptr;
  --it;
  if (a <= it->first + it->second.bytes) return &*it;
  return nullptr;
}

std::atomic<uint64_t> g_mallocs{0}, g_frees{0}, g_launches{0}, g_memcpys{0};
std::atomic<uint64_t> g_captured_nodes{0}, g_graph_launches{0};
// copies by where the bytes went (host -> device, device -> host), whatever the kind said
std::atomic<uint64_t> g_uploads{0}, g_downloads{0}, g_upload_bytes{0}, g_download_bytes{0};

// ---- streams, events, kernel attributes ----
std::mutex g_obj_mu;
std::set<CUstream_st*> g_streams;
std::set<CUevent_st*> g_events;
std::unordered_map<const void*, size_t> g_max_smem;

// ---- schedule ----
std::atomic<int> g_schedule{-1};  // -1: not read from the environment yet
std::atomic<uint64_t> g_seed{0};
void init_schedule() {
  if (g_schedule.load() >= 0) return;
  Schedule s = Schedule::Forward;
  uint64_t seed = 0;
  if (const char* e = std::getenv("CTXLAB_EMU_SCHEDULE")) {
    if (!cuemu::parse_schedule(e, &s, &seed)) {
      std::fprintf(stderr,
                   "[cuda-emu] CTXLAB_EMU_SCHEDULE='%s' is not forward|reverse|shuffle[:SEED]; using forward\n", e);
      s = Schedule::Forward;
      seed = 0;
    }
  }
  int expected = -1;
  if (g_schedule.compare_exchange_strong(expected, (int)s)) g_seed = seed;
}

bool valid_device_id(int d) { return d == 0; }

}  // namespace

// ---- internal API ----
void set_last_error(cudaError_t e) { t_last_error = e; }

bool quiet() {
  static const bool q = [] {
    const char* e = std::getenv("CTXLAB_EMU_QUIET");
    return e && std::strcmp(e, "1") == 0;
  }();
  return q;
}

void raise_fault(cudaError_t code, const std::string& message) {
  int expected = cudaSuccess;
  g_sticky.compare_exchange_strong(expected, (int)code);
  record_message(message);
  if (!quiet()) std::fprintf(stderr, "[cuda-emu] %s\n", message.c_str());
}

void report(const std::string& message) {
  record_message(message);
  if (!quiet()) std::fprintf(stderr, "[cuda-emu] %s\n", message.c_str());
}

cudaError_t reject(cudaError_t code, const std::string& message) {
  t_last_error = code;
  report(message);
  return code;
}

cudaError_t sticky_error() { return (cudaError_t)g_sticky.load(); }

void count_launch() { ++g_launches; }
void count_captured_node() { ++g_captured_nodes; }
void count_graph_launch() { ++g_graph_launches; }

uint64_t schedule_seed() {
  init_schedule();
  return g_seed.load();
}

size_t max_dynamic_shared(const void* kernel) {
  std::lock_guard<std::mutex> lk(g_obj_mu);
  auto it = g_max_smem.find(kernel);
  return it == g_max_smem.end() ? kDefaultDynamicShared : it->second;
}

bool valid_stream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return true;
  std::lock_guard<std::mutex> lk(g_obj_mu);
  return g_streams.count(s) != 0;
}

std::string check_redzones(const char* kernel_name) {
#if defined(CUEMU_ASAN)
  // Under ASan the slack and the guards are poisoned: a write there is reported by ASan at the write.
  (void)kernel_name;
  return "";
#else
  // The access hooks (access.cpp) report an out-of-bounds access at the access; this catches a
  // write into the mapped slack after an allocation by code they do not see.
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  std::string report;
  static const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (auto& [base, a] : r.live) {
    unsigned char* p = reinterpret_cast<unsigned char*>(base);
    const size_t end = std::min((a.bytes + page - 1) / page * page, a.bytes + kRedzoneBytes);
    for (size_t i = a.bytes; i < end; ++i) {
      if (p[i] != kRedzoneByte) {
        std::ostringstream os;
        os << "out-of-bounds write by kernel " << kernel_name << ": allocation #" << a.serial << " ("
           << a.bytes << " bytes at " << hex(p) << ") was written " << (i - a.bytes)
           << " bytes past its end (byte " << i << ")";
        if (!report.empty()) report += "; ";
        report += os.str();
        std::memset(p + a.bytes, kRedzoneByte, end - a.bytes);  // repair: report each write once
        break;
      }
    }
  }
  return report;
#endif
}

cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attr, int value) {
  if (kernel == nullptr) return reject(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: null kernel");
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
    if (value < -1 || value > 100)
      return reject(cudaErrorInvalidValue, "cudaFuncSetAttribute: carveout " + std::to_string(value) +
                                               " is not -1 or a percentage 0..100");
    return cudaSuccess;
  }
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    return reject(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute " + std::to_string((int)attr) +
                                             " is not supported by the emulator");
  if (value < 0 || (size_t)value > kMaxDynamicShared)
    return reject(cudaErrorInvalidValue, "cudaFuncSetAttribute: MaxDynamicSharedMemorySize " +
                                             std::to_string(value) + " is outside 0.." +
                                             std::to_string(kMaxDynamicShared) + " bytes");
  std::lock_guard<std::mutex> lk(g_obj_mu);
  g_max_smem[kernel] = (size_t)value;
  return cudaSuccess;
}

}  // namespace cuemu::detail

// ======================= the public emulator API =======================
namespace cuemu {
using namespace detail;

Stats stats() {
  Stats s;
  s.mallocs = g_mallocs;
  s.frees = g_frees;
  s.launches = g_launches;
  s.memcpys = g_memcpys;
  s.uploads = g_uploads;
  s.downloads = g_downloads;
  s.upload_bytes = g_upload_bytes;
  s.download_bytes = g_download_bytes;
  s.captured_nodes = g_captured_nodes;
  s.graph_launches = g_graph_launches;
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  s.live_allocations = r.live.size();
  s.live_bytes = r.live_bytes;
  return s;
}
void reset_stats() {
  g_mallocs = 0;
  g_frees = 0;
  g_launches = 0;
  g_memcpys = 0;
  g_uploads = 0;
  g_downloads = 0;
  g_upload_bytes = 0;
  g_download_bytes = 0;
  g_captured_nodes = 0;
  g_graph_launches = 0;
}
std::string last_fault() {
  std::lock_guard<std::mutex> lk(g_msg_mu);
  return g_last_message;
}
void clear_faults() {
  g_sticky = cudaSuccess;
  t_last_error = cudaSuccess;
  std::lock_guard<std::mutex> lk(g_msg_mu);
  g_last_message.clear();
}
bool parse_schedule(const std::string& text, Schedule* s, uint64_t* seed) {
  *seed = 0;
  if (text == "forward") {
    *s = Schedule::Forward;
  } else if (text == "reverse") {
    *s = Schedule::Reverse;
  } else if (text == "shuffle") {
    *s = Schedule::Shuffle;
  } else if (text.rfind("shuffle:", 0) == 0 && text.size() > 8 && text.size() <= 8 + 19 &&
             text.find_first_not_of("0123456789", 8) == std::string::npos) {
    *s = Schedule::Shuffle;
    *seed = std::strtoull(text.c_str() + 8, nullptr, 10);
  } else {
    return false;
  }
  return true;
}
void set_schedule(Schedule s, uint64_t seed) {
  g_schedule = (int)s;
  g_seed = seed;
}
Schedule schedule() {
  init_schedule();
  return (Schedule)g_schedule.load();
}
bool is_device_range(const void* p, size_t bytes) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto* a = find_alloc(r, p);
  return a && reinterpret_cast<uintptr_t>(p) + bytes <= a->first + a->second.bytes;
}
bool is_device_pointer(const void* p) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  return find_alloc(r, p) != nullptr;
}
bool is_kernel_accessible(const void* p) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  if (find_alloc(r, p)) return true;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.pinned.upper_bound(a);
  if (it == r.pinned.begin()) return false;
  --it;
  return a <= it->first + it->second;
}
}  // namespace cuemu

// ======================= the CUDA runtime API =======================
using namespace cuemu::detail;

#define CUEMU_RETURN_IF_STICKY()                    \
  do {                                              \
    cudaError_t s_ = sticky_error();                \
    if (s_ != cudaSuccess) return t_last_error = s_; \
  } while (0)

cudaError_t cudaGetLastError() {
  cudaError_t s = sticky_error();
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return s != cudaSuccess ? s : e;
}
cudaError_t cudaPeekAtLastError() {
  cudaError_t s = sticky_error();
  return s != cudaSuccess ? s : t_last_error;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
#define CUEMU_NAME(x) \
  case x:             \
    return #x;
    CUEMU_NAME(cudaSuccess)
    CUEMU_NAME(cudaErrorInvalidValue)
    CUEMU_NAME(cudaErrorMemoryAllocation)
    CUEMU_NAME(cudaErrorInitializationError)
    CUEMU_NAME(cudaErrorInvalidConfiguration)
    CUEMU_NAME(cudaErrorInvalidPitchValue)
    CUEMU_NAME(cudaErrorInvalidSymbol)
    CUEMU_NAME(cudaErrorInvalidDevicePointer)
    CUEMU_NAME(cudaErrorInvalidMemcpyDirection)
    CUEMU_NAME(cudaErrorInvalidDeviceFunction)
    CUEMU_NAME(cudaErrorNoDevice)
    CUEMU_NAME(cudaErrorInvalidDevice)
    CUEMU_NAME(cudaErrorInvalidResourceHandle)
    CUEMU_NAME(cudaErrorIllegalState)
    CUEMU_NAME(cudaErrorNotReady)
    CUEMU_NAME(cudaErrorIllegalAddress)
    CUEMU_NAME(cudaErrorLaunchOutOfResources)
    CUEMU_NAME(cudaErrorAssert)
    CUEMU_NAME(cudaErrorIllegalInstruction)
    CUEMU_NAME(cudaErrorMisalignedAddress)
    CUEMU_NAME(cudaErrorLaunchFailure)
    CUEMU_NAME(cudaErrorNotSupported)
    CUEMU_NAME(cudaErrorStreamCaptureUnsupported)
    CUEMU_NAME(cudaErrorStreamCaptureInvalidated)
    CUEMU_NAME(cudaErrorStreamCaptureMerge)
    CUEMU_NAME(cudaErrorStreamCaptureUnmatched)
    CUEMU_NAME(cudaErrorStreamCaptureUnjoined)
    CUEMU_NAME(cudaErrorStreamCaptureIsolation)
    CUEMU_NAME(cudaErrorStreamCaptureImplicit)
    CUEMU_NAME(cudaErrorCapturedEvent)
    CUEMU_NAME(cudaErrorStreamCaptureWrongThread)
    CUEMU_NAME(cudaErrorTimeout)
    CUEMU_NAME(cudaErrorGraphExecUpdateFailure)
    CUEMU_NAME(cudaErrorUnknown)
#undef CUEMU_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidSymbol: return "invalid device symbol";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction: return "invalid device function";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorAssert: return "device-side assert triggered";
    case cudaErrorIllegalInstruction: return "an illegal instruction was encountered";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorTimeout: return "wait operation timed out";
    case cudaErrorGraphExecUpdateFailure:
      return "the graph update was not performed because it included changes which violated constraints specific "
             "to instantiated graph update";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unrecognized error code";
}

// ---- device ----
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return reject(cudaErrorInvalidValue, "cudaGetDeviceCount: null count");
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid_device_id(device))
    return reject(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): the emulator has device 0 only");
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return reject(cudaErrorInvalidValue, "cudaGetDevice: null device");
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!p) return reject(cudaErrorInvalidValue, "cudaGetDeviceProperties: null prop");
  if (!valid_device_id(device))
    return reject(cudaErrorInvalidDevice, "cudaGetDeviceProperties(" + std::to_string(device) + "): the emulator has device 0 only");
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "ctxlab CUDA emulator (emulated H100-like device on the CPU)");
  p->totalGlobalMem = 80ull << 30;
  p->sharedMemPerBlock = kDefaultDynamicShared;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = 2147483647;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->multiProcessorCount = 132;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->memoryBusWidth = 5120;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->unifiedAddressing = 1;
  p->sharedMemPerBlockOptin = kMaxDynamicShared;
  p->maxBlocksPerMultiProcessor = 32;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return reject(cudaErrorInvalidValue, "cudaDeviceGetAttribute: null value");
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device);
  if (e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = p.maxThreadsDim[0]; break;
    case cudaDevAttrMaxBlockDimY: *value = p.maxThreadsDim[1]; break;
    case cudaDevAttrMaxBlockDimZ: *value = p.maxThreadsDim[2]; break;
    case cudaDevAttrMaxGridDimX: *value = p.maxGridSize[0]; break;
    case cudaDevAttrMaxGridDimY: *value = p.maxGridSize[1]; break;
    case cudaDevAttrMaxGridDimZ: *value = p.maxGridSize[2]; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)p.sharedMemPerBlock; break;
    case cudaDevAttrWarpSize: *value = p.warpSize; break;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; break;
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = (int)p.sharedMemPerMultiprocessor; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)p.sharedMemPerBlockOptin; break;
    default:
      return reject(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute " + std::to_string((int)attr) +
                                               " is not supported by the emulator");
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  if (capture_active())
    if (cudaError_t e = capture_sync_device("cudaDeviceSynchronize"); e != cudaSuccess) return e;
  CUEMU_RETURN_IF_STICKY();
  return cudaSuccess;
}
cudaError_t cudaDeviceReset() {
  Registry& r = reg();
  {
    std::lock_guard<std::mutex> lk(r.mu);
    for (auto& [base, a] : r.live) arena_free(reinterpret_cast<void*>(base));
    r.live.clear();
    r.freed.clear();
    r.live_bytes = 0;
  }
  cuemu::clear_faults();
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (!free_bytes || !total_bytes) return reject(cudaErrorInvalidValue, "cudaMemGetInfo: null argument");
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  *total_bytes = 80ull << 30;
  *free_bytes = *total_bytes > r.live_bytes ? *total_bytes - r.live_bytes : 0;
  return cudaSuccess;
}

// ---- memory ----
cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (!ptr) return reject(cudaErrorInvalidValue, "cudaMalloc: null result pointer");
  CUEMU_RETURN_IF_STICKY();
  if (capture_active())
    if (cudaError_t e = capture_unsafe_call("cudaMalloc"); e != cudaSuccess) return e;
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;  // as CUDA: success and a null pointer
  if (bytes > (size_t(1) << 44))
    return reject(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(bytes) + " bytes): out of memory");
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  void* p = arena_alloc(bytes, r.serial + 1);
  if (!p) return reject(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(bytes) + " bytes): out of memory");
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  r.live[a] = Alloc{bytes, ++r.serial};
  r.freed.erase(a);
  r.live_bytes += bytes;
  ++g_mallocs;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  CUEMU_RETURN_IF_STICKY();
  if (capture_active())
    if (cudaError_t e = capture_unsafe_call("cudaFree"); e != cudaSuccess) return e;
  Registry& r = reg();
  uintptr_t a = reinterpret_cast<uintptr_t>(ptr);
  {
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.live.find(a);
    if (it == r.live.end()) {
      if (r.freed.count(a))
        return reject(cudaErrorInvalidValue, "cudaFree(" + hex(ptr) + "): double free (already freed)");
      auto* in = find_alloc(r, ptr);
      if (in)
        return reject(cudaErrorInvalidValue, "cudaFree(" + hex(ptr) + "): points inside allocation #" +
                                                 std::to_string(in->second.serial) + ", not at its start");
      return reject(cudaErrorInvalidValue, "cudaFree(" + hex(ptr) + "): not a pointer returned by cudaMalloc");
    }
    r.live_bytes -= it->second.bytes;
    r.live.erase(it);
    r.freed.insert(a);
    arena_free(ptr);
  }
  ++g_frees;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (!ptr) return reject(cudaErrorInvalidValue, "cudaMallocHost: null result pointer");
  if (capture_active())
    if (cudaError_t e = capture_unsafe_call("cudaMallocHost"); e != cudaSuccess) return e;
  *ptr = std::aligned_alloc(kAllocAlign, (bytes + kAllocAlign - 1) / kAllocAlign * kAllocAlign + kAllocAlign);
  if (!*ptr) return reject(cudaErrorMemoryAllocation, "cudaMallocHost: out of memory");
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  r.pinned[reinterpret_cast<uintptr_t>(*ptr)] = bytes;
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* ptr) {
  if (!ptr) return cudaSuccess;
  if (capture_active())
    if (cudaError_t e = capture_unsafe_call("cudaFreeHost"); e != cudaSuccess) return e;
  Registry& r = reg();
  {
    std::lock_guard<std::mutex> lk(r.mu);
    if (!r.pinned.erase(reinterpret_cast<uintptr_t>(ptr)))
      return reject(cudaErrorInvalidValue, "cudaFreeHost(" + hex(ptr) + "): not a pointer returned by cudaMallocHost");
  }
  std::free(ptr);
  return cudaSuccess;
}

namespace {
// Where a copy endpoint lies: 0 host, 1 device (range inside one allocation), -1 a device
// pointer whose range overruns its allocation (message filled).
int classify(const void* p, size_t bytes, const char* what, std::string* msg) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  auto* a = find_alloc(r, p);
  if (!a) return 0;
  uintptr_t x = reinterpret_cast<uintptr_t>(p);
  if (x + bytes <= a->first + a->second.bytes) return 1;
  *msg = std::string(what) + " " + hex(p) + " + " + std::to_string(bytes) + " bytes overruns allocation #" +
         std::to_string(a->second.serial) + " (" + std::to_string(a->second.bytes) + " bytes at " +
         hex(reinterpret_cast<void*>(a->first)) + ")";
  return -1;
}
// The counters' record of a copy or memset within device memory (its DRAM bytes).
void count_device_bytes(const char* what, size_t read, size_t written) {
  if (!cuemu::counters()) return;
  cuemu::LaunchCounters rec;
  rec.kernel = what;
  rec.dram_read_bytes = rec.bytes_read = read;
  rec.dram_write_bytes = rec.bytes_written = written;
  cuemu::detail::counters_library_call(rec);
}
const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an invalid cudaMemcpyKind";
}
// Checks a copy (pointers, kind, bounds); *s / *d: where the source / destination lie (0 host, 1 device).
cudaError_t check_copy(const char* fn, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, int* s, int* d) {
  if (!dst || !src) return reject(cudaErrorInvalidValue, std::string(fn) + ": null pointer");
  if ((int)kind < 0 || (int)kind > 4)
    return reject(cudaErrorInvalidMemcpyDirection, std::string(fn) + ": kind " + std::to_string((int)kind) +
                                                       " is not a cudaMemcpyKind");
  std::string msg;
  *d = classify(dst, bytes, "destination", &msg);
  if (*d < 0) return reject(cudaErrorInvalidValue, std::string(fn) + ": " + msg);
  *s = classify(src, bytes, "source", &msg);
  if (*s < 0) return reject(cudaErrorInvalidValue, std::string(fn) + ": " + msg);
  if (kind != cudaMemcpyDefault) {
    const int want_src = (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice);
    const int want_dst = (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice);
    if (*s != want_src || *d != want_dst) {
      const char* where[2] = {"host", "device"};
      return reject(cudaErrorInvalidMemcpyDirection,
                    std::string(fn) + " with " + kind_name(kind) + ": the source " + hex(src) + " is " +
                        where[*s] + " memory and the destination " + hex(dst) + " is " + where[*d] + " memory");
    }
  }
  return cudaSuccess;
}
cudaError_t checked_copy(const char* fn, void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  CUEMU_RETURN_IF_STICKY();
  if (bytes == 0) return cudaSuccess;
  int s = 0, d = 0;
  if (cudaError_t e = check_copy(fn, dst, src, bytes, kind, &s, &d); e != cudaSuccess) return e;
  std::memmove(dst, src, bytes);
  ++g_memcpys;
  if (s == 0 && d == 1) ++g_uploads, g_upload_bytes += bytes;
  if (s == 1 && d == 0) ++g_downloads, g_download_bytes += bytes;
  if (s == 1 && d == 1) count_device_bytes("cudaMemcpy (device to device)", bytes, bytes);
  return cudaSuccess;
}
cudaError_t checked_memset(const char* fn, void* dst, int value, size_t bytes) {
  CUEMU_RETURN_IF_STICKY();
  if (bytes == 0) return cudaSuccess;
  std::string msg;
  int d = classify(dst, bytes, "destination", &msg);
  if (d < 0) return reject(cudaErrorInvalidValue, std::string(fn) + ": " + msg);
  if (d == 0) return reject(cudaErrorInvalidValue, std::string(fn) + "(" + hex(dst) + "): not device memory");
  std::memset(dst, value, bytes);
  count_device_bytes("cudaMemset", 0, bytes);
  return cudaSuccess;
}
// True when [p, p + bytes) lies inside one cudaMallocHost block.
bool is_pinned_range(const void* p, size_t bytes) {
  Registry& r = reg();
  std::lock_guard<std::mutex> lk(r.mu);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = r.pinned.upper_bound(a);
  if (it == r.pinned.begin()) return false;
  --it;
  return a + bytes <= it->first + it->second;
}
// cudaMemcpyAsync while something captures: checked now, recorded if `stream` captures (pinned host
// memory only: a captured step must not read pageable memory), else run.
cudaError_t capture_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  const char* fn = "cudaMemcpyAsync";
  CUEMU_RETURN_IF_STICKY();
  if (bytes == 0) return cudaSuccess;
  int s = 0, d = 0;
  if (cudaError_t e = check_copy(fn, dst, src, bytes, kind, &s, &d); e != cudaSuccess) return e;
  if (stream_capturing(stream)) {
    const void* host[2] = {s == 0 ? src : nullptr, d == 0 ? dst : nullptr};
    for (const void* h : host)
      if (h && !is_pinned_range(h, bytes))
        return capture_refuse(stream, cudaErrorStreamCaptureUnsupported,
                              std::string(fn) + " of " + std::to_string(bytes) + " bytes " +
                                  (h == src ? "from" : "to") + " pageable host memory " + hex(h) +
                                  " while the stream captures: the emulator records host copies only from/to pinned "
                                  "memory (cudaMallocHost), read or written when the graph runs");
  }
  cudaError_t ret;
  if (capture_takes(stream, fn, [=](cudaStream_t) { return checked_copy(fn, dst, src, bytes, kind); }, &ret)) return ret;
  return checked_copy(fn, dst, src, bytes, kind);
}
}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (capture_active())
    if (cudaError_t e = capture_sync_call("cudaMemcpy"); e != cudaSuccess) return e;
  return checked_copy("cudaMemcpy", dst, src, bytes, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: unknown stream");
  if (capture_active()) return capture_copy(dst, src, bytes, kind, stream);
  return checked_copy("cudaMemcpyAsync", dst, src, bytes, kind);
}
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  if (capture_active())
    if (cudaError_t e = capture_sync_call("cudaMemset"); e != cudaSuccess) return e;
  return checked_memset("cudaMemset", dst, value, bytes);
}
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  const char* fn = "cudaMemsetAsync";
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, "cudaMemsetAsync: unknown stream");
  if (capture_active()) {
    CUEMU_RETURN_IF_STICKY();
    std::string msg;
    if (bytes > 0 && classify(dst, bytes, "destination", &msg) != 1)
      return checked_memset(fn, dst, value, bytes);  // refused as when nothing captures
    cudaError_t ret;
    if (capture_takes(stream, fn, [=](cudaStream_t) { return checked_memset(fn, dst, value, bytes); }, &ret)) return ret;
  }
  return checked_memset(fn, dst, value, bytes);
}

// ---- streams and events ----
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream) return reject(cudaErrorInvalidValue, "cudaStreamCreate: null result pointer");
  *stream = new CUstream_st{flags};
  std::lock_guard<std::mutex> lk(g_obj_mu);
  g_streams.insert(*stream);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (capture_active() && valid_stream(stream))
    if (cudaError_t e = capture_stream_destroy(stream); e != cudaSuccess) return e;
  {
    std::lock_guard<std::mutex> lk(g_obj_mu);
    if (!g_streams.erase(stream))
      return reject(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(" + hex(stream) + "): not a live stream");
  }
  delete stream;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: unknown stream");
  if (capture_active())
    if (cudaError_t e = capture_sync_stream(stream, "cudaStreamSynchronize"); e != cudaSuccess) return e;
  CUEMU_RETURN_IF_STICKY();
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown stream");
  if (flags & ~(unsigned)cudaEventWaitExternal)
    return reject(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags " + std::to_string(flags) +
                                             " (cudaEventWaitDefault or cudaEventWaitExternal)");
  bool recorded;
  CaptureMark mark;
  cudaStream_t event_stream;
  {
    std::lock_guard<std::mutex> lk(g_obj_mu);
    if (!g_events.count(event)) return reject(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: unknown event");
    recorded = event->recorded || event->capture != 0;
    mark = CaptureMark{event->capture, event->capture_seq};
    event_stream = event->capture_stream;
  }
  if (capture_active()) return capture_wait_event(stream, recorded, mark, event_stream, flags);
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (!event) return reject(cudaErrorInvalidValue, "cudaEventCreate: null result pointer");
  *event = new CUevent_st{flags, false, {}};
  std::lock_guard<std::mutex> lk(g_obj_mu);
  g_events.insert(*event);
  return cudaSuccess;
}
namespace {
// Marks the event complete now (a direct cudaEventRecord, or its node when a graph runs).
cudaError_t record_event(cudaEvent_t event) {
  std::lock_guard<std::mutex> lk(g_obj_mu);
  if (!g_events.count(event)) return reject(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown event");
  event->recorded = true;
  event->when = std::chrono::steady_clock::now();
  event->capture = 0;
  return cudaSuccess;
}
cudaError_t event_wait(const char* fn, cudaEvent_t event) {
  uint64_t capture = 0;
  {
    std::lock_guard<std::mutex> lk(g_obj_mu);
    if (!g_events.count(event)) return reject(cudaErrorInvalidResourceHandle, std::string(fn) + ": unknown event");
    capture = event->capture;
  }
  if (capture_active())
    if (cudaError_t e = capture_sync_event(capture, fn); e != cudaSuccess) return e;
  CUEMU_RETURN_IF_STICKY();
  return cudaSuccess;
}
}  // namespace
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!valid_stream(stream)) return reject(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown stream");
  if (capture_active()) {
    {
      std::lock_guard<std::mutex> lk(g_obj_mu);
      if (!g_events.count(event)) return reject(cudaErrorInvalidResourceHandle, "cudaEventRecord: unknown event");
    }
    cudaError_t ret;
    CaptureMark mark;
    if (capture_takes(stream, "cudaEventRecord", [event](cudaStream_t) { return record_event(event); }, &ret, &mark)) {
      if (mark.capture) {  // recorded: the event is a captured one until the capture ends
        std::lock_guard<std::mutex> lk(g_obj_mu);
        event->capture = mark.capture;
        event->capture_seq = mark.seq;
        event->capture_stream = stream;
      }
      return ret;
    }
  }
  return record_event(event);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) { return event_wait("cudaEventSynchronize", event); }
cudaError_t cudaEventQuery(cudaEvent_t event) { return event_wait("cudaEventQuery", event); }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return reject(cudaErrorInvalidValue, "cudaEventElapsedTime: null result pointer");
  std::lock_guard<std::mutex> lk(g_obj_mu);
  if (!g_events.count(start) || !g_events.count(end))
    return reject(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: unknown event");
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return reject(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was created with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded)
    return reject(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: an event was never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->when - start->when).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  {
    std::lock_guard<std::mutex> lk(g_obj_mu);
    if (!g_events.erase(event))
      return reject(cudaErrorInvalidResourceHandle, "cudaEventDestroy(" + hex(event) + "): not a live event");
  }
  delete event;
  return cudaSuccess;
}
