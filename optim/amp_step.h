#pragma once
// What amp::GradScaler::step hands to Optimizer::step (docs/ARCHITECTURE.md, "The loss scale, from scale()
// to the update"). The factor each gradient still carries is not in it: it lives with the gradient
// (Tensor::grad_unscale, autograd/grad_unscale.h), where the update, clipping and any other reader find it.
#include "autograd/grad_unscale.h"

namespace hg::optim {

// Pointers into memory of the parameters' device, read by the update kernels (so nothing crosses to the
// host and a captured step reads them at replay).
struct AmpStep {
  const float* found_inf = nullptr;  // nonzero: every update leaves parameter, master and state untouched
};

}  // namespace hg::optim
