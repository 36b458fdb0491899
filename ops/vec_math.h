#pragma once
// Host float math in a form the compiler vectorises (glibc's expf/tanhf are scalar calls, several
// times slower in the CPU loops). ops/functors.h uses these on the host; device code keeps CUDA's
// own expf/tanhf. Integer bit operations instead of float compares: GCC's default -ftrapping-math
// (kept, since fast-math is banned) blocks vectorisation of float compare-and-select.
#include <cstdint>

#include "core/half.h"

namespace hg::vm {

// expf in a form the compiler vectorises (glibc's expf is a scalar call, 2-3x slower here): x = n ln2 + r
// with |r| <= ln2/2 (Cody-Waite), Cephes' expf polynomial for e^r, then 2^n applied in two halves so
// overflow gives inf and subnormal results round once. Within 1 ulp of the exact value for every
// float (checked exhaustively). Integer bit operations instead of float compares and casts: with
// -ftrapping-math (GCC's default, kept since fast-math is banned) those block vectorisation.
inline float exp(float x) {
  const uint32_t xb = detail::float_bits(x), mag = xb & 0x7fffffffu;
  const uint32_t lim = xb >> 31 ? 0x42d00000u : 0x42b20000u;  // clamp to [-104, 89]: exp is 0 / inf beyond
  const float xc = detail::bits_float((xb & 0x80000000u) | (mag > lim ? lim : mag));
  constexpr float kRound = 12582912.f;  // 1.5 * 2^23: adding it rounds to an integer, kept in the low bits
  const float t = xc * 1.44269504088896341f + kRound;
  const float n = t - kRound;
  const int32_t ni = static_cast<int32_t>(detail::float_bits(t) - 0x4b400000u);
  float r = xc - n * 0.693359375f;  // ln2 = 0.693359375 - 2.12194440e-4; n * the first part is exact
  r = r + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.f;
  const int32_t n1 = ni >> 1, n2 = ni - n1;  // each in [-75, 65]: both are normal powers of two
  const float e = y * detail::bits_float(static_cast<uint32_t>(n1 + 127) << 23) *
                  detail::bits_float(static_cast<uint32_t>(n2 + 127) << 23);
  const uint32_t nan = mag > 0x7f800000u ? 0xffffffffu : 0u;  // NaN in, the same NaN out
  return detail::bits_float((detail::float_bits(e) & ~nan) | (xb & nan));
}
// tanh: Cephes' odd polynomial for |x| < 0.625 (where 1 - 2/(e^2x + 1) would cancel), else
// 1 - 2/(e^{2|x|} + 1) with the sign restored; both computed, one selected, so it vectorises.
// |x| large gives exactly +-1, NaN stays NaN.
inline float tanh(float x) {
  const uint32_t xb = detail::float_bits(x), sign = xb & 0x80000000u, mag = xb & 0x7fffffffu;
  const float ax = detail::bits_float(mag);
  const float z = x * x;
  float p = -5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  const float small = p * z * ax + ax;  // on |x|, so tanh(-0) keeps its sign below
  const float big = 1.f - 2.f / (exp(2.f * ax) + 1.f);
  return detail::bits_float(detail::float_bits(mag < 0x3f200000u ? small : big) | sign);  // 0.625f
}

}  // namespace hg::vm
