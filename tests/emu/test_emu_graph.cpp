// tests/emu/test_emu_graph.cpp — stream capture and CUDA Graphs in the emulator (graph.cpp): work
// queued on a capturing stream is recorded, not run; the graph replays it with owned arguments
// (kernel arguments out of scope, cuBLAS alpha baked, cuBLASLt descriptors destroyed), reading
// device and pinned host memory as they are at replay time, with the results of the same calls
// run directly; the counters; the pointer checks and the race detector at replay.
#include <cstring>
#include <thread>

#include "tests/emu/graph_test_util.h"

namespace {

__global__ void scale_add(float* y, const float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

// Scribbles over the stack below the caller, where a launch's arguments lived.
__attribute__((noinline)) void scribble_stack() {
  volatile unsigned char junk[16384];
  for (size_t i = 0; i < sizeof junk; ++i) junk[i] = 0xA7;
}

// Queues y += a x with every argument a local of this frame (gone once it returns).
__attribute__((noinline)) void queue_scale_add(float* y, const float* x, float a, int n, cudaStream_t st) {
  const float scale = a;
  const int count = n;
  CTX_LAUNCH(scale_add, (count + 63) / 64, 64, 0, st, y, x, scale, count);
}

std::vector<float> iota(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.25f * (float)i;
  return v;
}

// The cuBLASLt objects of one z = W2 y product (W2: p x m, y: m x q, z: p x q, column-major).
struct LtObjects {
  cublasLtHandle_t lt = nullptr;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  LtObjects(int p, int m, int q) {
    EXPECT_EQ(cublasLtCreate(&lt), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, p, m, p), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, m, q, m), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, p, q, p), CUBLAS_STATUS_SUCCESS);
  }
  void destroy() {  // what a captured call must not depend on
    EXPECT_EQ(cublasLtMatrixLayoutDestroy(la), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutDestroy(lb), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatrixLayoutDestroy(lc), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cublasLtDestroy(lt), CUBLAS_STATUS_SUCCESS);
  }
};

// One "training step" of every kind of queued work, on its own buffers:
//   x <- pinned input (H2D), h <- 0 (memset), h += 0.5 x (kernel), y = alpha W h (cublasSgemm),
//   z = W2 y (cublasLtMatmul), out <- z (D2D), done recorded (event).
constexpr int kM = 4, kK = 3, kQ = 2, kP = 5;
struct StepBuffers {
  DeviceBuffer<float> x{kK * kQ}, h{kK * kQ}, w{kM * kK}, y{kM * kQ}, w2{kP * kM}, z{kP * kQ}, out{kP * kQ};
};
void queue_step(StepBuffers& b, const float* pinned_in, const float* alpha, cublasHandle_t blas, const LtObjects& lt,
                cudaEvent_t done, cudaStream_t st) {
  const size_t xb = kK * kQ * sizeof(float);
  EXPECT_EQ(cudaMemcpyAsync(b.x.ptr, pinned_in, xb, cudaMemcpyHostToDevice, st), cudaSuccess);
  EXPECT_EQ(cudaMemsetAsync(b.h.ptr, 0, xb, st), cudaSuccess);
  queue_scale_add(b.h.ptr, b.x.ptr, 0.5f, kK * kQ, st);
  const float zero = 0.0f, one = 1.0f;
  EXPECT_EQ(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, kM, kQ, kK, alpha, b.w.ptr, kM, b.h.ptr, kK, &zero, b.y.ptr, kM),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmul(lt.lt, lt.desc, &one, b.w2.ptr, lt.la, b.y.ptr, lt.lb, &zero, b.z.ptr, lt.lc, b.z.ptr, lt.lc,
                           nullptr, nullptr, 0, st),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaMemcpyAsync(b.out.ptr, b.z.ptr, kP * kQ * sizeof(float), cudaMemcpyDeviceToDevice, st), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(done, st), cudaSuccess);
}

}  // namespace

// Kernels captured from a frame that returned (their arguments gone, the stack scribbled over)
// replay with the recorded arguments; nothing runs at capture; each replay reads the device memory
// written just before it.
TEST_F(EmuGraph, CapturedKernelsOwnTheirArgumentsAndSeeMemoryAtReplay) {
  const int n = 100;
  DeviceBuffer<float> x(iota(n, 1.0f)), y(std::vector<float>(n, 0.0f));
  const cuemu::Stats before = cuemu::stats();
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  cudaStreamCaptureStatus st;
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusActive);
  queue_scale_add(y.ptr, x.ptr, 2.0f, n, s);
  queue_scale_add(y.ptr, x.ptr, -0.5f, n, s);
  scribble_stack();
  const cudaGraphExec_t exec = end_and_instantiate(s);
  ASSERT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  EXPECT_EQ(st, cudaStreamCaptureStatusNone);
  EXPECT_EQ(cuemu::stats().launches, before.launches) << "a captured kernel ran at capture";
  EXPECT_TRUE(bitwise_equal(y.download(), std::vector<float>(n, 0.0f)));
  for (int r = 0; r < 3; ++r) {
    const std::vector<float> xr = iota(n, (float)(r * 7 - 3));
    x.upload(xr);  // device memory written between replays
    y.upload(std::vector<float>(n, 1.0f));
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess) << cuemu::last_fault();
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    DeviceBuffer<float> dx(xr), dy(std::vector<float>(n, 1.0f));  // the same calls, run directly
    queue_scale_add(dy.ptr, dx.ptr, 2.0f, n, s);
    queue_scale_add(dy.ptr, dx.ptr, -0.5f, n, s);
    EXPECT_TRUE(bitwise_equal(y.download(), dy.download())) << "replay " << r;
    EXPECT_EQ(y.download()[3], 1.0f + 1.5f * xr[3]);
  }
  EXPECT_EQ(cuemu::stats().launches, before.launches + 12);  // 2 per replay + 2 per direct run
  EXPECT_EQ(cuemu::stats().graph_launches, before.graph_launches + 3);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

