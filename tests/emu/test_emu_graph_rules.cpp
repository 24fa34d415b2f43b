// tests/emu/test_emu_graph_rules.cpp — what CUDA forbids during a stream capture, refused by the
// emulator with CUDA's error code and a message naming the call, the capture invalidated
// (cudaStreamEndCapture: cudaErrorStreamCaptureInvalidated, no graph): potentially unsafe calls by
// capture mode and thread (Global, ThreadLocal, Relaxed, cudaThreadExchangeStreamCaptureMode), the
// legacy stream, synchronising a capturing stream or a captured event, pageable host copies,
// beginning and ending captures wrongly, cross-stream dependencies (joins, isolation, merges).
#include <functional>
#include <thread>

#include "tests/emu/graph_test_util.h"

namespace {

__global__ void add_one(float* y) { y[threadIdx.x] += 1.0f; }

// A call refused during a capture: its name (in the message) and the call.
struct Refusal {
  const char* name;
  std::function<cudaError_t()> call;
};

}  // namespace

// Global mode: cudaMalloc, cudaMallocHost, cudaFree, cudaFreeHost, synchronous cudaMemcpy and
// cudaMemset are refused on the capturing thread (cudaErrorStreamCaptureUnsupported) and invalidate
// the capture; each is allowed again once it ended.
TEST_F(EmuGraph, UnsafeCallsAreRefusedInGlobalMode) {
  float *dev = nullptr, *pinned = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
  ASSERT_EQ(cudaMallocHost(&pinned, 64), cudaSuccess);
  void* out = nullptr;
  const std::vector<Refusal> calls = {
      {"cudaMalloc", [&] { return cudaMalloc(&out, 64); }},
      {"cudaMallocHost", [&] { return cudaMallocHost(&out, 64); }},
      {"cudaFree", [&] { return cudaFree(dev); }},
      {"cudaFreeHost", [&] { return cudaFreeHost(pinned); }},
      {"cudaMemcpy", [&] { return cudaMemcpy(dev, pinned, 64, cudaMemcpyHostToDevice); }},
      {"cudaMemset", [&] { return cudaMemset(dev, 0, 64); }},
  };
  for (const Refusal& r : calls) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(r.call(), cudaErrorStreamCaptureUnsupported) << r.name;
    EXPECT_NE(cuemu::last_fault().find(std::string(r.name) + " while the capture of stream"), std::string::npos)
        << cuemu::last_fault();
    cudaStreamCaptureStatus st;
    EXPECT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
    EXPECT_EQ(st, cudaStreamCaptureStatusInvalidated) << r.name;
    // what is queued on an invalidated capture is refused too
    EXPECT_EQ(cudaMemsetAsync(dev, 0, 64, s), cudaErrorStreamCaptureInvalidated);
    expect_invalidated(s, r.name);
  }
  EXPECT_EQ(cudaFree(dev), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

// Global mode forbids unsafe calls on every thread whose own mode is not Relaxed; ThreadLocal only
// on the capturing thread; Relaxed captures allow them (the caching allocator's cudaMalloc), and a
// thread that exchanged its mode to Relaxed may make them during a Global capture.
TEST_F(EmuGraph, CaptureModesDecideWhoMayAllocate) {
  auto malloc_free = [] {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, 256);
    if (e == cudaSuccess) e = cudaFree(p);
    return e;
  };
  auto on_other_thread = [&](cudaStreamCaptureMode mode) {
    cudaError_t e = cudaErrorUnknown;
    std::thread([&] {
      cudaStreamCaptureMode m = mode;
      EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
      e = malloc_free();
      cudaGetLastError();  // the other thread's last error stays there
    }).join();
    return e;
  };
  // Global: another Global-mode thread is refused; a Relaxed one is not
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(on_other_thread(cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(on_other_thread(cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(on_other_thread(cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s, "cudaMalloc during the capture");
  // ThreadLocal: other threads may, this one may not
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  EXPECT_EQ(on_other_thread(cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(malloc_free(), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s, "cudaMalloc during the capture");
  // Relaxed: anyone may; the capture stays valid and makes a graph
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(malloc_free(), cudaSuccess);
  EXPECT_EQ(on_other_thread(cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  // a Global capture, this thread exchanged to Relaxed (and back: the previous mode comes back)
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
  EXPECT_EQ(m, cudaStreamCaptureModeGlobal);
  EXPECT_EQ(malloc_free(), cudaSuccess);
  ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
  EXPECT_EQ(m, cudaStreamCaptureModeRelaxed);
  EXPECT_EQ(malloc_free(), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s, "cudaMalloc during the capture");
  m = (cudaStreamCaptureMode)3;
  EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaErrorInvalidValue);
  take_error();
}

// Work on the legacy default stream while a blocking stream captures (a kernel, a queued memset,
// a cuBLAS handle left on the default stream) is cudaErrorStreamCaptureImplicit; with a
// non-blocking capturing stream it runs at once.
TEST_F(EmuGraph, LegacyStreamWorkWhileABlockingStreamCaptures) {
  DeviceBuffer<float> y(std::vector<float>(32, 0.0f));
  cublasHandle_t blas;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);  // stream: the legacy default stream
  const float one = 1.0f;
  const std::vector<Refusal> calls = {
      {"add_one", [&] {
         CTX_LAUNCH(add_one, 1, 32, 0, 0, y.ptr);
         return cudaGetLastError();
       }},
      {"cudaMemsetAsync", [&] { return cudaMemsetAsync(y.ptr, 0, 4, cudaStreamLegacy); }},
      {"cublasSgemm", [&] {
         const cublasStatus_t st =
             cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 1, &one, y.ptr, 1, y.ptr, 1, &one, y.ptr, 1);
         const cudaError_t e = cudaGetLastError();  // refused: CUBLAS_STATUS_EXECUTION_FAILED and why
         return st == CUBLAS_STATUS_SUCCESS ? e : st == CUBLAS_STATUS_EXECUTION_FAILED ? e : cudaErrorUnknown;
       }},
  };
  for (const Refusal& r : calls) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(r.call(), cudaErrorStreamCaptureImplicit) << r.name;
    EXPECT_NE(cuemu::last_fault().find(std::string(r.name) + " on the legacy default stream"), std::string::npos)
        << cuemu::last_fault();
    cudaStreamCaptureStatus st;
    EXPECT_EQ(cudaStreamIsCapturing(0, &st), cudaErrorStreamCaptureImplicit);
    take_error();
    expect_invalidated(s, r.name);
  }
  EXPECT_TRUE(bitwise_equal(y.download(), std::vector<float>(32, 0.0f))) << "refused work ran";
  cudaStream_t nb;
  ASSERT_EQ(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(nb, cudaStreamCaptureModeGlobal), cudaSuccess);
  for (const Refusal& r : calls) EXPECT_EQ(r.call(), cudaSuccess) << r.name << ": " << cuemu::last_fault();
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(nb, &g), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(nb), cudaSuccess);
  EXPECT_EQ(cublasDestroy(blas), CUBLAS_STATUS_SUCCESS);
}

// Synchronising with a capturing stream (cudaStreamSynchronize, cudaDeviceSynchronize) is
// cudaErrorStreamCaptureUnsupported; querying or waiting for an event recorded into the capture is
// cudaErrorCapturedEvent (CUDA's own code for it); another stream may be synchronised.
TEST_F(EmuGraph, SynchronisingWithACaptureIsRefused) {
  cudaEvent_t ev;
  ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreate(&other), cudaSuccess);
  const std::vector<std::pair<cudaError_t, Refusal>> calls = {
      {cudaErrorStreamCaptureUnsupported, {"cudaStreamSynchronize", [&] { return cudaStreamSynchronize(s); }}},
      {cudaErrorStreamCaptureUnsupported, {"cudaDeviceSynchronize", [&] { return cudaDeviceSynchronize(); }}},
      {cudaErrorCapturedEvent, {"cudaEventSynchronize", [&] { return cudaEventSynchronize(ev); }}},
      {cudaErrorCapturedEvent, {"cudaEventQuery", [&] { return cudaEventQuery(ev); }}},
  };
  for (const auto& [code, r] : calls) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(ev, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(other), cudaSuccess);
    EXPECT_EQ(r.call(), code) << r.name;
    EXPECT_NE(cuemu::last_fault().find(r.name), std::string::npos) << cuemu::last_fault();
    expect_invalidated(s, r.name);
  }
  EXPECT_EQ(cudaEventQuery(ev), cudaSuccess) << "the capture ended: the event is no longer a captured one";
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);
}

// A host copy during capture only from/to pinned memory: pageable memory is refused
// (cudaErrorStreamCaptureUnsupported, stricter than CUDA on purpose) in both directions.
TEST_F(EmuGraph, PageableHostCopiesAreRefusedDuringCapture) {
  DeviceBuffer<float> d(16);
  std::vector<float> pageable(16, 1.0f);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 16 * sizeof(float)), cudaSuccess);
  for (int dir = 0; dir < 2; ++dir) {
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(d.ptr, pinned, 64, cudaMemcpyHostToDevice, s), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(pinned, d.ptr, 64, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(dir == 0 ? cudaMemcpyAsync(d.ptr, pageable.data(), 64, cudaMemcpyHostToDevice, s)
                       : cudaMemcpyAsync(pageable.data(), d.ptr, 64, cudaMemcpyDeviceToHost, s),
              cudaErrorStreamCaptureUnsupported);
    expect_invalidated(s, "pageable host memory");
  }
  // a pinned block too small for the copy is pageable past its end
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaMemcpyAsync(d.ptr, pinned + 8, 64, cudaMemcpyHostToDevice, s), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s, "pageable host memory");
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

