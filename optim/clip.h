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
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// The same over opt's parameters, aware of gradients the grad scaler left scaled (F16 gradients after
// amp::GradScaler::unscale_, whose factor 1/scale is pending in Optimizer::set_grad_scale): their norm
// is counted as if unscaled, and the clip factor is folded into the pending factor instead of being
// written into the F16 gradient. Equal to the vector version when nothing is pending. Use this one
// to clip F16 gradients between scaler.unscale_(opt) and scaler.step(opt). On a CUDA device the norm
// and the factor are computed on the device (the scaler's device 1/scale is read there) and the
// update kernel reads the factor; only returning the norm as a double waits for the device.
double clip_grad_norm_(Optimizer& opt, double max_norm, double norm_type = 2.0);

// The two above without reading the norm back: it is returned as a 0-d F64 tensor on the gradients'
// device (torch's clip_grad_norm_ returns a tensor too), so no call waits for the device and a
// training step that clips can be captured in a CUDA graph (cuda/graph.h). All gradients must be on
// one device.
Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
Tensor clip_grad_norm_tensor_(Optimizer& opt, double max_norm, double norm_type = 2.0);

// g = clamp(g, -clip_value, clip_value) for every gradient; NaN stays NaN.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace hg::optim
