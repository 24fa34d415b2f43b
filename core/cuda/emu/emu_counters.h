// core/cuda/emu/emu_counters.h — the emulator's performance counters (CTXLAB_EMU_COUNTERS): per
// kernel launch, the global-memory sectors per warp request (coalescing), the shared-memory
// wavefronts per warp access (bank conflicts), the bytes read and written, the distinct sectors
// (compulsory DRAM traffic) and the mma instructions; per cuBLAS call, its FLOPs and operand bytes;
// per device-to-device copy or memset, its bytes.
// Counted under the emulator from the accesses the host compiler's code makes: estimates of what a
// GPU does, never measurements (core/cuda/emu/README.md "Counters"). Off by default; when off, a
// hooked access pays one branch.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cuemu {

// The input type of a tensor-core instruction (its FLOPs go to the matching peak).
enum class MmaType { BF16, F16, TF32, F64 };
constexpr int kMmaTypes = 4;

// The mma emulation's hook: one warp-wide mma.sync of shape m x n x k (2 m n k FLOPs), to be called
// ONCE per warp instruction (by one lane, e.g. the lane that completes the fragment exchange).
// Does nothing outside a kernel or when the counters are off.
void count_mma(int m, int n, int k, MmaType type);

// What one launch (or one cuBLAS call, device-to-device copy or memset: grid and block 0) did. Global requests are the accesses of
// the active lanes of one warp at one instruction (call site) and the same dynamic occurrence;
// a request's sectors are the distinct 32-byte sectors its lanes touch, its ideal sectors
// ceil(distinct bytes / 32); a shared request's wavefronts are the most distinct 4-byte words any
// one of the 32 banks serves (a broadcast of one word is free), its ideal ceil(distinct words / 32).
struct LaunchCounters {
  std::string kernel;  // name as written at the launch site, or the cuBLAS / runtime entry point
  std::string site;    // launch site file:line ("" for library calls)
  unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
  uint64_t smem_bytes = 0;  // dynamic shared memory of the launch
  // global memory, per kind of request: loads, stores, atomics (read-modify-write)
  uint64_t ld_requests = 0, ld_sectors = 0, ld_ideal_sectors = 0;
  uint64_t st_requests = 0, st_sectors = 0, st_ideal_sectors = 0;
  uint64_t atom_requests = 0, atom_sectors = 0, atom_ideal_sectors = 0;
  uint64_t bytes_read = 0, bytes_written = 0;  // what the lanes asked for (atomics count both)
  // distinct 32-byte sectors read / written over the whole launch, x 32: the DRAM traffic with a
  // perfect cache (a lower bound; library calls: their operands' extents)
  uint64_t dram_read_bytes = 0, dram_write_bytes = 0;
  // shared memory (dynamic and static)
  uint64_t shared_requests = 0, shared_wavefronts = 0, shared_ideal_wavefronts = 0;
  // tensor-core instructions by input type, and FLOPs by peak: tensor (by MmaType), fp32 (SIMT;
  // counted for library calls only, not for kernels' arithmetic)
  uint64_t mma[kMmaTypes] = {0, 0, 0, 0};
  double tensor_flops[kMmaTypes] = {0, 0, 0, 0};
  double fp32_flops = 0;
};

// On or off (CTXLAB_EMU_COUNTERS=path turns them on from the first launch and writes the records
// to path as JSON at exit); takes effect at the next launch.
void set_counters(bool on);
bool counters();
// The records since start or the last reset, one per counted launch / library call, in order.
std::vector<LaunchCounters> counter_records();
void reset_counters();
// Writes the records as a JSON array (bench/roofline.py --counters reads it); false on I/O error.
bool write_counters(const std::string& path);

}  // namespace cuemu
