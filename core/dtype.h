#pragma once
// Runtime element types, one row each in kDTypeInfo below. F16/BF16 are storage formats: kernels widen
// to float on load, compute in float (double for F64) and round to nearest even on store. The FP8 formats
// (core/fp8.h) are storage only, one step further: casts, copies, printing and checkpoints take them,
// arithmetic does not (ops refuse them and name the cast to make), and the FP8 GEMM path decodes them
// exactly. The bit layouts are core/number_format.h's.
#include <array>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <utility>

#include "core/fp8.h"
#include "core/half.h"
#include "core/number_format.h"

namespace hg {

enum class DType : uint8_t { F32 = 0, F16 = 1, BF16 = 2, F64 = 3, I64 = 4, F8E4M3 = 5, F8E5M2 = 6, Bool = 7 };
inline constexpr int kNumDTypes = 8;

// How kernels treat a dtype's values.
enum class Arithmetic : uint8_t {
  Native,       // computed in the type itself (F32, F64, I64)
  Widened,      // widened to F32 on load, rounded to nearest even on store (F16, BF16)
  StorageOnly,  // casts, copies, printing and checkpoints only; ops refuse it and name the cast (FP8)
  Logical,      // true/false in one byte (Bool): what comparisons return and masks take; arithmetic with another
                // dtype promotes it to that dtype (true = 1), other ops refuse it and name the cast
};

// One row per dtype: everything halfgrad knows about it, read by the codecs, casts, checkpoints, the
// inspectors and the backends' type maps. A library enum is kept as its integer value (core includes no
// CUDA header); cuda/blas.cpp and cuda/dnn.cpp check each against the library's own constant.
struct DTypeInfo {
  DType dtype;
  const char* name;         // as printed and in error messages
  const char* safetensors;  // the dtype string of a safetensors header
  uint8_t size;             // bytes per element
  Arithmetic arithmetic;
  bool floating;            // torch.is_floating_point
  NumberFormat format;      // its bit layout (floating dtypes; zeros for I64)
  int cuda_data_type;       // cudaDataType_t for cuBLAS/cuBLASLt; -1: halfgrad hands it to neither
  int cudnn_data_type;      // cudnnDataType_t; -1: halfgrad hands it to cuDNN never
};

inline constexpr DTypeInfo kDTypeInfo[kNumDTypes] = {
    // dtype        name      safetensors size  arithmetic               float  format       cuBLAS cuDNN
    {DType::F32,    "F32",    "F32",     4, Arithmetic::Native,      true,  kFormatF32,  0,  0},
    {DType::F16,    "F16",    "F16",     2, Arithmetic::Widened,     true,  kFormatF16,  2,  2},
    {DType::BF16,   "BF16",   "BF16",    2, Arithmetic::Widened,     true,  kFormatBF16, 14, 9},
    {DType::F64,    "F64",    "F64",     8, Arithmetic::Native,      true,  kFormatF64,  1,  1},
    {DType::I64,    "I64",    "I64",     8, Arithmetic::Native,      false, {},          -1, -1},
    {DType::F8E4M3, "F8E4M3", "F8_E4M3", 1, Arithmetic::StorageOnly, true,  kFormatE4M3, 28, 12},
    {DType::F8E5M2, "F8E5M2", "F8_E5M2", 1, Arithmetic::StorageOnly, true,  kFormatE5M2, 29, 13},
    {DType::Bool,   "Bool",   "BOOL",    1, Arithmetic::Logical,     false, {},          -1, -1},
};

// What a value outside the enum (a corrupt byte cast to DType) reads as: size 0, name "?", as before.
inline constexpr DTypeInfo kInvalidDTypeInfo{DType::I64, "?", "?", 0, Arithmetic::StorageOnly, false, {}, -1, -1};
constexpr const DTypeInfo& dtype_info(DType t) {
  return static_cast<int>(t) < kNumDTypes ? kDTypeInfo[static_cast<int>(t)] : kInvalidDTypeInfo;
}
constexpr bool dtype_rows_in_order() {
  for (int i = 0; i < kNumDTypes; ++i)
    if (static_cast<int>(kDTypeInfo[i].dtype) != i) return false;
  return true;
}
static_assert(dtype_rows_in_order(), "kDTypeInfo's rows must follow DType's values");
// Every dtype, in enum order: for loops over all of them.
inline constexpr std::array<DType, kNumDTypes> kAllDTypes = [] {
  std::array<DType, kNumDTypes> a{};
  for (int i = 0; i < kNumDTypes; ++i) a[i] = kDTypeInfo[i].dtype;
  return a;
}();

constexpr size_t dtype_size(DType t) { return dtype_info(t).size; }
constexpr const char* dtype_name(DType t) { return dtype_info(t).name; }

// Floating as torch.is_floating_point: the FP8 formats count.
constexpr bool is_floating(DType t) { return dtype_info(t).floating; }
// Kept in memory, never computed on: ops refuse it (visit_dtype) and name the cast to make.
constexpr bool is_storage_only(DType t) { return dtype_info(t).arithmetic == Arithmetic::StorageOnly; }
// I64 and Bool: no kernel computes on them; ops that take them (as torch does) go through F64 or F32 and back.
constexpr bool is_integral(DType t) { return t == DType::I64 || t == DType::Bool; }
// The 8-bit floating formats (the FP8 scaling recipes' element types).
constexpr bool is_fp8(DType t) { return is_floating(t) && is_storage_only(t) && dtype_size(t) == 1; }
// The 16-bit formats that kernels compute on (widened to F32): what autocast and master weights are about.
constexpr bool is_low_precision(DType t) { return dtype_info(t).arithmetic == Arithmetic::Widened; }

inline std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

// PyTorch's promotion for the dtypes halfgrad has: Bool with anything gives the other, F16 with BF16 gives
// F32, anything with F64 gives F64, a float with I64 gives the float, otherwise the wider of the two. FP8
// promotes like the other floats (an FP8 tensor with anything else gives F32, or F64), though no op computes
// in FP8.
constexpr DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
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
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;

[[noreturn]] void fail_storage_only(DType dt, const char* what);  // core/tensor.cpp

// Calls f(T{}) with the C++ type of dt (f16/bf16 for the 2-byte formats), for the dtypes that kernels
// compute on; a storage-only dtype (FP8) or Bool is refused with an hg::Error that names the cast to make.
template <class F>
decltype(auto) visit_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::F32: return f(float{});
    case DType::F16: return f(f16{});
    case DType::BF16: return f(bf16{});
    case DType::F64: return f(double{});
    case DType::I64: return f(int64_t{});
    default: fail_storage_only(dt, "this operation");  // the storage-only formats
  }
}

// visit_dtype over every dtype, FP8 (f8e4m3/f8e5m2) and Bool (bool) included: for casts and copies.
template <class F>
decltype(auto) visit_storage_dtype(DType dt, F&& f) {
  switch (dt) {
    case DType::Bool: return f(bool{});
    case DType::F8E4M3: return f(f8e4m3{});
    case DType::F8E5M2: return f(f8e5m2{});
    default: return visit_dtype(dt, std::forward<F>(f));
  }
}

}  // namespace hg
