// tests/test_step_graph.cpp — core/step_graph.h on CUDA (a CUDA Graph through
// Backend::capture_begin / capture_end; docs/cuda.md "A CUDA Graph of the warm step"): a recording
// runs nothing until replayed and then replays the same work each time; the memory its temporaries
// used is not handed to anyone else while it lives (the graph's pool), also when a tensor made in
// the recording is freed after it, and comes back when it is destroyed; a host <-> device copy
// inside the recording is refused, naming itself, and leaves the device usable. The CPU cannot
// record. Backend::set_values (how a replay's dropout seeds reach the device) writes its values
// without a copy from the host. The choices the host code froze into a recording are asked again
// before a replay (decisions_hold). Runs under the CUDA emulator (always) and on a real GPU; without one: "skipped: no GPU".
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/backend.h"
#include "core/device_table.h"  // to_host
#include "core/step_graph.h"
#include "core/tensor.h"
#include "tests/test_util.h"
#ifdef CTXLAB_WITH_CUDA
#include "core/cuda/cuda_runtime.h"
#endif

namespace {
using namespace ctx;

#ifdef CTXLAB_WITH_CUDA
bool has_gpu() { return cuda::emulated() || cuda::device_count() > 0; }

constexpr int64_t kN = 4096;

std::vector<float> graph_values(const Tensor& t) { return to_host(t).to_vector<float>(); }

// out = (x + 1) * 2 through a temporary that the recording allocates and frees.
void body(Backend& be, const Tensor& x, Tensor& out) {
  Tensor tmp = Tensor::empty({kN}, DType::F32, Device::CUDA);
  be.unary(UnaryOp::AddScalar, x, tmp, 1.0);
  be.unary(UnaryOp::Scale, tmp, out, 2.0);
}

TEST(Cuda, StepGraphReplaysAndKeepsItsMemory) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  cuda::ensure_allocator();
  Backend& be = backend(Device::CUDA);
  Tensor x = Tensor::full({kN}, 3.0, DType::F32, Device::CUDA);
  Tensor out = Tensor::zeros({kN}, DType::F32, Device::CUDA);
  // warm the size class, so that an unprotected block would be handed out again below
  { Tensor warm = Tensor::empty({kN}, DType::F32, Device::CUDA); }
  StepGraph g(be);
  g.capture([&] { body(be, x, out); });
  ASSERT_TRUE(g.captured());
  EXPECT_EQ(graph_values(out), std::vector<float>(kN, 0.f)) << "the recorded work ran at the capture";
  // allocated and written between the capture and the replays: must not share the recording's
  // temporary (a general free list would hand its block out here: the same size class)
  Tensor other = Tensor::full({kN}, 7.0, DType::F32, Device::CUDA);
  for (int r = 0; r < 3; ++r) {
    be.fill(x, (double)r);  // the input changes between replays: the replay reads it
    g.replay();
    EXPECT_EQ(graph_values(out), std::vector<float>(kN, 2.f * (float)(r + 1))) << "replay " << r;
    EXPECT_EQ(graph_values(other), std::vector<float>(kN, 7.f)) << "a replay wrote memory handed out after the capture";
  }
  // the pool's free blocks go back when the graph goes
  const size_t cached = cuda::device_alloc_stats().bytes_cached;
  g.reset();
  EXPECT_GT(cuda::device_alloc_stats().bytes_cached, cached);
}

// A tensor made inside the recording and kept past it, then freed: its block returns to the
// graph's pool, not to the general lists, while the graph lives (replays still write it).
TEST(Cuda, StepGraphBlockFreedAfterTheCaptureStaysTheGraphs) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  cuda::ensure_allocator();
  Backend& be = backend(Device::CUDA);
  Tensor x = Tensor::full({kN}, 1.0, DType::F32, Device::CUDA);
  Tensor kept;
  StepGraph g(be);
  g.capture([&] {
    kept = Tensor::empty({kN}, DType::F32, Device::CUDA);
    be.unary(UnaryOp::Scale, x, kept, 5.0);
  });
  kept = Tensor();  // freed after the capture
  Tensor other = Tensor::full({kN}, 7.0, DType::F32, Device::CUDA);
  g.replay();
  EXPECT_EQ(graph_values(other), std::vector<float>(kN, 7.f)) << "the replay wrote a block freed to the general lists";
}

