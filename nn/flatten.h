#pragma once
// torch.nn.Flatten: flattens dims start_dim..end_dim into one (the batch dim stays by default).
#include "nn/module.h"

namespace hg::nn {

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
