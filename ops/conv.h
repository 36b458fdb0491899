#pragma once
// 2-D convolution, NCHW. x is (N,C,H,W), w is (K,C/groups,R,S), b is (K) or undefined; y is
// (N,K,OH,OW) with OH = (H + 2*pad_h - dil_h*(R-1) - 1) / stride_h + 1 (likewise OW), as in
// torch.nn.functional.conv2d. F16/BF16 accumulate in F32.
#include <cstdint>

#include "core/tensor.h"
#include "ops/dispatch.h"

namespace hg {

// A pair of spatial sizes (height, width); one number means both, as in PyTorch.
struct Size2 {
  int64_t h = 0, w = 0;
  Size2() = default;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT(google-explicit-constructor): `.stride = 2` reads like torch
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
  bool operator==(const Size2&) const = default;
};

// The function's options, libtorch's role names: XFuncOptions for hg::x(...), XOptions for nn::X modules.
struct Conv2dFuncOptions {
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
};

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), Conv2dFuncOptions o = {});

// ---- kernel interface (shared by ops/cpu/conv.cpp and cuda/dnn.cpp) ----------------------------
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

DispatchTable<ConvKernel>& conv2d_forward_kernels();
DispatchTable<ConvKernel>& conv2d_backward_data_kernels();
DispatchTable<ConvKernel>& conv2d_backward_weight_kernels();

}  // namespace hg
