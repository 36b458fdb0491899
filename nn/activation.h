#pragma once
// Activation layers (no parameters). Each forwards to the op of the same name; pooling is nn/pooling.h,
// Flatten nn/flatten.h.
#include "nn/module.h"
#include "ops/elementwise.h"

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

class SiLU : public Module {
 public:
  std::string type_name() const override { return "SiLU"; }
  Tensor forward(const Tensor& x) override { return silu(x); }
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

}  // namespace hg::nn
