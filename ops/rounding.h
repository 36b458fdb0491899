#pragma once
// Stochastic rounding as an op: x rounded to a narrower dtype with the rule of core/stochastic_round.h
// (to the upper neighbour with probability equal to the distance from the lower one, in ulps), drawing 32
// Philox bits per element from `gen` (the default generator when null), so a seed reproduces the result on
// every backend. x is widened or rounded to F32 first (F64 input: rounded to nearest, then stochastically).
//
//   Tensor w16 = hg::stochastic_round(w32, DType::BF16);      // E[w16] = w32
//
// The gradient passes straight through, cast back to x's dtype (as .to(dtype)'s), so the op can sit in a
// graph as a cast does.
#include "core/rng.h"
#include "core/tensor.h"

namespace hg {

// dt: F16, BF16, F8E4M3 or F8E5M2.
Tensor stochastic_round(const Tensor& x, DType dt, Generator* gen = nullptr);

}  // namespace hg
