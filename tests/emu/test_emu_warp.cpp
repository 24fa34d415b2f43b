// tests/emu/test_emu_warp.cpp — warp intrinsics under the emulator: shuffles (index, up, down,
// xor, with widths) on several types, votes, __activemask, __syncwarp, and the planted bad masks
// the emulator must report (a lane that exited, lanes that do not exist, a lane outside the mask,
// a bad width).
#include <cmath>

#include "tests/emu/emu_test_util.h"

template <class T>
__global__ void shuffles(T* out, int width) {
  const int lane = threadIdx.x % 32;
  const T v = (T)(lane * 3 + 1);
  out[0 * 32 + lane] = __shfl_sync(0xffffffffu, v, 5, width);
  out[1 * 32 + lane] = __shfl_up_sync(0xffffffffu, v, 2, width);
  out[2 * 32 + lane] = __shfl_down_sync(0xffffffffu, v, 3, width);
  out[3 * 32 + lane] = __shfl_xor_sync(0xffffffffu, v, 1, width);
  T sum = v;  // butterfly reduction over the segment
  for (int off = width / 2; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off, width);
  out[4 * 32 + lane] = sum;
}

template <class T>
void check_shuffles(int width) {
  DeviceBuffer<T> out(5 * 32);
  CTX_LAUNCH(shuffles<T>, 1, 32, 0, 0, out.ptr, width);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  std::vector<T> h = out.download();
  auto val = [](int lane) { return (T)(lane * 3 + 1); };
  for (int l = 0; l < 32; ++l) {
    const int seg = l / width * width, in = l % width;
    EXPECT_EQ(h[0 * 32 + l], val(seg + 5 % width)) << "shfl lane " << l << " width " << width;
    EXPECT_EQ(h[1 * 32 + l], in >= 2 ? val(l - 2) : val(l)) << "shfl_up lane " << l;
    EXPECT_EQ(h[2 * 32 + l], in + 3 < width ? val(l + 3) : val(l)) << "shfl_down lane " << l;
    // xor may read earlier segments, not later ones (then: own value)
    EXPECT_EQ(h[3 * 32 + l], (l ^ 1) < seg + width ? val(l ^ 1) : val(l)) << "shfl_xor lane " << l;
    T sum = 0;
    for (int k = seg; k < seg + width; ++k) sum += val(k);
    EXPECT_EQ(h[4 * 32 + l], sum) << "xor reduction lane " << l;
  }
}

TEST_F(Emu, ShufflesFollowCudaSemanticsForEveryTypeAndWidth) {
  for (int width : {32, 16, 8, 1}) {
    check_shuffles<int>(width);
    check_shuffles<unsigned>(width);
    check_shuffles<float>(width);
    check_shuffles<double>(width);
    check_shuffles<long long>(width);
  }
}

__global__ void votes(unsigned* out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const unsigned b = __ballot_sync(0xffffffffu, lane % 4 == 0);
  const int any = __any_sync(0xffffffffu, lane == 31 && warp == 1);
  const int all = __all_sync(0xffffffffu, lane < 32 - warp);
  __syncwarp();
  if (lane == 0) {
    out[warp * 3 + 0] = b;
    out[warp * 3 + 1] = (unsigned)any;
    out[warp * 3 + 2] = (unsigned)all;
  }
}

TEST_F(Emu, VotesCombineTheLanesOfEachWarp) {
  DeviceBuffer<unsigned> out(6);
  CTX_LAUNCH(votes, 1, 64, 0, 0, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  std::vector<unsigned> h = out.download();
  EXPECT_EQ(h[0], 0x11111111u);
  EXPECT_EQ(h[1], 0u);
  EXPECT_EQ(h[2], 1u);
  EXPECT_EQ(h[3], 0x11111111u);
  EXPECT_EQ(h[4], 1u);
  EXPECT_EQ(h[5], 0u);
}

// Lanes are linear thread ids with x fastest: a (16, 4) block has warps of two rows.
__global__ void lanes_2d(int* out) {
  const int v = (int)(threadIdx.y * 100 + threadIdx.x);
  out[threadIdx.y * 16 + threadIdx.x] = __shfl_sync(0xffffffffu, v, 0);
}

TEST_F(Emu, LanesAreLinearThreadIdsWithXFastest) {
  DeviceBuffer<int> out(64);
  CTX_LAUNCH(lanes_2d, 1, dim3(16, 4), 0, 0, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  std::vector<int> h = out.download();
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 16; ++x) EXPECT_EQ(h[y * 16 + x], (y / 2 * 2) * 100) << x << "," << y;
}

__global__ void active_after_exit(unsigned* out) {
  if (threadIdx.x % 2) return;
  __syncwarp(0x55555555u);
  out[threadIdx.x / 2] = __activemask();
}

TEST_F(Emu, ActivemaskLeavesOutExitedLanes) {
  DeviceBuffer<unsigned> out(16);
  CTX_LAUNCH(active_after_exit, 1, 32, 0, 0, out.ptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess) << cuemu::last_fault();
  for (unsigned m : out.download()) EXPECT_EQ(m, 0x55555555u);
}

// Planted: the upper half-warp returns, the lower half shuffles with a full mask.
__global__ void mask_names_exited_lane(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1.0f, 1);
}
// Planted: a 48-thread block's second warp uses a full mask.
__global__ void mask_names_missing_lanes(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}
// Planted: the lower half-warp reads lanes of the upper half that the mask leaves out.
__global__ void reads_outside_mask(float* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1.0f, 16);
}
__global__ void caller_not_in_mask(float* out) {
  out[threadIdx.x] = __shfl_sync(0xfffffffeu, 1.0f, 1);
}
__global__ void bad_width(float* out) {
  out[threadIdx.x] = __shfl_sync(0xffffffffu, 1.0f, 1, 12);
}

void expect_warp_fault(const std::string& what, const std::string& needle) {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchFailure) << what;
  const std::string m = cuemu::last_fault();
  EXPECT_NE(m.find(needle), std::string::npos) << what << ": " << m;
  EXPECT_NE(m.find("test_emu_warp.cpp:"), std::string::npos) << what << ": names the call site: " << m;
  cuemu::clear_faults();
}

TEST_F(Emu, BadWarpMasksAreReported) {
  DeviceBuffer<float> out(64);
  CTX_LAUNCH(mask_names_exited_lane, 1, 32, 0, 0, out.ptr);
  expect_warp_fault("exited lane", "names lane 16 (thread 16), which exited");
  CTX_LAUNCH(mask_names_missing_lanes, 1, 48, 0, 0, out.ptr);
  expect_warp_fault("missing lanes", "names lanes 0xffff0000 that do not exist");
  CTX_LAUNCH(reads_outside_mask, 1, 32, 0, 0, out.ptr);
  expect_warp_fault("outside the mask", "reads lane 16, which mask 0x0000ffff does not name");
  CTX_LAUNCH(caller_not_in_mask, 1, 32, 0, 0, out.ptr);
  expect_warp_fault("caller", "called by lane 0, which the mask does not name");
  CTX_LAUNCH(bad_width, 1, 32, 0, 0, out.ptr);
  expect_warp_fault("width", "width 12");
}
