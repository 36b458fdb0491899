// CPU stochastic rounding (ops/kernels/rounding.h): one Philox block of 4 elements at a time, the rule of
// core/stochastic_round.h (shared with the CUDA kernel, so a seed gives the same bits on every backend).
#include <algorithm>

#include "core/parallel.h"
#include "core/rng.h"
#include "core/stochastic_round.h"
#include "ops/cpu/blocks.h"
#include "ops/cpu/register.h"
#include "ops/kernels/rounding.h"

namespace hg::cpu {
namespace {

constexpr int64_t kParallel = 32768;

template <class T>
void stochastic_round_kernel(const StochasticRoundArgs& a) {
  T* y = static_cast<T*>(a.y);
  parallel_for(num_pieces(a.n, 4), a.n > kParallel, [&](int64_t b) {
    Philox4x32::for_block(a.seed, a.offset, b, a.n, [&](int64_t i, uint32_t w) { y[i] = stochastic_round<T>(a.x[i], w); });
  });
}

}  // namespace

void register_stochastic_round(DispatchTable<StochasticRoundKernel>& t) {
  t.set(DeviceType::CPU, DType::F16, &stochastic_round_kernel<f16>);
  t.set(DeviceType::CPU, DType::BF16, &stochastic_round_kernel<bf16>);
  t.set(DeviceType::CPU, DType::F8E4M3, &stochastic_round_kernel<f8e4m3>);
  t.set(DeviceType::CPU, DType::F8E5M2, &stochastic_round_kernel<f8e5m2>);
}

}  // namespace hg::cpu
