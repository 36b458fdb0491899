// The grad scaler's unscale-and-check on the GPU: every gradient of a dtype in one launch, a block-strided
// loop per gradient over ops/kernels/scaler.h's UnscaleCheck, the math the CPU loop (cpu/scaler.cpp) runs. torch's
// _amp_foreach_non_finite_check_and_unscale_: a thread that meets an inf/NaN writes 1 to *found_inf
// (racy but idempotent: every writer writes the same value). Also the device path's one-thread state
// ops (ops/kernels/scaler.h's scaler_state_op).
#include <span>

#include "cuda/check.h"
#include "cuda/context.h"
#include "cuda/launch.h"
#include "cuda/kernels/kernels.h"
#include "cuda/kernels/multi_tensor.cuh"
#include "cuda/register.h"
#include "ops/kernels/scaler.h"

namespace hg::cuda {

namespace {

constexpr int kThreads = 256;

// Up to kMaxLaunchGrads gradients in one launch (cuda/kernels/multi_tensor.cuh); found_inf is one float in
// device memory, zeroed by the caller; inv_scale_at, when not null, is the device path's 1/scale in device
// memory (read once per thread).
constexpr int kMaxLaunchGrads = 64;
template <class T>
__global__ void __launch_bounds__(kThreads) unscale_kernel(const ArgsLaunch<kMaxLaunchGrads, amp::UnscaleArgs> L) {
  const int t = L.part.tensor_of(blockIdx.x);
  const amp::UnscaleArgs& a = L.args[t];
  const amp::UnscaleCheck<compute_t<T>> f = amp::unscale_check<compute_t<T>>(a.write, a.inv_scale, a.inv_scale_at);
  T* __restrict__ g = static_cast<T*>(a.grad);
  bool bad = false;
  for (int64_t i = L.part.block_in(t, blockIdx.x) * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(L.part.blocks_of(t)) * blockDim.x) {
    const compute_t<T> y = f(load(g[i]), bad);
    if (a.write) g[i] = store<T>(y);
  }
  if (bad) *a.found_inf = 1.0f;
}

template <class T>
void unscale(std::span<const amp::UnscaleArgs> batch) {
  if (batch.empty()) return;
  launch_batches<kMaxLaunchGrads>(context_for(batch[0].found_inf), batch, unscale_kernel<T>, kThreads);
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
