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

// Up to kMaxLaunchGrads gradients in one launch (cuda/kernels/multi_tensor.cuh), sharing found_inf (one float
// in device memory, zeroed by the caller) and the factor: inv_scale, or when inv_scale_at is not null the
// device path's 1/scale in device memory (read once per thread).
constexpr int kMaxLaunchGrads = 96;
struct UnscaleLaunch {
  BlockPartition<kMaxLaunchGrads> part;
  void* grad[kMaxLaunchGrads] = {};
  int64_t n[kMaxLaunchGrads] = {};
  bool write[kMaxLaunchGrads] = {};
  double inv_scale = 1.0;
  const float* inv_scale_at = nullptr;
  float* found_inf = nullptr;
};
static_assert(sizeof(UnscaleLaunch) <= 4096, "UnscaleLaunch must fit the classic 4 KiB of kernel parameters");

template <class T>
__global__ void __launch_bounds__(kThreads) unscale_kernel(const UnscaleLaunch L) {
  const int t = L.part.tensor_of(blockIdx.x);
  const bool write = L.write[t];
  const amp::UnscaleCheck<compute_t<T>> f = amp::unscale_check<compute_t<T>>(write, L.inv_scale, L.inv_scale_at);
  T* __restrict__ g = static_cast<T*>(L.grad[t]);
  const int64_t n = L.n[t];
  const int64_t stride = static_cast<int64_t>(L.part.blocks_of(t)) * blockDim.x;
  bool bad = false;
  for (int64_t i = L.part.block_in(t, blockIdx.x) * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const compute_t<T> y = f(load(g[i]), bad);
    if (write) g[i] = store<T>(y);
  }
  if (bad) *L.found_inf = 1.0f;
}

template <class T>
void unscale(std::span<const amp::UnscaleArgs> batch) {
  if (batch.empty()) return;
  const amp::UnscaleArgs& lead = batch[0];
  DeviceContext& ctx = context_for(lead.found_inf);
  for (size_t begin = 0; begin < batch.size(); begin += kMaxLaunchGrads) {
    UnscaleLaunch L;
    L.inv_scale = lead.inv_scale;
    L.inv_scale_at = lead.inv_scale_at;
    L.found_inf = lead.found_inf;
    for (size_t k = begin; k < batch.size() && !L.part.full(); ++k) {
      const amp::UnscaleArgs& a = batch[k];
      HG_CHECK(a.found_inf == lead.found_inf && a.inv_scale == lead.inv_scale && a.inv_scale_at == lead.inv_scale_at,
               "GradScaler.unscale_: the gradients of one batch share their factor and found_inf flag");
      L.grad[L.part.count] = a.grad;
      L.n[L.part.count] = a.n;
      L.write[L.part.count] = a.write;
      L.part.add(ctx, a.n, kThreads);
    }
    launch(unscale_kernel<T>, L.part.blocks(), kThreads, 0, ctx.stream, L);
  }
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
