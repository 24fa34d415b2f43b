// train/dist/nccl/nccl_allreduce.h — the gradient allreduce for --device cuda under MPI: NCCL's
// ncclAllReduce (ncclAvg) on the device buffer, its communicator set up once over MPI (rank 0's
// ncclUniqueId broadcast with MPI_Bcast). Compiled only in the real CUDA build with NCCL found
// (CTXLAB_WITH_NCCL; not the emulator), into libctxlab_cuda.so, behind its own C entry point
// `ctxlab_nccl_entry` (the CUDA module's table carries no trainer code): train/dist/distributed.cpp
// finds it with cuda_module_symbol. docs/distributed.md.
#pragma once
#include <cstdint>

namespace ctx::dist::nccl {

// data[0..n) <- mean over ranks, in place; `data` is device memory of f32. Waits for the work
// queued on the device first (the backward pass that wrote the gradients) and for the allreduce
// to finish before returning. Throws ctx::Error naming the NCCL / CUDA call on failure.
void allreduce_mean_f32(float* data, int64_t n, int rank, int size);
void finalize();  // ncclCommDestroy when a communicator was created

// What `ctxlab_nccl_entry` hands back; `abi` must equal kNcclModuleAbi.
constexpr int kNcclModuleAbi = 1;
struct NcclModule {
  int abi;
  void (*allreduce_mean_f32)(float* data, int64_t n, int rank, int size);
  void (*finalize)();
};
using NcclModuleEntry = const NcclModule* (*)();

}  // namespace ctx::dist::nccl
