#pragma once
// torch.nn.utils's gradient clipping, where PyTorch users look for it: nn::utils::clip_grad_norm_(
// model.parameters(), max_norm). The functions are optim/clip.h's (they work on any parameter list, and
// after amp::GradScaler::unscale_ they see the unscaled gradients).
#include "optim/clip.h"

namespace hg::nn::utils {

using optim::clip_grad_norm_;
using optim::clip_grad_norm_tensor_;
using optim::clip_grad_value_;

}  // namespace hg::nn::utils
