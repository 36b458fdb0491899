#pragma once
// Stochastic rounding from F32 to a narrower storage format T (f16, bf16, f8e4m3, f8e5m2): a value v between
// the neighbours lo and hi of T rounds to hi with probability (|v| - |lo|) / (|hi| - |lo|) and to lo otherwise,
// so the expected result is v itself: an update far below half an ulp of the weight still moves it on
// average, where round-to-nearest drops it every time (the reason pure-BF16 training works with it:
// Gupta et al. 2015, "Deep Learning with Limited Numerical Precision"; Zamirai et al. 2020, "Revisiting
// BFloat16 Training"). One HG_HD function, fed 32 random bits per element (Philox, core/rng.h), so a seed
// gives the same bits on every backend.
//
// Values T holds exactly, NaN and inf are returned as round-to-nearest gives them; so is a magnitude at or
// past T's largest finite value (no random overflow). The uniform draw is u = (r >> 8) * 2^-24, in [0, 1)
// with 24 bits, and the value rounds up when u < p, p computed in F32 (exact for the differences of
// neighbouring values; the quotient is rounded, which moves p by at most 2^-24 relative).
#include <cstdint>

#include "core/fp8.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/macros.h"

namespace hg {

// How an optimizer's update goes back into an F16/BF16 parameter that has no F32 master copy
// (optim/optimizer.h, set_param_rounding): to nearest (Apex O3, pure F16); stochastically (stochastic_round
// below); or Kahan-compensated (a compensation buffer of the parameter's dtype carries what each rounding
// lost into the next update: ops/kernels/optim.h, kahan_store).
enum class ParamRounding : uint8_t { Nearest, Stochastic, Kahan };

namespace detail {
template <class T> HG_HD uint32_t storage_bits(T v) { return v.bits; }
template <class T> HG_HD T with_bits(uint32_t b) {
  T t;
  t.bits = static_cast<decltype(t.bits)>(b);
  return t;
}
HG_HD float abs_float(float f) { return bits_float(float_bits(f) & 0x7fffffffu); }
}  // namespace detail

template <class T>
HG_HD T stochastic_round(float v, uint32_t r) {
  const T nearest = from_float<T>(v);
  const float n = to_float(nearest);
  const float av = detail::abs_float(v), an = detail::abs_float(n);
  // exact, NaN (n != n), inf or overflow (n is not finite): the nearest is the answer
  if (!(an != av) || an - an != 0.0f) return nearest;
  // the neighbour on the other side of v: one step up or down in magnitude (magnitude bits +-1)
  const uint32_t nb = detail::storage_bits(nearest);
  const uint32_t other_bits = an < av ? nb + 1u : nb - 1u;
  const T other = detail::with_bits<T>(other_bits);
  const float ao = detail::abs_float(to_float(other));
  if (ao - ao != 0.0f) return nearest;  // the step up leaves the finite range: no random overflow
  const float lo = an < av ? an : ao, hi = an < av ? ao : an;
  const float p = (av - lo) / (hi - lo);  // the chance of rounding up in magnitude
  const bool up = Philox4x32::uniform(r) < p;
  return (up == (an > av)) ? nearest : other;
}

}  // namespace hg
