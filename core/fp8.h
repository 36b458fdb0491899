#pragma once
// The 8-bit and smaller floating formats: the two FP8 formats of NVIDIA's Hopper/Ada Tensor Cores and
// the OCP 8-bit floating point specification (OFP8), and the two formats of the OCP Microscaling (MX)
// specification that halfgrad's block scaling uses. Integer code, usable on host and device (HG_HD).
//
// The codecs of the E4M3, E5M2 and E2M1 rows of core/number_format.h, whose parameters (bias, largest
// finite pattern, inf and NaN patterns) they take from there. E8M0, MX's block scale, is not a sign/
// exponent/mantissa format and is decoded by hand below: 2^(b - 127), no sign, no zero, 0xff is NaN.
//
// Rounding from F32 is to nearest, ties to even, with subnormals kept. What happens past the largest
// finite value is the caller's choice:
//   - saturate = false (the default, PyTorch's `.to(torch.float8_*)` and the OCP "non-saturating" mode,
//     CUDA's __NV_NOSAT): E5M2 overflows to inf; E4M3, which has no inf, overflows to NaN; inf becomes
//     inf (E5M2) or NaN (E4M3).
//   - saturate = true (CUDA's __NV_SATFINITE, what the __nv_fp8_e4m3 constructor and Transformer Engine's
//     casts do): anything past the largest finite value, inf included, becomes +-largest finite.
// "Past the largest" means what rounds past it (NumberFormat::overflow_min): E4M3 keeps 464 (the midpoint
// between 448 and the NaN pattern's 480) as 448, ties to even, and overflows above it; E5M2's 61440 ties
// to 65536 and overflows.
// NaN stays NaN in either mode, with its sign (the format's all-ones pattern: 0x7f or 0xff); NaN
// payloads do not fit in 8 bits. A value at or below half the smallest subnormal rounds to a signed zero.
// F64 sources are rounded to F32 first, as PyTorch's c10::Float8_* types are built from a float (a
// double rounding, the same one PyTorch does).
//
// Widening is exact: every FP8 value is an F16, BF16 and F32 value (E5M2 is F16's upper byte).
#include <cstdint>

#include "core/half.h"
#include "core/macros.h"
#include "core/number_format.h"