// Beginning and ending captures: not on the legacy stream (Unsupported), not twice on one stream
// (IllegalState, the capture invalidated), not ending a stream that does not capture
// (IllegalState), not ending a Global / ThreadLocal capture from another thread (WrongThread, the
// capture invalidated); a capturing stream cannot be destroyed.
TEST_F(EmuGraph, BeginAndEndCaptureRules) {
  EXPECT_EQ(cudaStreamBeginCapture(0, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  EXPECT_NE(cuemu::last_fault().find("legacy default stream cannot be captured"), std::string::npos);
  EXPECT_EQ(cudaStreamBeginCapture(s, (cudaStreamCaptureMode)7), cudaErrorInvalidValue);
  take_error();
  cudaGraph_t g = nullptr;
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorIllegalState);
  EXPECT_NE(cuemu::last_fault().find("is not capturing"), std::string::npos);
  take_error();

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  expect_invalidated(s, "already captures");

  for (cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal}) {
    ASSERT_EQ(cudaStreamBeginCapture(s, mode), cudaSuccess);
    std::thread([&] {
      cudaGraph_t tg = nullptr;
      EXPECT_EQ(cudaStreamEndCapture(s, &tg), cudaErrorStreamCaptureWrongThread);
      EXPECT_EQ(tg, nullptr);
      cudaGetLastError();
    }).join();
    expect_invalidated(s, "from a thread other than the one that began");
  }

  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s), cudaErrorIllegalState);
  expect_invalidated(s, "cudaStreamDestroy");
}

