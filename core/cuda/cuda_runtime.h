// core/cuda/cuda_runtime.h — the CUDA device layer: device discovery, a caching device allocator
// (size classes of core/allocator.h; after the first training step no request reaches
// cudaMalloc), host <-> device copies. Compiled only with CTXLAB_WITH_CUDA; errors are
// ctx::Error naming the call site (core/cuda/check.h). Plain C++ header: no CUDA types.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ctx::cuda {

int device_count();          // 0 when no driver / no GPU (never throws)
std::string device_name();   // of device 0, "" if none
bool emulated();             // true in the CTXLAB_CUDA_EMULATOR build (kernels run on the CPU)
void ensure_allocator();     // registers the caching allocator for Device::CUDA tensors
// Host -> device (bytes): queued behind the stream's earlier work from a pinned staging copy of
// src (src may be reused at once; the host does not wait), or a plain synchronous cudaMemcpy
// above 4 MiB. Device -> host: synchronous (the host waits for the device).
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void synchronize();          // waits for every queued kernel; a kernel's runtime error shows here
// Fills `n` floats at `dst` with `value` on the device (a kernel: proves the toolchain works).
void fill_f32(float* dst, size_t n, float value);
// dst[i] = bf16 bits of src[i] (__float2bfloat16_rn), device pointers: the conversion kernel of
// the bf16 GEMMs (gemm.cu), exposed for its bit-exactness test.
void f32_to_bf16(const float* src, uint16_t* dst, int64_t n);

// The cuBLASLt GEMMs' counters (the speed modes: bf16, tf32; gemm.cu), process-wide. A warm
// training step calls cublasLtMatmul only: descriptors and heuristics stay flat.
struct GemmLtStats {
  uint64_t matmuls = 0;         // cublasLtMatmul calls
  uint64_t bias_epilogues = 0;  // of which added the bias in the epilogue (CUBLASLT_EPILOGUE_BIAS)
  uint64_t descriptors = 0;     // matmul descriptors, matrix layouts and preferences created
  uint64_t heuristics = 0;      // cublasLtMatmulAlgoGetHeuristic calls
  uint64_t plans = 0;           // call shapes cached (one descriptor, three layouts, an algorithm each)
  uint64_t conversions = 0;     // bf16 operands converted by gemm_lt itself (f32_to_bf16 into scratch)
  uint64_t kept_operands = 0;   // bf16 operands read from a tensor's kept copy instead
  uint64_t gelu_epilogues = 0;  // of the matmuls, ran a GELU epilogue (GELU_AUX_BIAS, DGELU)
  uint64_t epilogue_fallbacks = 0;  // epilogue calls cuBLASLt had no algorithm for (composed instead)
};
GemmLtStats gemm_lt_stats();

// The bf16 copies kept with f32 storages under --precision bf16 (cuda_backend.cu): made by a
// conversion pass (the first GEMM or attention to read a tensor without one), or written by the
// kernel that produced the tensor, in its own pass (cross-entropy's dlogits, split_heads' q | k | v,
// merge_heads' backward output).
struct KeptCopyStats {
  uint64_t converted = 0, written = 0;
};
KeptCopyStats kept_copy_stats();

// The caching allocator's counters (process-wide).
struct DeviceAllocStats {
  uint64_t requests = 0;      // allocations asked for (tensors created on the device)
  uint64_t device_mallocs = 0;  // of which reached cudaMalloc
  size_t bytes_cached = 0;    // held in the free lists
};
DeviceAllocStats device_alloc_stats();

// Host <-> device copies made through this layer (process-wide), every one of them: to_host and
// to_device are a cudaMemcpy, which waits for the kernels queued before it (device -> host; host
// -> device from pageable memory), so either count growing inside a training step is a host
// round trip. to_device_queued are the staged uploads (pinned block, cudaMemcpyAsync, an event):
// the host goes on. Device -> device copies stay on the stream and are not counted.
struct HostCopyStats {
  uint64_t to_host = 0;           // device -> host (the host waits for the result)
  uint64_t to_device = 0;         // host -> device, synchronous (above 4 MiB: weights, checkpoints)
  uint64_t to_device_queued = 0;  // host -> device through pinned staging (the host does not wait)
  uint64_t staging_allocs = 0;    // pinned staging blocks allocated (cudaMallocHost)
};
HostCopyStats host_copy_stats();

// Stream capture of the library stream into a CUDA Graph (Backend::capture_begin / capture_end,
// core/step_graph.h). Between capture_begin and capture_end the work queued on stream() is
// recorded, not run; device allocations come from a pool that belongs to the graph (only its
// capture allocates from it, so replays never write memory handed to anyone else); a copy
// between the host and the device throws, naming itself. capture_end(false) abandons the
// capture (after an exception in the captured code); capture_end(true) returns the instantiated
// graph or throws with CUDA's error. graph_replay queues the graph on stream().
struct Graph;
void capture_begin();
std::shared_ptr<Graph> capture_end(bool keep);
void graph_replay(const Graph& g);
struct GraphStats {
  uint64_t captures = 0, replays = 0;
};
GraphStats graph_stats();

}  // namespace ctx::cuda
