#pragma once
// Runtime element types. F16/BF16 are storage formats: kernels widen to float on load,
// compute in float (double for F64) and round to nearest even on store.
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "core/half.h"

namespace hg {

enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I64 = 4 };
inline constexpr int kNumDTypes = 5;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I64: return 8;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
  }
  return "?";
}

constexpr bool is_floating(DType t) { return t != DType::I64; }
constexpr bool is_low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// PyTorch's promotion for the dtypes halfgrad has: F16 with BF16 gives F32, anything with F64 gives
// F64, a float with I64 gives the float, otherwise the wider of the two.
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::I64) return b;
  if (b == DType::I64) return a;
  if (a == DType::F64 || b == DType::F64) return DType::F64;
  return DType::F32;
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::F32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::F64; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::F16; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::BF16; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::I64; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

// Calls f(T{}) with the C++ type of dt (f16/bf16 for the 2-byte formats).
template <class F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: return f(float{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    case DType::F64: return f(double{});
    case DType::I64: return f(int64_t{});
  }
  return f(float{});
}

}  // namespace hg
