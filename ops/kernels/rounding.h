#pragma once
// The kernel contract of ops/rounding.h: y[i] = stochastic_round<T>(x[i], r_i) for i < n, where r_i is word
// i % 4 of Philox block (seed, offset + i / 4) of the draw rng (core/rng.h's PhiloxDraw); the table is keyed by y's dtype (F16, BF16,
// F8E4M3, F8E5M2), x is F32. Implemented by cpu/rounding.cpp and cuda/kernels/rounding.cu.
#include <cstdint>

#include "core/dispatch_table.h"
#include "core/rng.h"

namespace hg {

struct StochasticRoundArgs {
  int64_t n = 0;
  const float* x = nullptr;
  void* y = nullptr;
  PhiloxDraw rng = {};
};
using StochasticRoundKernel = void (*)(const StochasticRoundArgs& a);
HG_KERNEL_TABLE(StochasticRoundKernel, stochastic_round_kernels, "stochastic_round");

}  // namespace hg
