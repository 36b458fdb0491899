#pragma once
#include <concepts>
// Pooling layers (torch.nn.MaxPool2d, AvgPool2d, AdaptiveAvgPool2d): each forwards to the op of the same name.
#include "nn/module.h"
#include "core/chained_options.h"
#include "ops/pool.h"

namespace hg::nn {

// libtorch's chained pooling options over hg::Pool2dOptions: nn::MaxPool2dOptions(3).stride(2).padding(1),
// nn::AvgPool2dOptions(2).count_include_pad(false); the stride starts equal to the kernel size, as libtorch's.
template <class Self>
class PoolOptionsBase : public ChainedOptions<Pool2dOptions> {
 public:
  PoolOptionsBase(Size2 kernel_size) {
    args_.kernel_size = kernel_size;
    args_.stride = kernel_size;
  }
  HG_OPTION(Self, Size2, kernel_size)
  HG_OPTION(Self, Size2, stride)
  HG_OPTION(Self, Size2, padding)
  HG_OPTION(Self, bool, ceil_mode)
};
class MaxPool2dOptions : public PoolOptionsBase<MaxPool2dOptions> {
 public:
  using PoolOptionsBase::PoolOptionsBase;
  HG_OPTION(MaxPool2dOptions, Size2, dilation)
};
class AvgPool2dOptions : public PoolOptionsBase<AvgPool2dOptions> {
 public:
  using PoolOptionsBase::PoolOptionsBase;
  HG_OPTION(AvgPool2dOptions, bool, count_include_pad)
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions o) : options(o) {}
  explicit MaxPool2d(const MaxPool2dOptions& o) : options(o.args()) {}
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
  explicit AvgPool2d(const AvgPool2dOptions& o) : options(o.args()) {}
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
