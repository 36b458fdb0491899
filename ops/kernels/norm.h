#pragma once
// The kernel contract of ops/norm.h: argument structs and dispatch tables (docs/ARCHITECTURE.md,
// "Dispatch and registration"). Implemented by cpu/norm.cpp, cuda/kernels/norm.cu); math in ops/norm_math.h.
#include "core/dispatch_table.h"
#include "ops/norm.h"

namespace hg {

// x, y, dy and dx are contiguous in the table's dtype; every other buffer is in its compute type
// (float, double for F64). weight and bias are null when undefined (1 and 0). Kernels handle empty
// extents and write every element of the buffers they are given (=, never +=).

// x viewed as (n, c, s). Forward, training: the batch statistics of each channel (two passes over the
// channel, F32 math) go to mean and invstd (1 / sqrt(biased var + eps)); running_mean/var, when non-null,
// are updated in place with the unbiased variance (needs n * s > 1). Eval: mean and invstd come from
// running_mean/var. Then y = normfn::forward. Backward: dx (when non-null) from dy and the forward's
// mean and invstd, through the batch statistics in training; dweight and dbias when non-null.
struct BatchNormArgs {
  int64_t n = 0, c = 0, s = 0;
  bool training = true;
  double eps = 1e-5, momentum = 0.1;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* mean = nullptr;  // (c): written by forward, read by backward
  void* invstd = nullptr;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
};
using BatchNormKernel = void (*)(const BatchNormArgs& a);

// x viewed as (rows, k): each row is normalised with its own statistics; weight and bias are (k).
// Forward writes y, mean and invstd (rows); backward writes dx (when non-null) and dweight, dbias (k,
// sums over the rows) when non-null.
struct LayerNormArgs {
  int64_t rows = 0, k = 0;
  double eps = 1e-5;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* mean = nullptr;
  void* invstd = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
};
using LayerNormKernel = void (*)(const LayerNormArgs& a);

HG_KERNEL_TABLE(BatchNormKernel, batch_norm_forward_kernels, "batch_norm");
HG_KERNEL_TABLE(BatchNormKernel, batch_norm_backward_kernels, "batch_norm backward");
HG_KERNEL_TABLE(LayerNormKernel, layer_norm_forward_kernels, "layer_norm");
HG_KERNEL_TABLE(LayerNormKernel, layer_norm_backward_kernels, "layer_norm backward");

}  // namespace hg
