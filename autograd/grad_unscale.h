#pragma once
// The factor a leaf's gradient still carries (docs/ARCHITECTURE.md, "The loss scale, from scale() to the
// update").
//
// amp::GradScaler::unscale_ does not unscale an F16 gradient in place: in F16, g * (1/scale) would flush
// the small values scaling exists to keep (torch refuses to unscale F16 gradients for that reason). The
// gradient stays scaled and carries a GradUnscale in its autograd metadata: the factor the update kernel
// multiplies it by, in F32, as it reads it. Every reader of gradients asks the parameter for it
// (Tensor::grad_unscale): the optimizers' step, clipping (which folds its own factor in), an inspector.
// The factor belongs to the gradient it was made for: set_grad, zero_grad and a backward that
// accumulates into the gradient drop it.
#include "core/tensor.h"

namespace hg {

// The unscaled gradient is its values times host * (*inv_scale or 1) * (*clip or 1), formed in double and
// rounded once to the compute type.
struct GradUnscale {
  double host = 1.0;                 // the scaler's 1/scale on its host path, times host clip factors
  const float* inv_scale = nullptr;  // the scaler's 1/scale in device memory (its device path)
  const double* clip = nullptr;      // clip_grad_norm_'s factor in device memory
  Tensor inv_scale_memory = {};      // owns what inv_scale points into (the scaler's device state)
  Tensor clip_memory = {};           // owns what clip points into
  bool pending() const { return host != 1.0 || inv_scale != nullptr || clip != nullptr; }
};

}  // namespace hg
