#pragma once
// Host launchers of the pooling CUDA kernels (cuda/kernels/pool.cu), with the signature of the tables
// in ops/pool.h; register_pool() (cuda/register.h) puts them into those tables. Every launcher enqueues on the device's
// stream and checks the launch; none synchronises. Pure host declarations.
#include "ops/kernels/pool.h"
#include "ops/pool.h"

namespace hg::cuda {

// T is float, f16, bf16 or double.
template <class T> void pool2d_forward(const PoolArgs& a);
template <class T> void pool2d_backward(const PoolArgs& a);

}  // namespace hg::cuda
