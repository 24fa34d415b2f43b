// core/cpu/bf16_convert.cpp — fp32 -> bf16 conversion (core/cpu/bf16_convert.h).
// VCVTNE2PS2BF16 rounds to nearest even like float_to_bf16_rne but, by its definition, treats
// denormal inputs as zero and writes a NaN as its upper half with the quiet bit set. The
// AVX-512 kernel therefore checks each 32 values for NaN and nonzero denormals (one compare
// each, on the integer bits) and recomputes the lanes that have them with the integer form of
// the rounding (x + 0x7FFF + lsb) >> 16, so that its output equals the reference bit for bit.
#include "core/cpu/bf16_convert.h"
#include "core/cpu/parallel.h"

#include <immintrin.h>
#include <algorithm>
#include <atomic>
#include <mutex>
#include <omp.h>

#include "core/bf16.h"
#include "core/error.h"
#include "core/precision.h"

namespace ctx::cpu {

namespace {
constexpr int64_t kChunk = 1 << 14;        // per-task size, a multiple of 32

#define CTX_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// 16 floats -> 16 bf16 bit patterns by integer arithmetic (exact reference semantics).
CTX_BF16_TARGET inline __m256i round_int16(__m512i x) {
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(0xFFFF, x, 16), _mm512_set1_epi32(1));
  __m512i r = _mm512_maskz_srli_epi32(0xFFFF, _mm512_add_epi32(_mm512_add_epi32(x, _mm512_set1_epi32(0x7fff)), lsb), 16);
  r = _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fff));
  return _mm512_maskz_cvtepi32_epi16(0xFFFF, r);  // (maskz forms: GCC 12 warns on the plain ones)
}
// lanes whose float is NaN or a nonzero denormal (where VCVTNE2PS2BF16 differs from the reference)
CTX_BF16_TARGET inline __mmask16 special(__m512i x) {
  const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7f800000));
  const __mmask16 den = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(abs, _mm512_set1_epi32(1)),
                                                _mm512_set1_epi32(0x007fffff));  // 0 < abs < 2^-126
  return nan | den;
}

CTX_BF16_TARGET void convert_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 lo = _mm512_loadu_ps(src + i), hi = _mm512_loadu_ps(src + i + 16);
    // cvtne2ps_pbh(a, b): b's 16 values in the low half of the result, a's in the high half
    const __m512i xl = _mm512_castps_si512(lo), xh = _mm512_castps_si512(hi);
    if (__builtin_expect((special(xl) | special(xh)) != 0, 0)) {
      _mm256_storeu_si256((__m256i*)(dst + i), round_int16(xl));
      _mm256_storeu_si256((__m256i*)(dst + i + 16), round_int16(xh));
    } else {
      _mm512_storeu_si512(dst + i, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
  if (i < n) {  // tail: masked loads, the integer form
    const int64_t left = n - i;
    const __mmask16 m0 = (__mmask16)((1u << std::min<int64_t>(left, 16)) - 1);
    const __m512i x0 = _mm512_maskz_loadu_epi32(m0, src + i);
    _mm256_mask_storeu_epi16(dst + i, m0, round_int16(x0));
    if (left > 16) {
      const __mmask16 m1 = (__mmask16)((1u << (left - 16)) - 1);
      const __m512i x1 = _mm512_maskz_loadu_epi32(m1, src + i + 16);
      _mm256_mask_storeu_epi16(dst + i + 16, m1, round_int16(x1));
    }
  }
}

template <class Kernel>
void run_chunks(Kernel k, const float* src, uint16_t* dst, int64_t n) {
  if (!parallel_pays(n)) {
    k(src, dst, n);
    return;
  }
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t b = c * kChunk;
    k(src + b, dst + b, std::min(kChunk, n - b));
  }
}

void convert_portable(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16_rne(src[i]);
}
}  // namespace

void convert_f32_to_bf16_portable(const float* src, uint16_t* dst, int64_t n) {
  run_chunks(convert_portable, src, dst, n);
}

bool convert_f32_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  if (!cpu_has_avx512_bf16() || !__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl"))
    return false;
  run_chunks(convert_avx512, src, dst, n);
  return true;
}

namespace {
std::atomic<size_t> g_copies{0};
// The values converted, counted per thread (a slot of its own, a cache line each): the decoder's
// team converts its inputs on both threads at once, and one shared counter bounced between them
// on every call. Read as the sum of the slots.
constexpr int kValueSlots = 64;
struct alignas(64) ValueSlot {
  std::atomic<size_t> n{0};
};
ValueSlot g_values[kValueSlots];
std::atomic<int> g_next_slot{0};
ValueSlot& my_value_slot() {
  thread_local const int slot = g_next_slot.fetch_add(1, std::memory_order_relaxed) % kValueSlots;
  return g_values[slot];
}
std::mutex g_copy_mutex;  // two threads asking for the same storage's copy make one

// t's storage's kept copy, made now if it has none (`made` counts the copies made)
const uint16_t* keep(const Tensor& t, std::atomic<size_t>* made) {
  Storage& s = *t.storage();
  if (!s.bf16_copy.load()) {
    std::lock_guard<std::mutex> lock(g_copy_mutex);
    if (!s.bf16_copy.load()) {
      const int64_t n = (int64_t)(s.bytes / sizeof(float));
      auto* c = new Storage((size_t)std::max<int64_t>(n, 1) * sizeof(uint16_t), Device::CPU);
      convert_f32_to_bf16(static_cast<const float*>(s.data), static_cast<uint16_t*>(c->data), n);
      s.bf16_copy.store(c);
      if (made) made->fetch_add(1);
    }
  }
  return static_cast<const uint16_t*>(s.bf16_copy.load()->data) + t.offset();
}
}  // namespace

void convert_f32_to_bf16(const float* src, uint16_t* dst, int64_t n) {
  my_value_slot().n.fetch_add((size_t)std::max<int64_t>(n, 0), std::memory_order_relaxed);
  if (!convert_f32_to_bf16_avx512(src, dst, n)) convert_f32_to_bf16_portable(src, dst, n);
}

const uint16_t* bf16_copy_if_kept(const Tensor& t) {
  if (!t.defined() || t.dtype() != DType::F32 || t.device() != Device::CPU) return nullptr;
  const Storage* c = t.storage()->bf16_copy.load();
  return c ? static_cast<const uint16_t*>(c->data) + t.offset() : nullptr;
}

const uint16_t* bf16_copy(const Tensor& t) {
  CTX_CHECK(t.defined() && t.dtype() == DType::F32 && t.device() == Device::CPU,
            "bf16_copy: needs an f32 CPU tensor, got ", t.defined() ? t.str() : std::string("undefined"));
  return keep(t, &g_copies);
}

const uint16_t* bf16_copy_whole(const Tensor& t) {
  const bool whole = t.defined() && t.dtype() == DType::F32 && t.device() == Device::CPU && t.spans_storage() &&
                     t.numel() > 0;
  return whole ? keep(t, nullptr) : nullptr;
}

size_t bf16_copies_made() { return g_copies.load(); }
size_t bf16_values_converted() {
  size_t n = 0;
  for (const ValueSlot& v : g_values) n += v.n.load(std::memory_order_relaxed);
  return n;
}

}  // namespace ctx::cpu
