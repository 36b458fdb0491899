#pragma once
// 2-D convolution, NCHW. x is (N,C,H,W), w is (K,C/groups,R,S), b is (K) or undefined; y is
// (N,K,OH,OW) with OH = (H + 2*pad_h - dil_h*(R-1) - 1) / stride_h + 1 (likewise OW), as in
// torch.nn.functional.conv2d. F16/BF16 accumulate in F32.
#include <cstdint>

#include "core/tensor.h"

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

}  // namespace hg
