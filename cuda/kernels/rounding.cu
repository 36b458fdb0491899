// Stochastic rounding on the GPU (ops/kernels/rounding.h): one thread per Philox block of 4 elements, the
// rule of core/stochastic_round.h (shared with cpu/rounding.cpp, so a seed gives the same bits).
#include "core/rng.h"
#include "core/stochastic_round.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/kernels/rounding.h"

namespace hg::cuda {

namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
    stochastic_round_kernel(const float* __restrict__ x, T* __restrict__ y, int64_t n, PhiloxDraw rng) {
  const uint64_t seed = rng.seed_now(), offset = rng.offset_now();  // read when the kernel runs (a graph's replay)
  const int64_t blocks = (n + 3) / 4, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += step)
    Philox4x32::for_block(seed, offset, b, n, [&](int64_t i, uint32_t w) { y[i] = stochastic_round<T>(x[i], w); });
}

template <class T>
void stochastic_round_launch(const StochasticRoundArgs& a) {
  if (a.n == 0) return;
  DeviceContext& ctx = context_for(a.y);
  launch(stochastic_round_kernel<T>, grid_for(ctx, (a.n + 3) / 4, kThreads), kThreads, 0, ctx.stream, a.x,
         static_cast<T*>(a.y), a.n, a.rng);
}

}  // namespace

void register_rounding() {
  stochastic_round_kernels().set(DeviceType::CUDA, DType::F16, &stochastic_round_launch<f16>);
  stochastic_round_kernels().set(DeviceType::CUDA, DType::BF16, &stochastic_round_launch<bf16>);
  stochastic_round_kernels().set(DeviceType::CUDA, DType::F8E4M3, &stochastic_round_launch<f8e4m3>);
  stochastic_round_kernels().set(DeviceType::CUDA, DType::F8E5M2, &stochastic_round_launch<f8e5m2>);
}

}  // namespace hg::cuda
