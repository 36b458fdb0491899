// Dropout on the GPU: one thread per Philox block of 4 elements, the keep rule of ops/dropout_math.h
// (shared with cpu/dropout.cpp, so a seed gives the same mask on every backend).
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/loss.h"
#include "cuda/launch.h"
#include "cuda/register.h"
#include "ops/dropout_math.h"
#include "ops/kernels/dropout.h"

namespace hg::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t n, PhiloxDraw rng, uint32_t threshold,
                   compute_t<T> scale) {
  const uint64_t seed = rng.seed_now(), offset = rng.offset_now();  // read when the kernel runs (a graph's replay)
  const int64_t blocks = (n + 3) / 4, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += step)
    Philox4x32::for_block(seed, offset, b, n, [&](int64_t i, uint32_t w) {
      y[i] = store<T>(dropoutfn::dropout_apply(load(x[i]), w, threshold, scale));
    });
}

}  // namespace

template <class T>
void dropout_forward(const DropoutArgs& a) {
  if (a.n == 0) return;
  DeviceContext& ctx = context_for(a.y);
  launch(dropout_kernel<T>, grid_for(ctx, (a.n + 3) / 4, kThreads), kThreads, 0, ctx.stream,
      static_cast<const T*>(a.x), static_cast<T*>(a.y), a.n, a.rng, a.threshold,
      static_cast<compute_t<T>>(a.scale));
}

#define HG_INSTANTIATE(T) template void dropout_forward<T>(const DropoutArgs&);
HG_FOR_FLOATING(HG_INSTANTIATE)
#undef HG_INSTANTIATE

void register_dropout() {
  dropout_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &dropout_forward<T>; });
}

}  // namespace hg::cuda