namespace hg {

struct alignas(1) f8e4m3 {
  uint8_t bits;
};
struct alignas(1) f8e5m2 {
  uint8_t bits;
};
static_assert(sizeof(f8e4m3) == 1 && sizeof(f8e5m2) == 1);

namespace detail {

// One minifloat format, for the rounding and decoding code below: M mantissa bits, exponent bias B,
// the largest finite magnitude's bit pattern, and the patterns of inf (0 when there is none) and NaN, all
// read from the format's core/number_format.h row.
template <int M, int B, uint8_t MaxBits, uint8_t InfBits, uint8_t NanBits>
struct Minifloat {
  static constexpr int kMant = M, kBias = B;
  static constexpr uint8_t kMax = MaxBits, kInf = InfBits, kNan = NanBits;
};
template <const NumberFormat& F>
using MinifloatOf = Minifloat<F.mantissa_bits, F.bias(), static_cast<uint8_t>(F.max_bits()),
                              static_cast<uint8_t>(F.inf_bits()), static_cast<uint8_t>(F.nan_bits())>;
using E4M3 = MinifloatOf<kFormatE4M3>;
using E5M2 = MinifloatOf<kFormatE5M2>;
using E2M1 = MinifloatOf<kFormatE2M1>;

// F32 -> minifloat magnitude bits of format F, rounded to nearest even; `ax` is |x|'s F32 bits (finite).
// Returns a value above F::kMax when the rounded magnitude is past the largest finite value.
template <class F>
HG_HD uint32_t round_f32_magnitude(uint32_t ax) {
  constexpr int kDrop = 23 - F::kMant;                  // mantissa bits F32 has that F lacks
  constexpr uint32_t kMinNormalExp = 127 + 1 - F::kBias;  // F32 biased exponent of F's smallest normal
  const uint32_t e = ax >> 23;
  if (e >= kMinNormalExp) {
    // a normal of F (or past its range): drop kDrop bits with ties to even; a mantissa carry bumps the
    // exponent; then rebias 127 -> B
    const uint32_t r = (ax + ((1u << (kDrop - 1)) - 1u) + ((ax >> kDrop) & 1u)) >> kDrop;
    return r - ((127u - F::kBias) << F::kMant);
  }
  if (e == 0) return 0;  // F32 zero or subnormal: far below F's smallest subnormal
  // F's subnormal range: value = mant * 2^(e-150), counted in units of 2^(1-B-M)
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 151u - F::kBias - F::kMant - e;  // >= 24 - M
  if (shift > 24) return 0;                               // below half the smallest subnormal
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;  // m may reach 2^M: the smallest normal, bits 0 0001 000
  return m;
}

template <class F>
HG_HD uint8_t float_to_minifloat(float f, bool saturate) {
  const uint32_t x = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | F::kNan;
  if (ax == 0x7f800000u) return sign | (saturate ? F::kMax : (F::kInf ? F::kInf : F::kNan));
  const uint32_t r = round_f32_magnitude<F>(ax);
  if (r > F::kMax) return sign | (saturate ? F::kMax : (F::kInf ? F::kInf : F::kNan));
  return static_cast<uint8_t>(sign | r);
}

template <class F>
HG_HD float minifloat_to_float(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80u) << 24;
  const uint32_t mag = b & 0x7fu;
  const uint32_t exp = mag >> F::kMant, mant = mag & ((1u << F::kMant) - 1u);
  if (F::kInf != 0 && mag == F::kInf) return bits_float(sign | 0x7f800000u);
  if (mag > F::kMax && mag != F::kInf) return bits_float(sign | 0x7fc00000u);  // a NaN pattern: quiet NaN
  if (exp != 0) return bits_float(sign | ((exp + 127u - F::kBias) << 23) | (mant << (23 - F::kMant)));
  // subnormal or zero: mant * 2^(1-B-M), exact in F32
  const float v = static_cast<float>(mant) * bits_float((128u - F::kBias - F::kMant) << 23);
  return bits_float(sign | float_bits(v));
}

// float_to_minifloat without branches (both roundings computed, the result selected), so that a compiler
// vectorizes a loop of it: the CPU quantize kernels use it. Bit for bit the same function (tested against
// float_to_minifloat over every F16/BF16 value and millions of F32 patterns in tests/core/test_fp8.cpp).
template <class F>
HG_HD uint8_t float_to_minifloat_select(float f, bool saturate) {
  constexpr int kDrop = 23 - F::kMant;
  constexpr uint32_t kMinNormalExp = 127 + 1 - F::kBias;
  // cond ? a : b as masks: chained ?: and || leave branches that stop GCC's vectorizer
  const auto pick = [](bool cond, uint32_t a, uint32_t b) {
    const uint32_t mask = 0u - static_cast<uint32_t>(cond);
    return (a & mask) | (b & ~mask);
  };
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 24) & 0x80u, ax = x & 0x7fffffffu, e = ax >> 23;
  const uint32_t normal = ((ax + ((1u << (kDrop - 1)) - 1u) + ((ax >> kDrop) & 1u)) >> kDrop) -
                          ((127u - F::kBias) << F::kMant);
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t raw_shift = 151u - F::kBias - F::kMant - e;  // wraps for normals: clamped, then unused
  // in [1, 25] (25: everything is remainder below half -> 0; normals' values, unused, kept legal for the shifts)
  const uint32_t shift = raw_shift > 25u ? 25u : raw_shift < 1u ? 1u : raw_shift;
  const uint32_t m = mant >> shift, rem = mant & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  const uint32_t up = pick(rem > half, 1u, 0u) | pick(rem == half, m & 1u, 0u);
  uint32_t r = pick(e >= kMinNormalExp, normal, m + up);
  r = pick(e == 0, 0u, r);
  const uint32_t past = pick(saturate, F::kMax, F::kInf ? F::kInf : F::kNan);
  r = pick((r > F::kMax) | (ax >= 0x7f800000u), past, r);
  r = pick(ax > 0x7f800000u, F::kNan, r);
  return static_cast<uint8_t>(sign | r);
}

}  // namespace detail

