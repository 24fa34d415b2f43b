// core/cuda/emu/emu_internal.h — state shared between the emulator's translation units (not for
// kernel code): the device-allocation registry, launch-time lookups, the schedule setting.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cuda/emu/emu_runtime.h"

namespace cuemu::detail {

constexpr size_t kAllocAlign = 256;         // cudaMalloc's alignment
constexpr size_t kRedzoneBytes = 256;       // at least this many guard bytes after each allocation
constexpr unsigned char kRedzoneByte = 0xA5;
constexpr unsigned char kNanByte = 0xFF;    // 0xFFFFFFFF is a float NaN, 0xFF..FF a double NaN
constexpr size_t kDefaultDynamicShared = 48 * 1024;
constexpr size_t kMaxDynamicShared = 227 * 1024;  // H100's opt-in limit per block

// After a kernel: checks every allocation's guard bytes; reports (and repairs) overwritten ones.
// Returns "" or the report.
std::string check_redzones(const char* kernel_name);
// The dynamic shared memory a kernel may use (48 KiB or what cudaFuncSetAttribute raised it to).
size_t max_dynamic_shared(const void* kernel);
bool valid_stream(cudaStream_t s);
void count_launch();
uint64_t schedule_seed();
bool quiet();  // CTXLAB_EMU_QUIET=1: faults are recorded but not printed
void set_last_error(cudaError_t e);

}  // namespace cuemu::detail
