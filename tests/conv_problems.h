#pragma once
// The convolutions the cuDNN tests share, so that every problem planned without a device
// (tests/cuda/test_cudnn_plans.cpp) is also run against the CPU on one (tests/gpu/test_gpu_conv.cpp).
#include <cstdint>

namespace hg::test {

// A 2-D convolution with the same stride, padding and dilation along both axes.
struct ConvProblem {
  const char* name;
  int64_t n, c, h, w, k, r, s, stride, pad, dil, groups;
  int64_t oh() const { return (h + 2 * pad - dil * (r - 1) - 1) / stride + 1; }
  int64_t ow() const { return (w + 2 * pad - dil * (s - 1) - 1) / stride + 1; }
};

// The CNN's two convolutions at its batch of 128 (examples/fashion_mnist_cnn.cpp), and conv2 at 64.
inline constexpr ConvProblem kCnnConv1{"cnn conv1", 128, 1, 28, 28, 32, 3, 3, 1, 1, 1, 1};
inline constexpr ConvProblem kCnnConv2{"cnn conv2", 128, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1};
inline constexpr ConvProblem kCnnConv2Batch64{"cnn conv2 batch 64", 64, 32, 14, 14, 64, 3, 3, 1, 1, 1, 1};

// The CNN's convolutions (conv2 at batch 64: the same shape, half the time on the emulated device), then
// the awkward ones: strided + dilated + grouped with a non-square kernel and odd sizes, a C=3 stem,
// depthwise, grouped 1x1, odd sizes without padding. The GPU test draws its inputs from the default
// generator in this order, so a problem added later goes last, where it leaves the inputs of the ones
// before it as they were. The deviceless plans test adds kCnnConv2 (batch 128) to these.
inline constexpr ConvProblem kConvProblems[] = {
    kCnnConv1,
    kCnnConv2Batch64,
    {"strided dilated grouped", 8, 16, 17, 19, 32, 3, 5, 2, 2, 2, 4},
    {"rgb stem 7x7 stride 2", 8, 3, 32, 32, 16, 7, 7, 2, 3, 1, 1},
    {"depthwise", 4, 8, 9, 9, 8, 3, 3, 1, 1, 1, 8},
    {"grouped 1x1", 4, 6, 9, 9, 6, 1, 1, 1, 0, 1, 3},
    {"odd sizes", 3, 5, 7, 11, 7, 2, 3, 1, 0, 1, 1},
};

}  // namespace hg::test