HG_HD uint8_t float_to_f8e4m3_bits(float f, bool saturate = false) {
  return detail::float_to_minifloat<detail::E4M3>(f, saturate);
}
HG_HD uint8_t float_to_f8e5m2_bits(float f, bool saturate = false) {
  return detail::float_to_minifloat<detail::E5M2>(f, saturate);
}
HG_HD float f8e4m3_bits_to_float(uint8_t b) { return detail::minifloat_to_float<detail::E4M3>(b); }
HG_HD float f8e5m2_bits_to_float(uint8_t b) { return detail::minifloat_to_float<detail::E5M2>(b); }

HG_HD float to_float(f8e4m3 v) { return f8e4m3_bits_to_float(v.bits); }
HG_HD float to_float(f8e5m2 v) { return f8e5m2_bits_to_float(v.bits); }
template <> HG_HD f8e4m3 from_float<f8e4m3>(float f) { return f8e4m3{float_to_f8e4m3_bits(f)}; }
template <> HG_HD f8e5m2 from_float<f8e5m2>(float f) { return f8e5m2{float_to_f8e5m2_bits(f)}; }
// from_float with the choice of what happens past the largest value (above): T is f8e4m3 or f8e5m2.
template <class T> HG_HD T fp8_from_float(float f, bool saturate);
template <> HG_HD f8e4m3 fp8_from_float<f8e4m3>(float f, bool saturate) { return f8e4m3{float_to_f8e4m3_bits(f, saturate)}; }
template <> HG_HD f8e5m2 fp8_from_float<f8e5m2>(float f, bool saturate) { return f8e5m2{float_to_f8e5m2_bits(f, saturate)}; }

// The largest finite values, as the scaling recipes need them.
inline constexpr float kF8E4M3Max = static_cast<float>(kFormatE4M3.max());  // 448
inline constexpr float kF8E5M2Max = static_cast<float>(kFormatE5M2.max());  // 57344

// ---- the MX formats (OCP Microscaling v1.0): E2M1 elements and the E8M0 block scale ------------------
// E2M1 (4 bits, kept in the low nibble of a byte): 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. It has
// no inf and no NaN, so conversion always saturates to +-6; a NaN becomes +-6 too, which is why an MX
// block holding a NaN carries it in its scale instead (E8M0's 0xff). Ties to even.
HG_HD uint8_t float_to_e2m1_bits(float f) {
  const uint32_t x = detail::float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 28) & 0x8u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return sign | 0x7u;
  const uint32_t r = detail::round_f32_magnitude<detail::E2M1>(ax);
  return static_cast<uint8_t>(sign | (r > detail::E2M1::kMax ? detail::E2M1::kMax : r));
}
HG_HD float e2m1_bits_to_float(uint8_t b) {
  const uint32_t mag = b & 0x7u;
  const float v = mag < 2 ? 0.5f * static_cast<float>(mag)  // 0 and the subnormal 0.5
                          : static_cast<float>(2u | (mag & 1u)) * detail::bits_float((125u + (mag >> 1)) << 23);
  return (b & 0x8u) ? -v : v;
}
// E8M0: 2^(b - 127); 0xff is NaN. How a block's scale is chosen is the block-scaling recipe's business.
HG_HD float e8m0_to_float(uint8_t b) {
  if (b == 0xffu) return detail::bits_float(0x7fc00000u);
  if (b == 0) return detail::bits_float(0x00400000u);  // 2^-127, an F32 subnormal
  return detail::bits_float(static_cast<uint32_t>(b) << 23);
}

}  // namespace hg
