#pragma once
// The whole public API of halfgrad.
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "core/convert.h"
#include "core/parallel.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg::cuda {
// True when this build has the CUDA backend and a GPU is present. Never initialises the driver in a
// build without CUDA.
bool is_available();
int device_count();
}  // namespace hg::cuda
