#pragma once
// The grad scaler's backend contract (docs/ARCHITECTURE.md, "Dispatch and registration"): the unscale
// kernel's arguments and its dispatch table, then the one-thread ops over the device-resident state of
// the device path. Their math is ops/scaler_math.h.
#include <cstdint>
#include <span>

#include "core/dispatch_table.h"
#include "ops/scaler_math.h"

namespace hg::amp {

// In place over n contiguous elements of the table's dtype: g = UnscaleCheck(g) when `write`, else
// only the check (the gradient stays as it is); *found_inf (host memory for the CPU, device memory
// for a GPU kernel, set to 0 by the caller) becomes 1 when an element is inf or NaN.
struct UnscaleArgs {
  int64_t n = 0;
  void* grad = nullptr;
  double inv_scale = 1.0;  // already rounded to F32 by the scaler (torch's float inv_scale)
  bool write = true;
  float* found_inf = nullptr;
  const float* inv_scale_at = nullptr;  // the device path: 1/scale is read here (the gradient's device) instead
};
// A batch: gradients of the table's dtype on one device (one unscale_'s of that dtype); a GPU checks and
// unscales the whole batch in one launch (torch's _amp_foreach_non_finite_check_and_unscale_).
using UnscaleKernel = void (*)(std::span<const UnscaleArgs> batch);

// The per-element functor of one unscale: factor 1 for a check only, else 1/scale (from inv_scale_at
// when given, read where the kernel runs).
template <class C>
HG_HD UnscaleCheck<C> unscale_check(bool write, double inv_scale, const float* inv_scale_at) {
  if (!write) return {C(1)};
  return {inv_scale_at != nullptr ? static_cast<C>(*inv_scale_at) : static_cast<C>(inv_scale)};
}

// The CPU entries are filled at first use (amp/grad_scaler.cpp); cuda/kernels/amp.cu sets the CUDA ones.
HG_KERNEL_TABLE(UnscaleKernel, unscale_kernels, "GradScaler.unscale_");

// ---- the device path's scaler state (amp/grad_scaler.h, StepSkip::Kernel) -----------------------
// The state lives in memory of the loss's device: scale (F32), trackers = {growth tracker, hysteresis
// left, skipped in a row} (I64), inv_scale (F32) and found_inf, one F32 flag per optimizer. Every change to it is one
// of these ops, run by one thread (a <<<1,1>>> kernel on a GPU), so nothing is read back to the host.
enum class ScalerOp : uint8_t {
  PrepareUnscale,  // inv_scale = inv_scale_of(scale); found_inf[slot] = bad_inv_scale(inv_scale)
  Update,          // state_update with the OR of found_inf[0, num_found); flags = 0
  SetScale,        // scale = new_scale; flags = 0 (update(new_scale))
  Snapshot,        // out = {found_inf[slot], scale, skipped in a row} (a StepResult's values)
};

struct ScalerStateArgs {
  ScalerOp op = ScalerOp::Update;
  float* scale = nullptr;
  int64_t* trackers = nullptr;
  float* inv_scale = nullptr;
  float* found_inf = nullptr;
  int64_t num_found = 0;
  int64_t slot = 0;
  ScaleUpdateParams params = {};
  bool dynamic = true;
  float new_scale = 1.0f;
  float* out = nullptr;
};

HG_HD void scaler_state_update(const ScalerStateArgs& a) {
  bool found = false;
  for (int64_t k = 0; k < a.num_found; ++k) found = found || a.found_inf[k] != 0.0f;
  ScaleState st{.scale = *a.scale, .growth_tracker = a.trackers[0], .hysteresis_left = a.trackers[1],
                .skipped_in_a_row = a.trackers[2]};
  state_update(st, found, a.params, a.dynamic);
  *a.scale = st.scale;
  a.trackers[0] = st.growth_tracker;
  a.trackers[1] = st.hysteresis_left;
  a.trackers[2] = st.skipped_in_a_row;
  for (int64_t k = 0; k < a.num_found; ++k) a.found_inf[k] = 0.0f;
}

HG_HD void scaler_state_op(const ScalerStateArgs& a) {
  switch (a.op) {
    case ScalerOp::PrepareUnscale:
      *a.inv_scale = inv_scale_of(*a.scale);
      a.found_inf[a.slot] = bad_inv_scale(*a.inv_scale) ? 1.0f : 0.0f;
      return;
    case ScalerOp::Update:
      scaler_state_update(a);
      return;
    case ScalerOp::SetScale:
      *a.scale = a.new_scale;
      for (int64_t k = 0; k < a.num_found; ++k) a.found_inf[k] = 0.0f;
      return;
    case ScalerOp::Snapshot:
      a.out[0] = a.found_inf[a.slot];
      a.out[1] = *a.scale;
      a.out[2] = static_cast<float>(a.trackers[2]);
      return;
  }
}

using ScalerStateKernel = void (*)(const ScalerStateArgs& a);
// One entry per device type (dtype F32): the CPU's runs scaler_state_op here (amp/grad_scaler.cpp),
// the CUDA one as a one-thread kernel on the device's stream (cuda/kernels/amp.cu).
HG_KERNEL_TABLE(ScalerStateKernel, scaler_state_kernels, "GradScaler (device state)");

}  // namespace hg::amp