// Cross-stream work: a stream that waits on an event recorded into the capture joins it (its work
// is recorded) and must be joined back before the capture ends (else Unjoined); a capturing stream
// may not wait on an event recorded outside the capture (Isolation; cudaEventWaitExternal allows
// it) nor on one of another capture (Merge); a capture ends on the stream that began it (Unmatched).
TEST_F(EmuGraph, ForkJoinIsolationAndMerge) {
  DeviceBuffer<float> y(std::vector<float>(32, 0.0f));
  cudaStream_t s2;
  ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
  cudaEvent_t fork, join, outside;
  ASSERT_EQ(cudaEventCreate(&fork), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&join), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&outside), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(outside, s2), cudaSuccess);

  // fork and join: s2's kernel is part of the graph
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, fork, 0), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(s2, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  CTX_LAUNCH(add_one, 1, 32, 0, s2, y.ptr);
  ASSERT_EQ(cudaEventRecord(join, s2), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s, join, 0), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s, outside, cudaEventWaitExternal), cudaSuccess);
  const cudaGraphExec_t exec = end_and_instantiate(s);
  ASSERT_EQ(cudaStreamIsCapturing(s2, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  EXPECT_EQ(y.download()[0], 0.0f);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(y.download()[0], 1.0f);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);

  // s2 joined, worked, and was never waited for
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, fork, 0), cudaSuccess);
  CTX_LAUNCH(add_one, 1, 32, 0, s2, y.ptr);
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(0x1);
  EXPECT_EQ(cudaStreamEndCapture(s2, &g), cudaErrorStreamCaptureUnmatched);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  take_error();
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(s2, fork, 0), cudaSuccess);
  CTX_LAUNCH(add_one, 1, 32, 0, s2, y.ptr);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(g, nullptr);
  EXPECT_NE(cuemu::last_fault().find("queued work that no stream of the capture waited for"), std::string::npos);
  take_error();
  ASSERT_EQ(cudaStreamIsCapturing(s2, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);

  // isolation: a dependency on uncaptured work
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s, outside, 0), cudaErrorStreamCaptureIsolation);
  expect_invalidated(s, "waits on an event recorded outside the capture");

  // merge: two captures
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s2, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, s2), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(s, fork, 0), cudaErrorStreamCaptureMerge);
  expect_invalidated(s, "two capture sequences cannot merge");
  expect_invalidated(s2, "two capture sequences cannot merge");

  EXPECT_EQ(y.download()[0], 1.0f) << "work recorded into invalidated captures ran";
  for (cudaEvent_t e : {fork, join, outside}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);
}
