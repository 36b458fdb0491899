#pragma once
// Gradient clipping, in place on the parameters' .grad() buffers (torch.nn.utils.clip_grad_norm_ and
// clip_grad_value_). Parameters without a gradient are skipped.
#include <vector>

#include "core/tensor.h"
#include "optim/optimizer.h"

namespace hg::optim {

// The norm of all gradients together (as if concatenated), accumulated in double; norm_type is any
// p > 0 or infinity (max |g|). When max_norm / (norm + 1e-6) < 1, every gradient is multiplied by that
// factor (computed in double, applied in the gradient's compute type). Returns the norm before clipping.
// A NaN or inf norm scales every gradient by NaN or 0, as torch does with error_if_nonfinite=False.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);

// The same over opt's parameters, aware of gradients the grad scaler left scaled (F16 gradients after
// amp::GradScaler::unscale_, whose factor 1/scale is pending in Optimizer::set_grad_scale): their norm
// is counted as if unscaled, and the clip factor is folded into the pending factor instead of being
// written into the F16 gradient. Equal to the vector version when nothing is pending. Use this one
// to clip F16 gradients between scaler.unscale_(opt) and scaler.step(opt). On the scaler's device path
// the pending factor is a device 1/scale: its value is read back once per gradient (this function
// returns the norm as a double, so it synchronises in any case) and the clip factor is folded into the
// factor's host part, which the update kernel multiplies with the device value.
double clip_grad_norm_(Optimizer& opt, double max_norm, double norm_type = 2.0);

// g = clamp(g, -clip_value, clip_value) for every gradient; NaN stays NaN.
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace hg::optim
