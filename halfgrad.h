#pragma once
// The whole public API of halfgrad.
#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "amp/inspect/formats.h"
#include "amp/inspect/histogram.h"
#include "amp/inspect/memory.h"
#include "amp/inspect/nonfinite.h"
#include "amp/inspect/timeline.h"
#include "amp/opt_level.h"
#include "amp/policy.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/convert.h"
#include "core/parallel.h"
#include "core/dtype.h"
#include "core/half.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "data/cifar.h"
#include "data/dataloader.h"
#include "data/idx.h"
#include "nn/checkpoint.h"
#include "nn/nn.h"
#include "ops/conv.h"
#include "ops/dropout.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/loss.h"
#include "ops/matmul.h"
#include "ops/norm.h"
#include "ops/pool.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "optim/adam.h"
#include "optim/clip.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"

namespace hg::cuda {
// True when this build has the CUDA backend and a GPU is present. Never initialises the driver in a
// build without CUDA.
bool is_available();
int device_count();
}  // namespace hg::cuda
