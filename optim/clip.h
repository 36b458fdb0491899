#pragma once
// Gradient clipping, in place on the parameters' .grad() buffers (torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_). Parameters without a gradient are skipped.
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace hg::optim {

// The norm of all gradients together (as if concatenated), accumulated in double; norm_type is any
// p > 0 or infinity (max |g|). When max_norm / (norm + 1e-6) < 1, every gradient is multiplied by that
// factor (computed in double, applied in the gradient's compute type). Returns the norm before clipping
// (reading it back from a device: the call waits for the device).
// A NaN or inf norm scales every gradient by NaN or 0, as torch does with error_if_nonfinite=False.
//
// After amp::GradScaler::unscale_ an F16 gradient is still scaled, its 1/scale pending for the update
// (Tensor::grad_unscale). Clipping reads that factor from the parameter: the norm counts such a gradient as
// if unscaled, and its clip factor joins the pending one instead of being written into the F16 values. So
// the norm is the unscaled gradients' whichever parameters are passed (model.parameters() under O2
// included). On a CUDA device the norm and the factor are computed on the device (the scaler's device
// 1/scale is read there) and the update kernel reads the factor; only returning the norm as a double
// waits for the device.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// The same over opt's parameters (torch users write clip_grad_norm_(model.parameters(), ...): the same), except
// for an optimizer whose gradients are sharded over ranks (Optimizer::gradients_sharded: ZeroRedundantOptimizer with
// reduce_scatter_gradients), where the norm is that of every rank's gradients together (a collective: every rank
// calls it); the parameters' form would see this rank's share only.
double clip_grad_norm_(const Optimizer& opt, double max_norm, double norm_type = 2.0);

// The two above without reading the norm back: it is returned as a 0-d F64 tensor on the gradients'
// device (torch's clip_grad_norm_ returns a tensor too), so no call waits for the device and a
// training step that clips can be captured in a CUDA graph (cuda/graph.h). All gradients must be on
// one device.
Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
Tensor clip_grad_norm_tensor_(const Optimizer& opt, double max_norm, double norm_type = 2.0);

// g = clamp(g, -clip_value, clip_value) for every gradient; NaN stays NaN. A gradient the grad scaler's
// host path left scaled by s is clamped at clip_value / s (the same values once the update unscales it, to
// F32 rounding); one whose factor lives on a device is refused with an hg::Error.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace hg::optim
