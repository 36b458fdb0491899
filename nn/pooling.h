#pragma once
#include <concepts>
// Pooling layers (torch.nn.MaxPool2d, AvgPool2d, AdaptiveAvgPool2d): each forwards to the op of the same name.
#include "nn/module.h"
#include "ops/pool.h"

namespace hg::nn {

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions o) : options(o) {}
  // libtorch's MaxPool2d(2): a square kernel, stride equal to it
  template <std::integral I> explicit MaxPool2d(I kernel_size) : options({.kernel_size = int64_t(kernel_size)}) {}
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions o) : options(o) {}
  template <std::integral I> explicit AvgPool2d(I kernel_size) : options({.kernel_size = int64_t(kernel_size)}) {}
  std::string type_name() const override { return "AvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options); }
  Pool2dOptions options;
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {}
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  Size2 output_size;
};

}  // namespace hg::nn
