// train/dist/nccl/nccl_allreduce.cpp — NCCL allreduce of device gradients (see nccl_allreduce.h).
#include "train/dist/nccl/nccl_allreduce.h"

#include <cuda_runtime_api.h>
#define OMPI_SKIP_MPICXX 1   // the C API only: no C++ bindings (their header warns)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

#include "core/error.h"

namespace ctx::dist::nccl {

namespace {

ncclComm_t g_comm = nullptr;
cudaStream_t g_stream = nullptr;

void check_nccl(ncclResult_t r, const char* call) {
  CTX_CHECK(r == ncclSuccess, "NCCL: ", call, " failed: ", ncclGetErrorString(r),
            " (another rank died or the network failed; the job ends)");
}
void check_cuda(cudaError_t e, const char* call) {
  CTX_CHECK(e == cudaSuccess, "CUDA: ", call, " failed: ", cudaGetErrorString(e));
}

void ensure_comm(int rank, int size) {
  if (g_comm) return;
  ncclUniqueId id;
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  CTX_CHECK(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) == MPI_SUCCESS,
            "MPI: MPI_Bcast of the NCCL id failed on rank ", rank);
  check_nccl(ncclCommInitRank(&g_comm, size, id, rank), "ncclCommInitRank");
  check_cuda(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

}  // namespace

void allreduce_mean_f32(float* data, int64_t n, int rank, int size) {
  ensure_comm(rank, size);
  // The backend queues its kernels on the legacy default stream; ours is non-blocking, so wait
  // for the gradients explicitly, then for the allreduce (the optimizer reads them next).
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before the allreduce)");
  check_nccl(ncclAllReduce(data, data, (size_t)n, ncclFloat, ncclAvg, g_comm, g_stream), "ncclAllReduce");
  check_cuda(cudaStreamSynchronize(g_stream), "cudaStreamSynchronize (ncclAllReduce)");
}

void finalize() {
  if (g_comm) ncclCommDestroy(g_comm);
  if (g_stream) cudaStreamDestroy(g_stream);
  g_comm = nullptr;
  g_stream = nullptr;
}

}  // namespace ctx::dist::nccl

extern "C" __attribute__((visibility("default"))) const ctx::dist::nccl::NcclModule* ctxlab_nccl_entry() {
  static const ctx::dist::nccl::NcclModule m = {ctx::dist::nccl::kNcclModuleAbi,
                                                &ctx::dist::nccl::allreduce_mean_f32,
                                                &ctx::dist::nccl::finalize};
  return &m;
}
