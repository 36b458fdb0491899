#pragma once
// Normalisation layers' functional forms. Statistics are computed in F32 (F64 for F64) even for
// F16/BF16 input; the output keeps x's dtype; weight/bias may be F32 with F16/BF16 x (mixed
// precision keeps batch norm's affine parameters in F32).
#include <vector>

#include "core/tensor.h"
#include "ops/dispatch.h"

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

// ---- kernel interface (ops/cpu/norm.cpp, cuda/kernels/norm.cu); math in ops/norm_math.h ----------
// x, y, dy and dx are contiguous in the table's dtype; every other buffer is in its compute type
// (float, double for F64). weight and bias are null when undefined (1 and 0). Kernels handle empty
// extents and write every element of the buffers they are given (=, never +=).

// x viewed as (n, c, s). Forward, training: the batch statistics of each channel (two passes over the
// channel, F32 math) go to mean and invstd (1 / sqrt(biased var + eps)); running_mean/var, when non-null,
// are updated in place with the unbiased variance (needs n * s > 1). Eval: mean and invstd come from
// running_mean/var. Then y = normfn::forward. Backward: dx (when non-null) from dy and the forward's
// mean and invstd, through the batch statistics in training; dweight and dbias when non-null.
struct BatchNormArgs {
  int64_t n = 0, c = 0, s = 0;
  bool training = true;
  double eps = 1e-5, momentum = 0.1;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* mean = nullptr;  // (c): written by forward, read by backward
  void* invstd = nullptr;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
};
using BatchNormKernel = void (*)(const BatchNormArgs& a);

// x viewed as (rows, k): each row is normalised with its own statistics; weight and bias are (k).
// Forward writes y, mean and invstd (rows); backward writes dx (when non-null) and dweight, dbias (k,
// sums over the rows) when non-null.
struct LayerNormArgs {
  int64_t rows = 0, k = 0;
  double eps = 1e-5;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  void* mean = nullptr;
  void* invstd = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
};
using LayerNormKernel = void (*)(const LayerNormArgs& a);

DispatchTable<BatchNormKernel>& batch_norm_forward_kernels();
DispatchTable<BatchNormKernel>& batch_norm_backward_kernels();
DispatchTable<LayerNormKernel>& layer_norm_forward_kernels();
DispatchTable<LayerNormKernel>& layer_norm_backward_kernels();

namespace cpu {
void register_norm(DispatchTable<BatchNormKernel>& bn_fwd, DispatchTable<BatchNormKernel>& bn_bwd,
                   DispatchTable<LayerNormKernel>& ln_fwd, DispatchTable<LayerNormKernel>& ln_bwd);  // ops/cpu/norm.cpp
}

}  // namespace hg
