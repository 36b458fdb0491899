#pragma once
// Layers without parameters: activations, pooling, flatten. Each forwards to the op of the same name.
#include "nn/module.h"
#include "ops/elementwise.h"
#include "ops/pool.h"

namespace hg::nn {

class ReLU : public Module {
 public:
  std::string type_name() const override { return "ReLU"; }
  Tensor forward(const Tensor& x) override { return relu(x); }
};

class GELU : public Module {
 public:
  explicit GELU(GeluApprox approximate = GeluApprox::None) : approximate(approximate) {}
  std::string type_name() const override { return "GELU"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override { return gelu(x, approximate); }
  GeluApprox approximate;
};

class Sigmoid : public Module {
 public:
  std::string type_name() const override { return "Sigmoid"; }
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

class Tanh : public Module {
 public:
  std::string type_name() const override { return "Tanh"; }
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions o) : options(o) {}
  std::string type_name() const override { return "MaxPool2d"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  Pool2dOptions options;
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions o) : options(o) {}
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

struct FlattenOptions {
  int64_t start_dim = 1;  // torch.nn.Flatten keeps the batch dim
  int64_t end_dim = -1;
};
class Flatten : public Module {
 public:
  explicit Flatten(FlattenOptions o = {}) : options(o) {}
  std::string type_name() const override { return "Flatten"; }
  std::string extra_repr() const override;
  Tensor forward(const Tensor& x) override;
  FlattenOptions options;
};

}  // namespace hg::nn
