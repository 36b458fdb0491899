// The grad scaler's unscale-and-check on the GPU: a grid-stride loop over amp/scaler_math.h's
// UnscaleCheck, the math the CPU loop (amp/grad_scaler.cpp) runs. torch's
// _amp_foreach_non_finite_check_and_unscale_: a thread that meets an inf/NaN writes 1 to *found_inf
// (racy but idempotent: every writer writes the same value).
#include "amp/scaler_math.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/kernels/kernels.h"

namespace hg::cuda {

void register_amp();

namespace {

constexpr int kThreads = 256;

// g is (n) of T; found_inf is one float in device memory, zeroed by the caller.
template <class T>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(T* __restrict__ g, int64_t n, amp::UnscaleCheck<compute_t<T>> f, bool write, float* found_inf) {
  bool bad = false;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const compute_t<T> y = f(load(g[i]), bad);
    if (write) g[i] = store<T>(y);
  }
  if (bad) *found_inf = 1.0f;
}

template <class T>
void unscale(const amp::UnscaleArgs& a) {
  if (a.n == 0) return;
  using C = compute_t<T>;
  DeviceContext& ctx = context_for(a.grad);
  const amp::UnscaleCheck<C> f{a.write ? static_cast<C>(a.inv_scale) : C(1)};
  unscale_kernel<T><<<grid_for(ctx, a.n, kThreads), kThreads, 0, ctx.stream>>>(static_cast<T*>(a.grad), a.n, f,
                                                                                a.write, a.found_inf);
  HG_CUDA_LAUNCH_CHECK();
}

}  // namespace

void register_amp() {
  set_floating<amp::UnscaleKernel>(amp::unscale_kernels(), &unscale<float>, &unscale<f16>, &unscale<bf16>,
                                   &unscale<double>);
}

}  // namespace hg::cuda
