#pragma once
// Host launchers of the optimizer and clipping kernels (cuda/kernels/optim.cu), with the signatures of
// ops/kernels/optim.h's tables; register_optim() puts them there (cuda/register.h). Every
// launcher enqueues on the device's stream and checks the launch; none synchronises.
#include <span>

#include "ops/kernels/optim.h"

namespace hg::cuda {

// T is float, f16, bf16 or double.
template <class T> void grad_norm(std::span<const optim::GradNormArgs> batch);
template <class T> void grad_transform(std::span<const optim::GradTransformArgs> batch);

}  // namespace hg::cuda
