#pragma once
// The limits of F16 and BF16 that decide what mixed precision loses, and how one value rounds into
// them, computed with halfgrad's own conversions (core/half.h: round to nearest even, subnormals
// kept, overflow to inf) so the inspectors report exactly what a kernel storing that value would do.
//
// F16 (IEEE binary16): smallest subnormal 2^-24, smallest normal 2^-14, max 65504.
//   Flush: |x| <= 2^-25 rounds to 0 (2^-25 itself is a tie between 0 and 2^-24, and ties go to the
//   even one, 0); 2^-25 < |x| < 2^-24 rounds UP to 2^-24. The (and the paper's) count is
//   "|x| < 2^-24"; both are reported (kF16MinSubnormal and the exact Rounding::Flush).
//   Overflow: |x| >= 65520 (halfway from 65504 to the next step, 65536) rounds to inf.
// BF16: smallest subnormal 2^-133, smallest normal 2^-126, max (2 - 2^-7) * 2^127 ~ 3.39e38;
//   |x| <= 2^-134 rounds to 0, |x| >= (2 - 2^-8) * 2^127 rounds to inf.
// Swamping (Micikevicius et al. 2018, sec. 3.1): an update u to an F16 weight w is lost when
// fl16(w + u) == w. The rule of thumb |w| >= 2048 |u| (2^11: F16 keeps 11 significant bits) is an
// approximation of it. Exactly, u is lost when |u| is below half the gap to w's F16 neighbour on u's
// side, or equal to it and w's significand is even (the tie rounds back to w). For w in [2^e, 2^(e+1))
// half the gap upwards is 2^(e-11) <= |w| 2^-11, so the rule counts updates as lost that are not
// (w = 1.9, u = 1.5 * 2^-11 moves w to its next F16 value); just below a power of two the gap halves,
// so at w = 2^e a negative u with |u| > 2^(e-12) moves w while the rule says lost.
#include <cmath>
#include <cstdint>

#include "core/fp8.h"
#include "core/half.h"
#include "core/number_format.h"

