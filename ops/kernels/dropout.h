#pragma once
// The kernel contract of ops/dropout.h: argument structs and dispatch tables (docs/ARCHITECTURE.md,
// "Dispatch and registration"). Implemented by cpu/dropout.cpp, cuda/kernels/dropout.cu.
#include "core/dispatch_table.h"
#include "core/rng.h"
#include "ops/dropout.h"

namespace hg {

// y[i] = x[i] * (keep(i) ? scale : 0) for i < n, keep(i) from Philox stream rng (core/rng.h's PhiloxDraw:
// (seed, offset), or relative to a base in device memory in a captured graph) as ops/dropout_math.h says. The backward is the same kernel on dy (it regenerates the mask, so none is stored).
struct DropoutArgs {
  int64_t n = 0;
  PhiloxDraw rng = {};
  uint32_t threshold = 0;  // ceil(p * 2^24)
  double scale = 1.0;      // 1 / (1 - p)
  const void* x = nullptr;
  void* y = nullptr;
};
using DropoutKernel = void (*)(const DropoutArgs& a);
HG_KERNEL_TABLE(DropoutKernel, dropout_kernels, "dropout");

}  // namespace hg
