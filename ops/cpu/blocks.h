#pragma once
// Widening a block of T to its compute type and rounding it back, with the vectorised converters:
// the CPU loops work on plain float (double) arrays of a few hundred elements.
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

}  // namespace hg::cpu