// Every kind of queued work, captured once and replayed 3 times with new inputs (a new pinned
// input, new weights in device memory, a host alpha changed after capture: the baked value is
// used; the cuBLASLt descriptor and layouts changed after capture, destroyed after the first
// replay), equals the same calls run directly, bitwise; the counters count nodes at capture and
// work at replay.
TEST_F(EmuGraph, EveryKindOfWorkReplaysAsTheSameCallsRunDirectly) {
  cublasHandle_t blas;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(blas, s), CUBLAS_STATUS_SUCCESS);
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, kK * kQ * sizeof(float)), cudaSuccess);
  cudaEvent_t done;
  ASSERT_EQ(cudaEventCreate(&done), cudaSuccess);
  StepBuffers g, d;  // graph's and direct run's
  LtObjects lt_graph(kP, kM, kQ), lt_direct(kP, kM, kQ);
  float alpha = 1.5f;

  const cuemu::Stats before = cuemu::stats();
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  queue_step(g, pinned, &alpha, blas, lt_graph, done, s);
  const cudaGraphExec_t exec = end_and_instantiate(s);
  // after capture: the graph keeps alpha = 1.5, the descriptor and layouts as they were
  alpha = -100.0f;
  const uint32_t relu = CUBLASLT_EPILOGUE_RELU;
  const int32_t trans = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(lt_graph.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &relu, sizeof relu),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(lt_graph.desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans, sizeof trans),
            CUBLAS_STATUS_SUCCESS);
  const int64_t ld = kM + 1;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(lt_graph.lb, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof ld),
            CUBLAS_STATUS_SUCCESS);
  const cuemu::Stats captured = cuemu::stats();
  EXPECT_EQ(captured.captured_nodes, before.captured_nodes + 7);
  EXPECT_EQ(captured.launches, before.launches);
  EXPECT_EQ(captured.memcpys, before.memcpys);

  for (int r = 0; r < 3; ++r) {
    const std::vector<float> in = iota(kK * kQ, 0.5f - r), w = iota(kM * kK, -1.0f + r), w2 = iota(kP * kM, 0.1f * r);
    std::memcpy(pinned, in.data(), in.size() * sizeof(float));  // read when the graph runs
    g.w.upload(w);
    g.w2.upload(w2);
    d.w.upload(w);
    d.w2.upload(w2);
    g.out.upload(std::vector<float>(kP * kQ, -7.0f));
    if (r == 1) lt_graph.destroy();
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess) << cuemu::last_fault();
    ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
    const float direct_alpha = 1.5f;
    queue_step(d, pinned, &direct_alpha, blas, lt_direct, done, s);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    const std::vector<float> got = g.out.download(), want = d.out.download();
    EXPECT_TRUE(bitwise_equal(got, want)) << "replay " << r << ": " << got[0] << " vs " << want[0];
    EXPECT_TRUE(bitwise_equal(g.y.download(), d.y.download())) << "replay " << r;
    EXPECT_NE(got[0], -7.0f);
  }
  const cuemu::Stats after = cuemu::stats();
  EXPECT_EQ(after.graph_launches, captured.graph_launches + 3);
  EXPECT_EQ(after.captured_nodes, captured.captured_nodes);
  EXPECT_EQ(after.launches, captured.launches + 6);  // one kernel per replay and per direct run
  EXPECT_EQ(after.uploads - captured.uploads, 3u * 2 + 3 * (2 * 2 + 1));  // pinned inputs; weights; out
  lt_direct.destroy();
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(done), cudaSuccess);
  EXPECT_EQ(cudaFreeHost(pinned), cudaSuccess);
  EXPECT_EQ(cublasDestroy(blas), CUBLAS_STATUS_SUCCESS);
}

