// core/cuda/emu/cuda_emu.h — the CUDA emulator's umbrella header (what compat.h includes when
// CTXLAB_CUDA_EMULATOR is defined): the runtime API subset, the device built-ins and the launch.
// See core/cuda/emu/README.md for what the emulator checks and what only hardware shows.
#pragma once
#include "core/cuda/emu/emu_bf16.h"     // __nv_bfloat16, __float2bfloat16_rn (cuda_bf16.h)
#include "core/cuda/emu/emu_device.h"   // qualifiers, threadIdx..., barriers, warp ops, atomics, math
#include "core/cuda/emu/emu_counters.h"  // cuemu::count_mma, the counters (CTXLAB_EMU_COUNTERS)
#include "core/cuda/emu/emu_launch.h"   // cuemu::launch (CTX_LAUNCH)
#include "core/cuda/emu/emu_runtime.h"  // cudaMalloc, cudaMemcpy, streams, events, errors, cuemu::stats
#include "core/cuda/emu/emu_types.h"    // dim3, float4..., cudaError_t, cudaDeviceProp