namespace hg::amp::inspect {

// Every limit below is core/number_format.h's, derived from the format's field widths.
inline constexpr double kF16MinSubnormal = kFormatF16.min_subnormal();  // 2^-24 = 5.96e-8
inline constexpr double kF16MinNormal = kFormatF16.min_normal();        // 2^-14 = 6.10e-5
inline constexpr double kF16Max = kFormatF16.max();                     // 65504
inline constexpr double kF16FlushMax = kFormatF16.flush_max();          // 2^-25: |x| <= this rounds to 0
inline constexpr double kF16OverflowMin = kFormatF16.overflow_min();    // 65520: |x| >= this rounds to inf
inline constexpr double kBF16MinSubnormal = kFormatBF16.min_subnormal();  // 2^-133 = 9.18e-41
inline constexpr double kBF16MinNormal = kFormatBF16.min_normal();        // 2^-126 = 1.18e-38
inline constexpr double kBF16Max = kFormatBF16.max();                     // 3.39e38
inline constexpr double kBF16FlushMax = kFormatBF16.flush_max();
inline constexpr double kBF16OverflowMin = kFormatBF16.overflow_min();
inline constexpr double kSwampRatio = 2048.0;  // the rule of thumb: lost when |w| >= 2048 |u|
// FP8 (core/fp8.h), unscaled: what a cast with scale 1 keeps. E4M3: |x| <= 2^-10 flushes, |x| > 464 (the
// midpoint to the NaN pattern's 480, which rounds to even 448) is past the largest value: saturated by
// Transformer Engine's casts, NaN by .to(). E5M2: |x| <= 2^-17 flushes, |x| >= 61440 overflows (to inf, or
// saturates). A per-tensor scale s moves every value by s: the histogram's loss_scale plays that role.
inline constexpr double kE4M3MinSubnormal = kFormatE4M3.min_subnormal(), kE4M3MinNormal = kFormatE4M3.min_normal(),
                        kE4M3Max = kFormatE4M3.max();
inline constexpr double kE4M3FlushMax = kFormatE4M3.flush_max(), kE4M3OverflowMin = kFormatE4M3.overflow_min();
inline constexpr double kE5M2MinSubnormal = kFormatE5M2.min_subnormal(), kE5M2MinNormal = kFormatE5M2.min_normal(),
                        kE5M2Max = kFormatE5M2.max();
inline constexpr double kE5M2FlushMax = kFormatE5M2.flush_max(), kE5M2OverflowMin = kFormatE5M2.overflow_min();

// Where a value lands when stored in a 16-bit format.
enum class Rounding : uint8_t {
  Zero,       // it was zero
  Flush,      // nonzero, rounds to (signed) zero
  Subnormal,  // rounds to a nonzero subnormal (precision is lost, range is not)
  Normal,
  Overflow,   // finite (or an F32 overflow of a finite product), rounds to inf
  NonFinite,  // it was NaN (an inf input is reported as Overflow: the caller passes finite values)
};

namespace detail {
// Classifies the bits of a 16-bit float with `mant_bits` significand bits and exponent field mask
// `exp_mask` (all ones: inf/NaN).
HG_HD Rounding classify_bits(float v, uint16_t bits, int mant_bits, uint16_t exp_mask) {
  if (v != v) return Rounding::NonFinite;
  if (v == 0.0f) return Rounding::Zero;
  const uint16_t e = static_cast<uint16_t>((bits >> mant_bits) & exp_mask);
  const uint16_t m = static_cast<uint16_t>(bits & ((1u << mant_bits) - 1u));
  if (e == exp_mask) return Rounding::Overflow;
  if (e == 0) return m == 0 ? Rounding::Flush : Rounding::Subnormal;
  return Rounding::Normal;
}
}  // namespace detail

HG_HD Rounding round_f16(float v) { return detail::classify_bits(v, float_to_f16_bits(v), 10, 0x1f); }
HG_HD Rounding round_bf16(float v) { return detail::classify_bits(v, float_to_bf16_bits(v), 7, 0xff); }
// FP8 through the non-saturating casts: E4M3's overflow is its NaN pattern (s 1111 111), E5M2's inf.
HG_HD Rounding round_e4m3(float v) {
  if (v != v) return Rounding::NonFinite;
  if (v == 0.0f) return Rounding::Zero;
  const uint8_t mag = float_to_f8e4m3_bits(v, false) & 0x7fu;
  if (mag == 0x7fu) return Rounding::Overflow;
  if ((mag >> 3) == 0) return mag == 0 ? Rounding::Flush : Rounding::Subnormal;
  return Rounding::Normal;
}
HG_HD Rounding round_e5m2(float v) { return detail::classify_bits(v, float_to_f8e5m2_bits(v, false), 2, 0x1f); }

// Exact: the weight as F16, plus the update in F32 (halfgrad's kernels compute in F32), stored back
// in F16 (MasterWeights::Off) gives the same value. +0 and -0 count as the same value.
HG_HD bool swamped_f16(float w, float u) {
  const float w16 = f16_bits_to_float(float_to_f16_bits(w));
  return f16_bits_to_float(float_to_f16_bits(w16 + u)) == w16;
}
// The spacing of F16 numbers at fl16(w), away from zero: 2^(e - 10) for a normal fl16(w) in [2^e, 2^(e+1)),
// 2^-24 below 2^-14 (zero and subnormals); inf for inf/NaN. An update |u| below half of it is swamped
// (except a step down from a power of two, where the spacing below is half as wide).
inline double f16_spacing(double w) {
  const double w16 = std::fabs(static_cast<double>(f16_bits_to_float(float_to_f16_bits(static_cast<float>(w)))));
  if (!std::isfinite(w16)) return INFINITY;
  if (w16 < kF16MinNormal) return kF16MinSubnormal;
  return std::ldexp(1.0, std::ilogb(w16) - 10);
}
// The rule of thumb, for comparison.
inline bool swamped_f16_rule_of_thumb(double w, double u) { return std::fabs(w) >= kSwampRatio * std::fabs(u); }

}  // namespace hg::amp::inspect
