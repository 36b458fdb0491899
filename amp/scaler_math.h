#pragma once
// The math of the grad scaler, written once (DESIGN.md §2.3) for the CPU loop (amp/grad_scaler.cpp)
// and a CUDA kernel: torch's _amp_foreach_non_finite_check_and_unscale_ (per element) and
// _amp_update_scale_ (one scalar update, with Apex/Megatron's hysteresis and min/max scale added),
// then the unscale kernel's arguments and its dispatch table.
#include <math.h>

#include <cstdint>

#include "core/macros.h"
#include "ops/dispatch.h"

namespace hg::amp {

// Never compile with fast-math (DESIGN.md §7): it folds this test away. inf - inf and NaN - NaN are NaN.
template <class C>
HG_HD bool amp_is_finite(C x) {
  return x - x == C(0);
}

// g * inv_scale in the compute type C (F32 for F16/BF16 gradients), noting whether g was finite.
// The same per-element rule as torch's unscale kernel: a non-finite g sets the flag; g is multiplied unless inv_scale is 1.
template <class C>
struct UnscaleCheck {
  C inv_scale;
  HG_HD C operator()(C g, bool& nonfinite) const {
    if (!amp_is_finite(g)) nonfinite = true;
    return inv_scale == C(1) ? g : g * inv_scale;
  }
};

struct ScaleUpdateParams {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;   // back off at the hysteresis-th overflow in a row (1: every overflow, torch)
  float min_scale = 0.0f;   // a floor for the backed-off scale (0: none, torch)
  float max_scale = INFINITY;  // a ceiling for the grown scale (inf: none, torch)
};

struct ScaleState {
  float scale = 65536.0f;      // F32, as torch's _scale tensor
  int64_t growth_tracker = 0;  // clean updates since the last growth or overflow
  int64_t hysteresis_left = 1; // overflows still tolerated before backing off
};

// One update of the scale after an iteration; found_inf: some optimizer saw an inf/NaN gradient.
// torch's amp_update_scale_cuda_kernel with apex's update_scale_hysteresis on top:
//   overflow: growth_tracker = 0; hysteresis_left -= 1; back off only when it reaches 0
//             (scale *= backoff_factor in double, rounded to F32, then at least min_scale);
//   clean:    hysteresis_left = hysteresis; after growth_interval clean updates in a row the scale
//             grows by growth_factor, capped at max_scale, and never to inf (it then stays).
HG_HD void scale_update(ScaleState& st, bool found_inf, const ScaleUpdateParams& p) {
  if (found_inf) {
    st.growth_tracker = 0;
    st.hysteresis_left -= 1;
    if (st.hysteresis_left > 0) return;
    const float backed = static_cast<float>(static_cast<double>(st.scale) * p.backoff_factor);
    st.scale = backed < p.min_scale ? p.min_scale : backed;
    return;
  }
  st.hysteresis_left = p.hysteresis;
  const int64_t successful = st.growth_tracker + 1;
  if (successful < p.growth_interval) {
    st.growth_tracker = successful;
    return;
  }
  st.growth_tracker = 0;
  float grown = static_cast<float>(static_cast<double>(st.scale) * p.growth_factor);
  if (!amp_is_finite(grown)) return;  // torch: never grow the scale to inf
  if (grown > p.max_scale) grown = p.max_scale;
  if (grown > st.scale) st.scale = grown;  // at max_scale it stays
}

// In place over n contiguous elements of the table's dtype: g = UnscaleCheck(g) when `write`, else
// only the check (the gradient stays as it is); *found_inf (host memory for the CPU, device memory
// for a GPU kernel, set to 0 by the caller) becomes 1 when an element is inf or NaN.
struct UnscaleArgs {
  int64_t n = 0;
  void* grad = nullptr;
  double inv_scale = 1.0;  // already rounded to F32 by the scaler (torch's float inv_scale)
  bool write = true;
  float* found_inf = nullptr;
};
using UnscaleKernel = void (*)(const UnscaleArgs& a);

// The CPU entries are filled at first use (amp/grad_scaler.cpp); a CUDA backend would set its own.
DispatchTable<UnscaleKernel>& unscale_kernels();

}  // namespace hg::amp
