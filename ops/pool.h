#pragma once
// 2-D pooling, NCHW (or CHW). x is (N,C,H,W); y is (N,C,OH,OW) with PyTorch's output-size formula
// (ceil_mode included). Max pooling propagates NaN and routes the gradient to the first maximum.
#include "core/tensor.h"
#include "ops/conv.h"  // Size2
#include "ops/dispatch.h"
#include "ops/pool_math.h"

namespace hg {

struct Pool2dOptions {
  Size2 kernel_size = 0;
  Size2 stride = 0;  // 0: equal to kernel_size (torch's default)
  Size2 padding = 0;
  Size2 dilation = 1;  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};

Tensor max_pool2d(const Tensor& x, Pool2dOptions o);
Tensor avg_pool2d(const Tensor& x, Pool2dOptions o);
// Output (OH,OW); window i spans [floor(i*H/OH), ceil((i+1)*H/OH)) like torch.
Tensor adaptive_avg_pool2d(const Tensor& x, Size2 output_size);

// ---- kernel interface (ops/cpu/pool.cpp, cuda/kernels/pool.cu); window math in ops/pool_math.h ----

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

DispatchTable<PoolKernel>& pool2d_forward_kernels();
DispatchTable<PoolKernel>& pool2d_backward_kernels();

namespace cpu {
void register_pool(DispatchTable<PoolKernel>& fwd, DispatchTable<PoolKernel>& bwd);  // ops/cpu/pool.cpp
}

}  // namespace hg
