#pragma once
// f16 (IEEE binary16) and bf16 (bfloat16): 2-byte PODs, layout-identical to CUDA's __half and
// __nv_bfloat16, with no arithmetic operators. Conversions round to nearest even, keep subnormals,
// overflow to inf, and keep a NaN's payload, made quiet (as F16C does): integer code, usable on host and
// device, except that on the GPU an F16 number takes the cvt instruction, which rounds the same way (the
// integer code cost F16 sums 10-15% of their speed on an H100; tests/gpu checks the bits against the
// host's). Bulk conversions live in core/convert.h.
#include <cstdint>
#include <cstring>

#include "core/macros.h"

namespace hg {

struct alignas(2) f16 {
  uint16_t bits;
};
struct alignas(2) bf16 {
  uint16_t bits;
};
static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2);

namespace detail {
HG_HD uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
HG_HD float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

HG_HD uint16_t float_to_f16_bits(float f) {
  const uint32_t x = detail::float_bits(f);
#if defined(__CUDA_ARCH__)
  // On the GPU a number takes the hardware's conversion (one instruction, the same rounding as the integer
  // code below: nearest even, subnormals kept, overflow to inf); a NaN goes on to keep its payload.
  if ((x & 0x7fffffffu) <= 0x7f800000u) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(f));
    return r;
  }
#endif
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) {  // inf stays inf; NaN keeps its top payload bits and becomes quiet
    if (ax == 0x7f800000u) return sign | 0x7c00u;
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds past 65504: inf
  if (ax >= 0x38800000u) {                       // normal half (>= 2^-14)
    // rebias the exponent (127 -> 15) and round the 13 dropped bits to nearest even; a mantissa
    // carry correctly bumps the exponent.
    const uint32_t r = ax + 0xc8000fffu + ((ax >> 13) & 1u);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  const uint32_t e = ax >> 23;
  if (e < 102) return sign;  // below 2^-25: rounds to zero
  // subnormal half: value = m * 2^-24 with m = mant * 2^(e-126)
  const uint32_t mant = (ax & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t m = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (m & 1u))) ++m;  // m may become 0x400: the smallest normal
  return static_cast<uint16_t>(sign | m);
}

HG_HD float f16_bits_to_float(uint16_t h) {
#if defined(__CUDA_ARCH__)
  if ((h & 0x7fffu) <= 0x7c00u) {  // not a NaN: the hardware's exact widening, as above
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(static_cast<unsigned short>(h)));
    return f;
  }
#endif
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) {  // inf or NaN (NaN made quiet)
    return detail::bits_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  }
  if (exp != 0) return detail::bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return detail::bits_float(sign);
  // subnormal: normalise so the leading one becomes the implicit bit
  uint32_t e = 113;  // exponent of 2^-14 is 127-14 = 113
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return detail::bits_float(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

HG_HD uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = detail::float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);  // RNE; overflow reaches inf
}

HG_HD float bf16_bits_to_float(uint16_t b) { return detail::bits_float(static_cast<uint32_t>(b) << 16); }

// The names kernels use: widen on load, round on store.
HG_HD float to_float(f16 h) { return f16_bits_to_float(h.bits); }
HG_HD float to_float(bf16 b) { return bf16_bits_to_float(b.bits); }
HG_HD float to_float(float f) { return f; }
HG_HD double to_float(double d) { return d; }

template <class T> HG_HD T from_float(float f);
template <> HG_HD float from_float<float>(float f) { return f; }
template <> HG_HD f16 from_float<f16>(float f) { return f16{float_to_f16_bits(f)}; }
template <> HG_HD bf16 from_float<bf16>(float f) { return bf16{float_to_bf16_bits(f)}; }

// TF32 (the Tensor Cores' format for F32 inputs: F32's 8-bit exponent, a 10-bit mantissa): f rounded
// to the nearest TF32 value, ties away from zero (PTX's cvt.rna.tf32.f32), kept in a float; inf and NaN
// unchanged, a finite value past TF32's largest rounds to inf. The emulated device's cuBLAS and cuDNN
// apply it to the inputs of an F32 product when TF32 is allowed (cuda/available.h).
HG_HD float round_to_tf32(float f) {
  const uint32_t x = detail::float_bits(f);
  if ((x & 0x7f800000u) == 0x7f800000u) return f;
  return detail::bits_float((x + 0x1000u) & ~0x1fffu);
}

// A float to I64 as a C cast, but defined for every input (the cast of NaN or of a value out of range is
// undefined behaviour): NaN -> 0, +-inf and magnitudes >= 2^63 -> the int64 limits. Every backend's cast.
template <class F>
HG_HD int64_t to_i64_saturating(F v) {
  constexpr F kMax = static_cast<F>(9.2233720368547758e18);  // 2^63, the first value past INT64_MAX
  if (v != v) return 0;
  if (v >= kMax) return static_cast<int64_t>(0x7fffffffffffffffull);
  if (v < -kMax) return -static_cast<int64_t>(0x7fffffffffffffffull) - 1;
  return static_cast<int64_t>(v);
}

// The type a kernel computes in for storage type T: double for double, float otherwise.
template <class T> struct compute_type { using type = float; };
template <> struct compute_type<double> { using type = double; };
template <class T> using compute_t = typename compute_type<T>::type;

// Widen any storage type to its compute type, and round back.
template <class T> HG_HD compute_t<T> load(T v) { return static_cast<compute_t<T>>(to_float(v)); }
template <class T> HG_HD T store(compute_t<T> v) {
  if constexpr (sizeof(T) <= 2) return from_float<T>(v);  // the 16- and 8-bit formats
  else return static_cast<T>(v);
}

}  // namespace hg
