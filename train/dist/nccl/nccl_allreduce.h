// train/dist/nccl/nccl_allreduce.h — the gradient allreduce for --device cuda under MPI: NCCL's
// ncclAllReduce (ncclAvg) on the device buffer, over a non-blocking communicator
// (ncclConfig_t.blocking = 0, NCCL >= 2.14), so that no NCCL call waits for another rank: each
// call only starts its operation, and the trainer polls it (`poll`: ncclCommGetAsyncError, then the
// allreduce's stream) under --dist-timeout and calls `abort` (ncclCommAbort) past it
// (train/dist/distributed.cpp, train/dist/bounded_wait.h). Compiled only in the real CUDA build
// with NCCL found (CTXLAB_WITH_NCCL; not the emulator), into libctxlab_cuda.so, behind its own C
// entry point `ctxlab_nccl_entry` (the CUDA module's table carries no trainer code):
// distributed.cpp finds it with cuda_module_symbol. Nothing here calls MPI or throws: every
// function returns an NcclStatus and writes its reason on failure. docs/distributed.md.
#pragma once
#include <cstdint>

namespace ctx::dist::nccl {

// What a start and a poll return.
enum NcclStatus : int { kNcclPending = 0, kNcclDone = 1, kNcclFailed = 2 };

// What `ctxlab_nccl_entry` hands back; `abi` must equal kNcclModuleAbi. On kNcclFailed each
// function writes a one-line reason (the NCCL / CUDA call and its message) into err[0..err_len).
constexpr int kNcclModuleAbi = 2;
struct NcclModule {
  int abi;
  int id_bytes;  // sizeof(ncclUniqueId): what rank 0 makes and every rank receives
  // Rank 0: a new ncclUniqueId into id[0..id_bytes). Local (never kNcclPending).
  int (*unique_id)(void* id, char* err, int err_len);
  // Starts ncclCommInitRankConfig (non-blocking) of rank `rank` of `size` from rank 0's id.
  int (*init_start)(const void* id, int rank, int size, char* err, int err_len);
  // Starts data[0..n) <- mean over ranks, in place (device f32), after the work queued on the
  // device (the backward pass that wrote the gradients). kNcclPending until its stream is done.
  int (*allreduce_start)(float* data, int64_t n, char* err, int err_len);
  // Starts ncclCommFinalize (kNcclDone when there is no communicator).
  int (*finalize_start)(char* err, int err_len);
  // The operation started last: kNcclPending, kNcclDone, or kNcclFailed (ncclCommGetAsyncError
  // reports an error, e.g. a peer died, or the stream failed).
  int (*poll)(char* err, int err_len);
  // ncclCommAbort (stops the communicator's kernels, frees it) and the stream; idempotent.
  void (*abort)();
  // ncclCommDestroy after a finalize that completed; idempotent.
  void (*destroy)();
};
using NcclModuleEntry = const NcclModule* (*)();

}  // namespace ctx::dist::nccl
