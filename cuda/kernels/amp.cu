// The grad scaler's unscale-and-check on the GPU: a grid-stride loop over ops/kernels/scaler.h's
// UnscaleCheck, the math the CPU loop (amp/grad_scaler.cpp) runs. torch's
// _amp_foreach_non_finite_check_and_unscale_: a thread that meets an inf/NaN writes 1 to *found_inf
// (racy but idempotent: every writer writes the same value). Also the device path's one-thread state
// ops (ops/kernels/scaler.h's scaler_state_op).
#include "ops/kernels/scaler.h"
#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/launch.h"
#include "cuda/kernels/kernels.h"
#include "cuda/register.h"

namespace hg::cuda {

namespace {

constexpr int kThreads = 256;

// g is (n) of T; found_inf is one float in device memory, zeroed by the caller; inv_scale_at, when not
// null, is the device path's 1/scale in device memory (read once per thread).
template <class T>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(T* __restrict__ g, int64_t n, double inv_scale, const float* __restrict__ inv_scale_at, bool write,
                   float* found_inf) {
  const amp::UnscaleCheck<compute_t<T>> f = amp::unscale_check<compute_t<T>>(write, inv_scale, inv_scale_at);
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
  DeviceContext& ctx = context_for(a.grad);
  launch(unscale_kernel<T>, grid_for(ctx, a.n, kThreads), kThreads, 0, ctx.stream,
      static_cast<T*>(a.grad), a.n, a.inv_scale, a.inv_scale_at, a.write, a.found_inf);
}

// The device path's state ops: one thread runs amp::scaler_state_op, the host's function, on the
// device-resident scale, trackers and flags (torch's amp_update_scale_cuda_kernel<<<1, 1>>>).
__global__ void scaler_state_kernel(amp::ScalerStateArgs a) { amp::scaler_state_op(a); }

void scaler_state(const amp::ScalerStateArgs& a) {
  DeviceContext& ctx = context_for(a.scale);
  launch(scaler_state_kernel, 1, 1, 0, ctx.stream, a);
}

}  // namespace

void register_scaler() {
  amp::unscale_kernels().set_floating(DeviceType::CUDA, []<class T>(type_tag<T>) { return &unscale<T>; });
  amp::scaler_state_kernels().set(DeviceType::CUDA, DType::F32, &scaler_state);
}

}  // namespace hg::cuda
