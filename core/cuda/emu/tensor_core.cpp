// core/cuda/emu/tensor_core.cpp — mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 for a warp
// whose 32 lanes have arrived (the scheduler calls it when the WarpOp::Mma completes). The
// fragments are the PTX ISA's ("Matrix Fragments for mma.m16n8k16 with floating point type"),
// with groupID g = lane >> 2 and threadID_in_group t = lane % 4:
//   A [16, 16] row:  a_i (register i / 2, low half for even i)
//                    row g for i in {0, 1, 4, 5}, g + 8 otherwise; col 2t + (i & 1) (+ 8 for i >= 4)
//   B [16, 8] col:   b_i (register i / 2): row (k) 2t + (i & 1) (+ 8 for i >= 2), col g
//   C, D [16, 8]:    c_i: row g for i < 2, g + 8 otherwise; col 2t + (i & 1)
// Each D element is its C plus the 16 products in k order, one fp32 rounding per addition (a
// product of two bf16 values is exact in fp32). The hardware adds the products in another order
// with other rounding: kernels are held to tolerances derived from K, never to a GPU's bits.
#include <cstdint>
#include <cstring>

#include "core/cuda/emu/emu_counters.h"
#include "core/cuda/emu/emu_mma.h"

namespace cuemu::detail {
namespace {

float bf16_at(uint32_t reg, int half) {
  const uint32_t bits = (half ? reg >> 16 : reg & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace

void mma_bf16_m16n8k16(MmaLane* const lanes[32]) {
  float A[16][16], B[16][8], C[16][8];
  for (int lane = 0; lane < 32; ++lane) {
    const MmaLane& r = *lanes[lane];
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = bf16_at(r.a[i / 2], i & 1);
    }
    for (int i = 0; i < 4; ++i) B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = bf16_at(r.b[i / 2], i & 1);
    for (int i = 0; i < 4; ++i) C[i < 2 ? g : g + 8][2 * t + (i & 1)] = r.c[i];
  }
  count_mma(16, 8, 16, MmaType::BF16);  // the counters (CTXLAB_EMU_COUNTERS): one per warp instruction
  for (int lane = 0; lane < 32; ++lane) {
    MmaLane& r = *lanes[lane];
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
      float acc = C[row][col];
      for (int k = 0; k < 16; ++k) acc += A[row][k] * B[k][col];
      r.d[i] = acc;
    }
  }
}

}  // namespace cuemu::detail
