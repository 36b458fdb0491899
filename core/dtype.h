#pragma once
// Runtime element types. F16/BF16 are storage formats: kernels widen to float on load,
// compute in float (double for F64) and round to nearest even on store. The FP8 formats (core/fp8.h) are
// storage only, one step further: casts, copies, printing and checkpoints take them, arithmetic does not
// (ops refuse them and name the cast to make), and the FP8 GEMM path decodes them exactly.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <utility>

#include "core/fp8.h"
#include "core/half.h"

namespace hg {

enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I64 = 4, F8E4M3 = 5, F8E5M2 = 6 };
inline constexpr int kNumDTypes = 7;

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::F8E4M3: return 1;
    case DType::F8E5M2: return 1;
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
    case DType::F8E4M3: return "F8E4M3";
    case DType::F8E5M2: return "F8E5M2";
  }
  return "?";
}

// Floating as torch.is_floating_point: the FP8 formats count. is_fp8 picks out the storage-only ones.
constexpr bool is_floating(DType t) { return t != DType::I64; }
constexpr bool is_fp8(DType t) { return t == DType::F8E4M3 || t == DType::F8E5M2; }
// The 16-bit formats that kernels compute on (widened to F32): what autocast and master weights are about.
constexpr bool is_low_precision(DType t) { return t == DType::F16 || t == DType::BF16; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// PyTorch's promotion for the dtypes halfgrad has: F16 with BF16 gives F32, anything with F64 gives
// F64, a float with I64 gives the float, otherwise the wider of the two. FP8 promotes like the other
// floats (an FP8 tensor with anything else gives F32, or F64), though no op computes in FP8.
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
template <> struct dtype_of<f8e4m3> { static constexpr DType value = DType::F8E4M3; };
template <> struct dtype_of<f8e5m2> { static constexpr DType value = DType::F8E5M2; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

[[noreturn]] void fail_storage_only(DType dt, const char* what);  // core/tensor.cpp

// Calls f(T{}) with the C++ type of dt (f16/bf16 for the 2-byte formats), for the dtypes that kernels
// compute on; an FP8 dtype is refused with an hg::Error that names the cast to make.
template <class F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: return f(float{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    case DType::F64: return f(double{});
    case DType::I64: return f(int64_t{});
    case DType::F8E4M3:
    case DType::F8E5M2: fail_storage_only(dt, "this operation");
  }
  return f(float{});
}

// visit_dtype over every dtype, FP8 included (f8e4m3/f8e5m2): for casts and copies.
template <class F>
decltype(auto) visit_storage_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::F8E4M3: return f(f8e4m3{});
    case DType::F8E5M2: return f(f8e5m2{});
    default: return visit_dtype(dt, std::forward<F>(f));
  }
}

}  // namespace hg
