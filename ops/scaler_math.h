#pragma once
// The math of the grad scaler, written once (docs/ARCHITECTURE.md, Principles 3) for the CPU loops
// (cpu/scaler.cpp, amp/grad_scaler.cpp's host path) and the CUDA kernels: torch's
// _amp_foreach_non_finite_check_and_unscale_ (per element) and _amp_update_scale_ (one scalar update, with
// Apex/Megatron's hysteresis and min/max scale added). The kernels' arguments and tables, the backend
// contract, are ops/kernels/scaler.h; amp/grad_scaler.h needs only this math and its state.
#include <float.h>
#include <math.h>

#include <cstdint>

#include "core/macros.h"

namespace hg::amp {

// Never compile with fast-math (docs/ARCHITECTURE.md, Style 3): it folds this test away. inf - inf and NaN - NaN are NaN.
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

// The scale stays a normal F32 number: never below 2^-126 (FLT_MIN, whatever min_scale says), so 1/scale
// (at most 2^126) is finite, and never grown to inf. Below it, 1/scale would be inf from 2^-128 on, a
// finite gradient times inf would pass the finite check and write inf/NaN into the parameters, and a
// scale flushed to 0 would stay 0 for ever.
constexpr float kScaleFloor = FLT_MIN;

struct ScaleUpdateParams {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  int64_t hysteresis = 1;   // back off at the hysteresis-th overflow in a row (1: every overflow, torch)
  float min_scale = 0.0f;   // a floor for the backed-off scale (0: none, torch; kScaleFloor holds anyway)
  float max_scale = INFINITY;  // a ceiling for the grown scale (inf: none, torch)
};

struct ScaleState {
  float scale = 65536.0f;      // F32, as torch's _scale tensor
  int64_t growth_tracker = 0;  // clean updates since the last growth or overflow
  int64_t hysteresis_left = 1; // overflows still tolerated before backing off
  int64_t skipped_in_a_row = 0;  // updates with an inf/NaN since the last clean one (halfgrad's stop rule)
};

// One update of the scale after an iteration; found_inf: some optimizer saw an inf/NaN gradient.
// torch's amp_update_scale_cuda_kernel with apex's update_scale_hysteresis on top:
//   overflow: growth_tracker = 0; hysteresis_left -= 1; back off only when it reaches 0
//             (scale *= backoff_factor in double, rounded to F32, then at least min_scale and
//             kScaleFloor);
//   clean:    hysteresis_left = hysteresis; after growth_interval clean updates in a row the scale
//             grows by growth_factor, capped at max_scale, and never to inf (it then stays).
HG_HD void scale_update(ScaleState& st, bool found_inf, const ScaleUpdateParams& p) {
  if (found_inf) {
    st.growth_tracker = 0;
    st.hysteresis_left -= 1;
    if (st.hysteresis_left > 0) return;
    const float backed = static_cast<float>(static_cast<double>(st.scale) * p.backoff_factor);
    const float floor = p.min_scale > kScaleFloor ? p.min_scale : kScaleFloor;
    st.scale = backed < floor ? floor : backed;
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

// One iteration's update of the whole state, on both paths: the skip count (halfgrad's stop rule, for a
// static scale too), then scale_update when the scale is dynamic.
HG_HD void state_update(ScaleState& st, bool found_inf, const ScaleUpdateParams& p, bool dynamic) {
  st.skipped_in_a_row = found_inf ? st.skipped_in_a_row + 1 : 0;
  if (dynamic) scale_update(st, found_inf, p);
}

// 1/scale as torch computes it, _scale.double().reciprocal().float(): in double, rounded to F32.
HG_HD float inv_scale_of(float scale) { return static_cast<float>(1.0 / static_cast<double>(scale)); }
// An unscale by this factor counts as an overflow: 1/scale is inf, NaN or 0 (a scale that left F32's
// normal range; kScaleFloor keeps the scaler's own updates from it, this guards every other way in).
HG_HD bool bad_inv_scale(float inv) { return !amp_is_finite(inv) || inv == 0.0f; }

}  // namespace hg::amp
