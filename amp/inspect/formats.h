#pragma once
// The three floating-point formats AMP moves between, described exactly: F32 (IEEE binary32), F16
// (IEEE binary16) and BF16 (bfloat16, F32's exponent with an 8-bit significand); and the two FP8 formats
// (core/fp8.h): F8E4M3 (finite only: no inf, its top exponent holds numbers up to 448 and one NaN
// pattern) and F8E5M2 (IEEE-like).
//
//   const auto& h = hg::amp::inspect::format_info(hg::DType::F16);   // h.max_finite == 65504
//   for (const auto& d : hg::amp::inspect::decode(0.1))              // F32, F16, BF16 in that order
//     std::printf("%s %s %.17g\n", hg::dtype_name(d.dtype), d.bit_string.c_str(), d.value);
//
// decode() rounds to nearest even through hg's own conversions (core/half.h), so it shows exactly
// what storing a value in a tensor of that dtype does. Every constant is derived from the layout
// (exponent and mantissa widths), not typed in, and the tests check them against the known numbers.
#include <array>
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace hg::amp::inspect {

// Layout, range and precision of one format. `mantissa_bits` counts the stored fraction bits; the
// significand has one more (the implicit leading bit of normal numbers).
struct FormatInfo {
  DType dtype = DType::F32;
  const char* name = "";
  int total_bits = 0;
  int sign_bits = 1;
  int exponent_bits = 0;
  int mantissa_bits = 0;
  int precision_bits = 0;   // mantissa_bits + 1
  int exponent_bias = 0;    // 2^(exponent_bits-1) - 1
  int min_exponent = 0;     // of the smallest normal: 1 - bias
  int max_exponent = 0;     // of the largest finite: bias (bias + 1 for F8E4M3, whose top exponent is not reserved)
  bool has_inf = true;      // false for F8E4M3: overflow gives NaN, only the all-ones pattern is NaN
  double max_finite = 0;    // (2 - 2^-mantissa_bits) * 2^max_exponent; F8E4M3: 1.75 * 2^8 = 448
  double min_normal = 0;    // 2^min_exponent
  double min_subnormal = 0; // 2^(min_exponent - mantissa_bits)
  double epsilon = 0;       // gap between 1 and the next value: 2^-mantissa_bits
  double decimal_digits = 0;  // precision_bits * log10(2): significant decimal digits, as a real number
  int digits10 = 0;         // decimal digits that survive decimal -> format -> decimal (FLT_DIG for F32)
  int max_digits10 = 0;     // decimal digits that make format -> decimal -> format exact
};

// F32, F16, BF16, F8E4M3 and F8E5M2 (throws hg::Error naming the dtype for F64 and I64).
const FormatInfo& format_info(DType dtype);
// The inspected formats of AMP, widest first: F32, F16, BF16.
inline constexpr std::array<DType, 3> kInspectedFormats = {DType::F32, DType::F16, DType::BF16};
// The FP8 formats: E4M3 (forward: activations and weights) and E5M2 (gradients).
inline constexpr std::array<DType, 2> kFp8Formats = {DType::F8E4M3, DType::F8E5M2};

enum class ValueClass : uint8_t { Zero, Subnormal, Normal, Inf, NaN };
const char* value_class_name(ValueClass c);  // "zero", "subnormal", "normal", "inf", "nan"

// How one input value is stored in one format.
struct Decoded {
  DType dtype = DType::F32;
  double input = 0;        // the value asked about
  double value = 0;        // what the format holds after rounding to nearest even (exact in double)
  uint32_t bits = 0;       // the encoding (low 16 bits for F16/BF16, low 8 for FP8)
  std::string bit_string;  // sign|exponent|mantissa, e.g. F16 1.0 = "0|01111|0000000000"
  ValueClass value_class = ValueClass::Zero;
  int exponent_field = 0;  // the stored (biased) exponent bits
  // The power of two the encoding scales by: field - bias for normals; min_exponent for zero and
  // subnormals (0.m x 2^min_exponent); max_exponent + 1 for inf and NaN.
  int exponent = 0;
  double abs_error = 0;    // |value - input|: inf when a finite input overflowed, NaN for NaN input
  double rel_error = 0;    // abs_error / |input|; 0 for input 0; 1 when a nonzero input flushed to zero
  // Distance from |value| to the next representable magnitude away from zero (the ulp at value):
  // 2^(max(exponent, min_exponent) - mantissa_bits); for zero the smallest subnormal; NaN for inf/NaN.
  double spacing = 0;
};

// `value` rounded into `dtype` (F32, F16, BF16, F8E4M3 or F8E5M2; FP8 non-saturating, as .to(dtype)).
Decoded decode(double value, DType dtype);
// `value` rounded into each of kInspectedFormats, in that order.
std::array<Decoded, 3> decode(double value);

// The encoding `bits` of `dtype` grouped sign|exponent|mantissa.
std::string bit_string(DType dtype, uint32_t bits);
// `bits` as hex with the format's width: "0x3c00" (F16/BF16), "0x3f800000" (F32), "0x38" (FP8).
std::string bits_hex(DType dtype, uint32_t bits);
// The value an encoding stands for (inverse of decode(..).bits), via hg's conversions.
double bits_value(DType dtype, uint32_t bits);

}  // namespace hg::amp::inspect
