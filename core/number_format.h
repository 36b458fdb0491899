#pragma once
// The binary floating formats halfgrad stores, each described once by its field widths and its rule for
// the all-ones exponent; every other fact (bias, largest finite value, smallest normal and subnormal,
// where rounding flushes to zero and where it overflows, the bit patterns of inf and NaN) is derived here,
// at compile time. The codecs (core/half.h, core/fp8.h), the dtype table (core/dtype.h), the inspectors
// (amp/inspect/) and the backends' type maps read these values instead of restating them.
//
//   format  sign exp mant  bias  all-ones exponent                 largest finite
//   F64      1   11   52  1023   inf (mant 0) and NaN              (2 - 2^-52) 2^1023
//   F32      1    8   23   127   inf and NaN                       (2 - 2^-23) 2^127
//   F16      1    5   10    15   inf and NaN                       65504
//   BF16     1    8    7   127   inf and NaN                       (2 - 2^-7) 2^127
//   E4M3     1    4    3     7   numbers, but mant 111 is NaN ("fn": no inf)  448
//   E5M2     1    5    2    15   inf and NaN                       57344
//   E2M1     1    2    1     1   numbers (no inf, no NaN)          6      (MXFP4's and NVFP4's elements)
//
// Adding a format is a row here, a DType row in core/dtype.h if tensors store it, and its codec.
#include <cstdint>

namespace hg {

// What the all-ones exponent field holds.
enum class Specials : uint8_t {
  InfNan,   // IEEE 754: inf (mantissa 0) and NaN (any other mantissa)
  NanOnly,  // OCP "fn" formats (E4M3): finite numbers, except the all-ones mantissa, which is NaN; no inf
  None,     // finite numbers only (E2M1): conversions saturate
};

struct NumberFormat {
  uint8_t exponent_bits = 0;
  uint8_t mantissa_bits = 0;
  Specials specials = Specials::InfNan;

  constexpr int total_bits() const { return 1 + exponent_bits + mantissa_bits; }
  constexpr int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  constexpr bool has_inf() const { return specials == Specials::InfNan; }
  constexpr bool has_nan() const { return specials != Specials::None; }
  constexpr int min_exponent() const { return 1 - bias(); }  // of the smallest normal
  // Of the largest finite value: the all-ones field is reserved in IEEE formats only.
  constexpr int max_exponent() const { return specials == Specials::InfNan ? bias() : bias() + 1; }

  // Magnitude bit patterns (sign bit clear): the largest finite value, inf (0: none), NaN (0: none).
  constexpr uint64_t mantissa_mask() const { return (uint64_t{1} << mantissa_bits) - 1u; }
  constexpr uint64_t exponent_all_ones() const { return (uint64_t{1} << exponent_bits) - 1u; }
  constexpr uint64_t max_bits() const {
    switch (specials) {
      case Specials::InfNan: return ((exponent_all_ones() - 1u) << mantissa_bits) | mantissa_mask();
      case Specials::NanOnly: return (exponent_all_ones() << mantissa_bits) | (mantissa_mask() - 1u);
      case Specials::None: break;
    }
    return (exponent_all_ones() << mantissa_bits) | mantissa_mask();
  }
  constexpr uint64_t inf_bits() const { return has_inf() ? exponent_all_ones() << mantissa_bits : 0u; }
  constexpr uint64_t nan_bits() const {  // the canonical (all ones) NaN
    return has_nan() ? (exponent_all_ones() << mantissa_bits) | mantissa_mask() : 0u;
  }

  // Values, exact in double (F64's included: every power of two below is a normal double).
  constexpr double max() const {
    const uint64_t top_mantissa = max_bits() & mantissa_mask();
    return pow2(max_exponent()) * (1.0 + static_cast<double>(top_mantissa) * pow2(-mantissa_bits));
  }
  constexpr double min_normal() const { return pow2(min_exponent()); }
  constexpr double min_subnormal() const { return pow2(min_exponent() - mantissa_bits); }
  constexpr double epsilon() const { return pow2(-mantissa_bits); }  // the gap between 1 and the next value
  // Round to nearest even: |x| <= flush_max() becomes a signed zero (the tie at half the smallest
  // subnormal goes to the even neighbour, zero).
  constexpr double flush_max() const { return min_subnormal() / 2; }
  // Half a step past the largest finite value: what rounds past it (to inf, NaN or a saturated max).
  // At the tie itself rounding goes to the even neighbour: past max when max's mantissa is odd (IEEE's
  // all-ones mantissa: |x| >= overflow_min() overflows), back to max when it is even (E4M3's 110: 464
  // stays 448, only |x| > 464 overflows).
  constexpr double overflow_min() const { return max() + pow2(max_exponent() - mantissa_bits) / 2; }
  constexpr bool overflows_at_tie() const { return (max_bits() & 1u) != 0; }

  // 2^e for |e| < 1100, exact (a constexpr std::ldexp).
  static constexpr double pow2(int e) {
    double v = 1.0;
    for (; e > 0; --e) v *= 2.0;
    for (; e < 0; ++e) v /= 2.0;
    return v;
  }
};

inline constexpr NumberFormat kFormatF64{11, 52, Specials::InfNan};
inline constexpr NumberFormat kFormatF32{8, 23, Specials::InfNan};
inline constexpr NumberFormat kFormatF16{5, 10, Specials::InfNan};
inline constexpr NumberFormat kFormatBF16{8, 7, Specials::InfNan};
inline constexpr NumberFormat kFormatE4M3{4, 3, Specials::NanOnly};
inline constexpr NumberFormat kFormatE5M2{5, 2, Specials::InfNan};
inline constexpr NumberFormat kFormatE2M1{2, 1, Specials::None};

// The facts the derivation must reproduce (the formats' definitions: IEEE 754, the OCP 8-bit floating
// point and Microscaling specifications).
static_assert(kFormatF16.max() == 65504.0 && kFormatF16.min_normal() == 0x1p-14 && kFormatF16.min_subnormal() == 0x1p-24);
static_assert(kFormatF16.overflow_min() == 65520.0 && kFormatF16.overflows_at_tie());
static_assert(kFormatBF16.max() == 0x1.fep127 && kFormatBF16.overflow_min() == 0x1.ffp127);
static_assert(kFormatF32.max() == 0x1.fffffep127 && kFormatF32.min_subnormal() == 0x1p-149);
static_assert(kFormatF64.max() == 0x1.fffffffffffffp1023 && kFormatF64.min_subnormal() == 0x1p-1074);
static_assert(kFormatE4M3.max() == 448.0 && kFormatE4M3.max_bits() == 0x7e && kFormatE4M3.nan_bits() == 0x7f);
static_assert(kFormatE4M3.overflow_min() == 464.0 && !kFormatE4M3.overflows_at_tie() && kFormatE4M3.inf_bits() == 0);
static_assert(kFormatE4M3.min_normal() == 0x1p-6 && kFormatE4M3.min_subnormal() == 0x1p-9);
static_assert(kFormatE5M2.max() == 57344.0 && kFormatE5M2.max_bits() == 0x7b && kFormatE5M2.inf_bits() == 0x7c);
static_assert(kFormatE5M2.overflow_min() == 61440.0 && kFormatE5M2.min_subnormal() == 0x1p-16);
static_assert(kFormatE2M1.max() == 6.0 && kFormatE2M1.min_subnormal() == 0.5 && kFormatE2M1.max_bits() == 0x7);

}  // namespace hg
