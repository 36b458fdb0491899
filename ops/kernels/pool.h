#pragma once
// The kernel contract of ops/pool.h: argument structs and dispatch tables (docs/ARCHITECTURE.md,
// "Dispatch and registration"). Implemented by cpu/pool.cpp, cuda/kernels/pool.cu); window math in ops/pool_math.h.
#include "core/dispatch_table.h"
#include "ops/pool.h"
#include "ops/pool_math.h"

namespace hg {

// planes = N*C contiguous planes; x and dx are (planes, g.h.in, g.w.in), y and dy (planes, g.h.out,
// g.w.out), all in the table's dtype. Forward writes y and, for Max, indices (flat ih*W + iw of each
// window's maximum, -1 for a window with no input). Backward writes every element of dx (=, never +=)
// from dy (and indices for Max).
struct PoolArgs {
  PoolGeom g;
  int64_t planes = 0;
  const void* x = nullptr;
  void* y = nullptr;
  int64_t* indices = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
};
using PoolKernel = void (*)(const PoolArgs& a);

HG_KERNEL_TABLE(PoolKernel, pool2d_forward_kernels, "pool2d");
HG_KERNEL_TABLE(PoolKernel, pool2d_backward_kernels, "pool2d backward");

}  // namespace hg
