// tests/emu/graph_test_util.h — helpers of the stream-capture tests (test_emu_graph*.cpp): a
// fixture with a created blocking stream that leaves no capture and no thread mode behind, and the
// check that a capture ended invalidated.
#pragma once
#include "tests/emu/emu_test_util.h"

class EmuGraph : public Emu {
 protected:
  void SetUp() override {
    Emu::SetUp();
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  }
  void TearDown() override {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    EXPECT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
    EXPECT_EQ(st, cudaStreamCaptureStatusNone) << "a test left a capture under way";
    if (st != cudaStreamCaptureStatusNone) {
      cudaGraph_t g = nullptr;
      cudaStreamEndCapture(s, &g);
      if (g) cudaGraphDestroy(g);
      take_error();
    }
    cudaStreamCaptureMode m = cudaStreamCaptureModeGlobal;
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
    EXPECT_EQ(m, cudaStreamCaptureModeGlobal) << "a test left this thread's capture mode changed";
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    Emu::TearDown();
  }
  // Ends the capture of `st` expecting it invalidated earlier: cudaErrorStreamCaptureInvalidated,
  // no graph, and the message names `cause`.
  static void expect_invalidated(cudaStream_t st, const std::string& cause) {
    cudaGraph_t g = reinterpret_cast<cudaGraph_t>(0x1);
    EXPECT_EQ(cudaStreamEndCapture(st, &g), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(g, nullptr);
    EXPECT_NE(cuemu::last_fault().find(cause), std::string::npos) << cuemu::last_fault();
    take_error();
  }
  // Ends the capture of `st` and instantiates it (the graph destroyed at once: the exec keeps its nodes).
  static cudaGraphExec_t end_and_instantiate(cudaStream_t st) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t e = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(st, &g), cudaSuccess) << cuemu::last_fault();
    EXPECT_EQ(cudaGraphInstantiate(&e, g, 0), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(g), cudaSuccess);
    return e;
  }
  cudaStream_t s = nullptr;
};
