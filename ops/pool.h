#pragma once
// 2-D pooling, NCHW (or CHW). x is (N,C,H,W); y is (N,C,OH,OW) with PyTorch's output-size formula
// (ceil_mode included). Max pooling propagates NaN and routes the gradient to the first maximum.
#include "core/tensor.h"
#include "ops/conv.h"  // Size2

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

}  // namespace hg
