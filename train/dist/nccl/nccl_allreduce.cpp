// train/dist/nccl/nccl_allreduce.cpp — NCCL allreduce of device gradients over a non-blocking
// communicator (see nccl_allreduce.h).
#include "train/dist/nccl/nccl_allreduce.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 14, 0),
              "ctxlab needs NCCL >= 2.14 (non-blocking communicators: ncclConfig_t.blocking); CMake refuses older");

namespace ctx::dist::nccl {

namespace {

ncclComm_t g_comm = nullptr;
cudaStream_t g_stream = nullptr;
// What poll() waits for: the communicator's state (set-up, finalize), or that and then the stream
// (the allreduce).
enum class Stage { None, Comm, CommThenStream };
Stage g_stage = Stage::None;
const char* g_call = "";  // the call started last, for poll()'s reasons

int fail(char* err, int err_len, const char* call, const char* what, const char* detail) {
  std::snprintf(err, (size_t)err_len, "%s: %s%s%s", call, what, detail && *detail ? "; " : "",
                detail ? detail : "");
  return kNcclFailed;
}

// NCCL's answer to a start or to ncclCommGetAsyncError as a status; ncclInProgress is pending.
int status_of(ncclResult_t r, const char* call, char* err, int err_len) {
  if (r == ncclSuccess) return kNcclDone;
  if (r == ncclInProgress) return kNcclPending;
  return fail(err, err_len, call, ncclGetErrorString(r), ncclGetLastError(g_comm));
}

int cuda_status(cudaError_t e, const char* call, char* err, int err_len) {
  if (e == cudaSuccess) return kNcclDone;
  if (e == cudaErrorNotReady) return kNcclPending;
  return fail(err, err_len, call, cudaGetErrorString(e), nullptr);
}

int started(Stage stage, const char* call, int status) {
  g_stage = status == kNcclFailed ? Stage::None : stage;
  g_call = call;
  return status;
}

int unique_id(void* id, char* err, int err_len) {
  return status_of(ncclGetUniqueId(static_cast<ncclUniqueId*>(id)), "ncclGetUniqueId", err, err_len);
}

int init_start(const void* id, int rank, int size, char* err, int err_len) {
  if (!g_stream &&
      cuda_status(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", err,
                  err_len) == kNcclFailed)
    return kNcclFailed;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every call returns at once (ncclInProgress); poll() waits
  ncclUniqueId uid;
  std::memcpy(&uid, id, sizeof uid);
  const ncclResult_t r = ncclCommInitRankConfig(&g_comm, size, uid, rank, &config);
  return started(Stage::Comm, "ncclCommInitRankConfig", status_of(r, "ncclCommInitRankConfig", err, err_len));
}

int allreduce_start(float* data, int64_t n, char* err, int err_len) {
  // The backend queues its kernels on the legacy default stream; ours is non-blocking, so wait
  // for the gradients first (this rank's own work: no other rank is waited for here).
  if (cuda_status(cudaDeviceSynchronize(), "cudaDeviceSynchronize (before the allreduce)", err, err_len) ==
      kNcclFailed)
    return kNcclFailed;
  const ncclResult_t r = ncclAllReduce(data, data, (size_t)n, ncclFloat, ncclAvg, g_comm, g_stream);
  const int s = status_of(r, "ncclAllReduce", err, err_len);
  // queued (ncclSuccess) or still being queued (ncclInProgress): the stream says when it is done
  return started(Stage::CommThenStream, "ncclAllReduce", s == kNcclFailed ? s : kNcclPending);
}

int finalize_start(char* err, int err_len) {
  if (!g_comm) return kNcclDone;
  return started(Stage::Comm, "ncclCommFinalize", status_of(ncclCommFinalize(g_comm), "ncclCommFinalize", err, err_len));
}

int poll(char* err, int err_len) {
  if (g_stage == Stage::None || !g_comm) return kNcclDone;
  ncclResult_t async = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(g_comm, &async);
  if (r != ncclSuccess) return fail(err, err_len, "ncclCommGetAsyncError", ncclGetErrorString(r), nullptr);
  const int s = status_of(async, g_call, err, err_len);
  if (s != kNcclDone || g_stage == Stage::Comm) return s;
  return cuda_status(cudaStreamQuery(g_stream), "cudaStreamQuery (ncclAllReduce)", err, err_len);
}

void abort_comm() {
  if (g_comm) ncclCommAbort(g_comm);
  if (g_stream) cudaStreamDestroy(g_stream);
  g_comm = nullptr;
  g_stream = nullptr;
  g_stage = Stage::None;
}

void destroy() {
  if (g_comm) ncclCommDestroy(g_comm);
  if (g_stream) cudaStreamDestroy(g_stream);
  g_comm = nullptr;
  g_stream = nullptr;
  g_stage = Stage::None;
}

}  // namespace

}  // namespace ctx::dist::nccl

extern "C" __attribute__((visibility("default"))) const ctx::dist::nccl::NcclModule* ctxlab_nccl_entry() {
  namespace n = ctx::dist::nccl;
  static const n::NcclModule m = {n::kNcclModuleAbi, (int)sizeof(ncclUniqueId), &n::unique_id, &n::init_start,
                                  &n::allreduce_start, &n::finalize_start, &n::poll, &n::abort_comm,
                                  &n::destroy};
  return &m;
}
