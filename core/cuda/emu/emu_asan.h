// core/cuda/emu/emu_asan.h — whether this emulator source is compiled under AddressSanitizer
// (GCC's __SANITIZE_ADDRESS__ or clang's __has_feature), as CUEMU_ASAN, with ASan's interface
// (poisoning the guards around device allocations, annotating fiber switches) when it is.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define CUEMU_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUEMU_ASAN 1
#endif
#endif
#if defined(CUEMU_ASAN)
#include <sanitizer/asan_interface.h>
#endif
