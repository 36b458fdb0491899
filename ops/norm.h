#pragma once
// Normalisation layers' functional forms. Statistics are computed in F32 (F64 for F64) even for
// F16/BF16 input; the output keeps x's dtype; weight/bias may be F32 with F16/BF16 x (mixed
// precision keeps batch norm's affine parameters in F32).
#include <vector>

#include "core/tensor.h"

namespace hg {

struct BatchNormFuncOptions {
  bool training = true;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  double eps = 1e-5;
};
// x is (N,C) or (N,C,*); running_mean/var, weight, bias are (C) or undefined. In training mode the
// batch statistics normalise x and, when defined, running_mean/var are updated in place (the
// running variance uses the unbiased batch variance, like torch). In eval mode the running
// statistics normalise x (they must then be defined).
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormFuncOptions o = {});

struct LayerNormFuncOptions {
  double eps = 1e-5;
};
// Normalises over the last normalized_shape.size() dims of x; weight/bias have normalized_shape or
// are undefined.
Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), LayerNormFuncOptions o = {});

}  // namespace hg