// A graph launched into a capturing stream is one node of the outer graph; an exec outlives its
// graph and runs on any stream; handles are checked.
TEST_F(EmuGraph, GraphsNestAndExecsOutliveTheirGraphs) {
  const int n = 8;
  DeviceBuffer<float> x(std::vector<float>(n, 1.0f)), y(std::vector<float>(n, 0.0f));
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  queue_scale_add(y.ptr, x.ptr, 1.0f, n, s);
  const cudaGraphExec_t inner = end_and_instantiate(s);  // its graph already destroyed
  const uint64_t nodes = cuemu::stats().captured_nodes;
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(inner, s), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(inner, s), cudaSuccess);
  const cudaGraphExec_t outer = end_and_instantiate(s);
  EXPECT_EQ(cuemu::stats().captured_nodes, nodes + 2);
  EXPECT_EQ(y.download()[0], 0.0f);
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(outer, other), cudaSuccess);
  EXPECT_EQ(y.download()[0], 2.0f);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(outer), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(inner), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(inner, s), cudaErrorInvalidValue);
  EXPECT_EQ(take_error(), cudaErrorInvalidValue);
  EXPECT_EQ(cudaGraphExecDestroy(inner), cudaErrorInvalidValue);
  EXPECT_EQ(take_error(), cudaErrorInvalidValue);
  cudaGraphExec_t e;
  EXPECT_EQ(cudaGraphInstantiate(&e, nullptr, 0), cudaErrorInvalidValue);
  EXPECT_EQ(take_error(), cudaErrorInvalidValue);
}

// The pointer check runs again when the graph runs: a buffer freed after capture is a host
// pointer to the replayed kernel (sticky cudaErrorIllegalAddress, the kernel not run). A host
// pointer at capture faults at once and invalidates the capture.
TEST_F(EmuGraph, ReplayChecksKernelPointersAgain) {
  const int n = 8;
  DeviceBuffer<float> x(std::vector<float>(n, 1.0f));
  float* y = nullptr;
  ASSERT_EQ(cudaMalloc(&y, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  queue_scale_add(y, x.ptr, 1.0f, n, s);
  const cudaGraphExec_t exec = end_and_instantiate(s);
  ASSERT_EQ(cudaFree(y), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaErrorIllegalAddress);
  EXPECT_NE(cuemu::last_fault().find("node #0 (scale_add)"), std::string::npos) << cuemu::last_fault();
  EXPECT_NE(cuemu::last_fault().find("host pointer passed to a kernel"), std::string::npos) << cuemu::last_fault();
  EXPECT_EQ(take_error(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);

  std::vector<float> host(n);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  queue_scale_add(host.data(), x.ptr, 1.0f, n, s);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  cuemu::clear_faults();
  expect_invalidated(s, "host pointer passed to a kernel");
}

// A device buffer freed after capture is refused when the replayed copy runs.
TEST_F(EmuGraph, ReplayChecksCopiesAgain) {
  DeviceBuffer<float> a(std::vector<float>(4, 1.0f));
  float* b = nullptr;
  ASSERT_EQ(cudaMalloc(&b, 4 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(b, a.ptr, 4 * sizeof(float), cudaMemcpyDeviceToDevice, s), cudaSuccess);
  const cudaGraphExec_t exec = end_and_instantiate(s);
  ASSERT_EQ(cudaFree(b), cudaSuccess);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaErrorInvalidMemcpyDirection);
  EXPECT_NE(cuemu::last_fault().find("node #0 (cudaMemcpyAsync)"), std::string::npos) << cuemu::last_fault();
  take_error();
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

__global__ void global_counter(int* acc) { acc[0] += 1; }

// The race detector sees replayed kernels as direct ones: a racy kernel captured and replayed is
// reported at replay (and not at capture: nothing runs then).
HOOKED_TEST(EmuGraph, RaceDetectorReportsAReplayedRacyKernel) {
  REQUIRE_ACCESS_HOOKS();
  DeviceBuffer<int> acc(std::vector<int>(1, 0));
  cuemu::set_racecheck(true);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  CTX_LAUNCH(global_counter, 4, 32, 0, s, acc.ptr);
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  const cudaGraphExec_t exec = end_and_instantiate(s);
  EXPECT_EQ(cudaGraphLaunch(exec, s), cudaErrorLaunchFailure);
  cuemu::set_racecheck(false);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_NE(cuemu::last_fault().find("race hazard in kernel global_counter"), std::string::npos) << cuemu::last_fault();
  take_error();
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
}

// Another thread may end a Relaxed capture; cudaGraphLaunch of a graph with an event record node
// completes the event when the graph runs.
TEST_F(EmuGraph, RelaxedCaptureEndsOnAnotherThreadAndEventsCompleteAtReplay) {
  cudaEvent_t ev;
  ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
  ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(ev, s), cudaSuccess);
  cudaGraph_t g = nullptr;
  std::thread([&] { EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaSuccess); }).join();
  ASSERT_NE(g, nullptr);
  float ms = 0;
  EXPECT_EQ(cudaEventElapsedTime(&ms, ev, ev), cudaErrorInvalidResourceHandle) << "recorded before the graph ran";
  take_error();
  cudaGraphExec_t exec;
  ASSERT_EQ(cudaGraphInstantiate(&exec, g), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(cudaEventElapsedTime(&ms, ev, ev), cudaSuccess);
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(ev), cudaSuccess);
}