// A copy to the host inside the recording: refused with the copy named; nothing recorded; the
// stream is not left capturing (the next eager op runs).
TEST(Cuda, StepGraphRefusesHostCopies) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  cuda::ensure_allocator();
  Backend& be = backend(Device::CUDA);
  Tensor x = Tensor::full({kN}, 2.0, DType::F32, Device::CUDA);
  StepGraph g(be);
  testing_util::expect_error([&] { g.capture([&] { (void)to_host(x); }); }, {"device -> host copy"});
  EXPECT_FALSE(g.captured());
  testing_util::expect_error([&] { g.capture([&] { Tensor h = Tensor::full({kN}, 1.0); x.copy_from(h); }); },
                             {"host -> device copy"});
  be.unary(UnaryOp::Scale, x, x, 3.0);
  EXPECT_EQ(graph_values(x), std::vector<float>(kN, 6.f));
  testing_util::expect_error([&] { StepGraph cpu(backend(Device::CPU)); }, {"cannot record"});
}

// set_values: the values arrive (more than one launch's worth, 64-bit patterns intact, the rest
// of the tensor untouched) and no host <-> device copy is made; the CPU writes the same.
TEST(Cuda, SetValuesWritesWithoutAHostCopy) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  cuda::ensure_allocator();
  std::vector<int64_t> v;
  for (int64_t i = 0; i < 45; ++i) v.push_back((int64_t)(0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1)));
  for (Device dev : {Device::CPU, Device::CUDA}) {
    Tensor t = Tensor::full({50}, -1.0, DType::I64, dev);
    const cuda::HostCopyStats before = cuda::host_copy_stats();
    backend(dev).set_values(t, v);
    const cuda::HostCopyStats after = cuda::host_copy_stats();
    EXPECT_EQ(after.to_device + after.to_device_queued, before.to_device + before.to_device_queued);
    const Tensor ht = to_host(t);
    const int64_t* h = ht.data<int64_t>();  // (to_vector goes through double: 53 bits)
    for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(h[i], i < 45 ? v[(size_t)i] : -1) << device_name(dev) << " " << i;
  }
  Tensor f = Tensor::zeros({4}, DType::F32, Device::CUDA);
  testing_util::expect_error([&] { backend(Device::CUDA).set_values(f, {1, 2}); }, {"set_values", "i64"});
}

// Choices frozen in a recording (note_recorded_decision): registered only while recording, each
// asked again by decisions_hold() (all must hold), forgotten by reset() and by a recording that
// failed (which also stops the registering), and made anew by the next recording.
TEST(Cuda, StepGraphChecksTheChoicesItFroze) {
  CTX_SKIP_WITHOUT_GPU(has_gpu());
  cuda::ensure_allocator();
  Backend& be = backend(Device::CUDA);
  Tensor x = Tensor::full({kN}, 3.0, DType::F32, Device::CUDA);
  Tensor out = Tensor::zeros({kN}, DType::F32, Device::CUDA);
  bool a = true, b = true;
  note_recorded_decision([] { return false; });  // nothing records: ignored
  StepGraph g(be);
  g.capture([&] {
    note_recorded_decision([&] { return a; });
    body(be, x, out);
    note_recorded_decision([&] { return b; });
  });
  EXPECT_EQ(g.recorded_decisions(), 2);
  EXPECT_TRUE(g.decisions_hold());
  b = false;
  EXPECT_FALSE(g.decisions_hold()) << "the second choice changed";
  b = true;
  a = false;
  EXPECT_FALSE(g.decisions_hold()) << "the first choice changed";
  g.reset();
  EXPECT_EQ(g.recorded_decisions(), 0);
  EXPECT_TRUE(g.decisions_hold());
  // a failed recording keeps nothing and leaves the registry closed
  Tensor h = Tensor::zeros({kN}, DType::F32);
  EXPECT_THROW(g.capture([&] {
    note_recorded_decision([] { return false; });
    out.copy_from(h);  // a host copy: refused
  }), Error);
  EXPECT_EQ(g.recorded_decisions(), 0);
  note_recorded_decision([] { return false; });
  g.capture([&] { body(be, x, out); });
  EXPECT_EQ(g.recorded_decisions(), 0);
  EXPECT_TRUE(g.decisions_hold());
  g.replay();
}
#endif

}  // namespace
