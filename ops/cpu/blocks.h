#pragma once
// Widening a block of T to its compute type and rounding it back, with the vectorised converters:
// the CPU loops work on plain float (double) arrays of a few hundred elements.
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "core/convert.h"

namespace hg::cpu {

template <class T, class C = compute_t<T>>
void widen(const T* src, C* dst, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) convert_f16_to_f32(src, dst, n);
  else if constexpr (std::is_same_v<T, bf16>) convert_bf16_to_f32(src, dst, n);
  else std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(C));
}

template <class T, class C = compute_t<T>>
void narrow(const C* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, f16>) convert_f32_to_f16(src, dst, n);
  else if constexpr (std::is_same_v<T, bf16>) convert_f32_to_bf16(src, dst, n);
  else std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(C));
}

// Hot loops are compiled twice, for the baseline ISA and for AVX-512, and pick one at run time, so
// transcendental functors vectorise 16 wide without building the library with -march. The loop body
// is an always_inline function; the functors it calls are inlined into each copy.
#if defined(__x86_64__)
#define HG_AVX512_TARGET __attribute__((target("avx512f,avx512vl,avx512bw,avx512dq,fma")))
// HG_CONVERT_ISA=f16c or scalar (which caps the conversions) also selects the baseline loops, so the
// tests can cover them on an AVX-512 machine.
inline bool has_avx512() {
  static const bool v = [] {
    const char* cap = std::getenv("HG_CONVERT_ISA");
    if (cap && std::strcmp(cap, "avx512") != 0) return false;
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  }();
  return v;
}
#else
inline bool has_avx512() { return false; }
#endif

}  // namespace hg::cpu
