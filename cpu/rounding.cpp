// CPU stochastic rounding (ops/kernels/rounding.h): one Philox block of 4 elements at a time, the rule of
// core/stochastic_round.h (shared with the CUDA kernel, so a seed gives the same bits on every backend).
#include <algorithm>

#include "core/parallel.h"
#include "core/rng.h"
#include "core/stochastic_round.h"
#include "cpu/blocks.h"
#include "cpu/register.h"
#include "ops/kernels/rounding.h"

namespace hg::cpu {
namespace {

constexpr int64_t kParallel = 32768;

template <class T>
void stochastic_round_kernel(const StochasticRoundArgs& a) {
  T* y = static_cast<T*>(a.y);
  const uint64_t seed = a.rng.seed_now(), offset = a.rng.offset_now();
  parallel_for(num_pieces(a.n, 4), a.n > kParallel, [&](int64_t b) {
    Philox4x32::for_block(seed, offset, b, a.n, [&](int64_t i, uint32_t w) { y[i] = stochastic_round<T>(a.x[i], w); });
  });
}

}  // namespace

// This family's CPU kernels into their tables (cpu/register.cpp's register_kernels calls it).
void register_rounding() {
  stochastic_round_kernels().set(DeviceType::CPU, DType::F16, &stochastic_round_kernel<f16>);
  stochastic_round_kernels().set(DeviceType::CPU, DType::BF16, &stochastic_round_kernel<bf16>);
  stochastic_round_kernels().set(DeviceType::CPU, DType::F8E4M3, &stochastic_round_kernel<f8e4m3>);
  stochastic_round_kernels().set(DeviceType::CPU, DType::F8E5M2, &stochastic_round_kernel<f8e5m2>);
}

}  // namespace hg::cpu
