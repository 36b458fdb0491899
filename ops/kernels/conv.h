#pragma once
// The kernel contract of ops/conv.h: argument structs and dispatch tables (docs/ARCHITECTURE.md,
// "Dispatch and registration"). Implemented by shared by cpu/conv.cpp and cuda/dnn.cpp.
#include "core/dispatch_table.h"
#include "ops/conv.h"

namespace hg {

// One convolution problem. All tensors are contiguous NCHW / KCRS in `dtype`; F16/BF16 kernels
// accumulate in F32. Forward writes y (and adds b when non-null); backward-data writes dx from dy
// and w; backward-weight writes dw from x and dy (and db = sum of dy over N,OH,OW when db is
// non-null). Kernels overwrite their outputs (=, never +=).
struct ConvArgs {
  DType dtype = DType::F32;
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t k = 0, r = 0, s = 0;         // output channels, kernel height, kernel width
  int64_t oh = 0, ow = 0;              // output spatial size
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dil_h = 1, dil_w = 1, groups = 1;
  const void* x = nullptr;
  const void* wt = nullptr;
  const void* b = nullptr;
  const void* dy = nullptr;
  void* y = nullptr;
  void* dx = nullptr;
  void* dw = nullptr;
  void* db = nullptr;
};
using ConvKernel = void (*)(const ConvArgs& a);

HG_KERNEL_TABLE(ConvKernel, conv2d_forward_kernels, "conv2d");
HG_KERNEL_TABLE(ConvKernel, conv2d_backward_data_kernels, "conv2d backward (dx)");
HG_KERNEL_TABLE(ConvKernel, conv2d_backward_weight_kernels, "conv2d backward (dw)");

}  // namespace hg
