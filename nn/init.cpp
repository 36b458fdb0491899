#include "nn/init.h"

#include <cmath>

#include "autograd/node.h"
#include "nn/module.h"
#include "ops/elementwise.h"

namespace hg::nn::init {

namespace {
// Writes v (any dtype/device) into t's data, keeping t's identity, dtype and device.
void assign(const Tensor& t, const Tensor& v) { set_data(t, v.to(t.dtype()).to(t.device())); }

double fan(const Tensor& t, FanMode mode) {
  const Fans f = compute_fans(t);
  return static_cast<double>(mode == FanMode::FanIn ? f.in : f.out);
}
}  // namespace

Fans compute_fans(const Tensor& w) {
  HG_CHECK(w.ndim() >= 2, "init: fan in/out need a tensor with at least 2 dims, got shape ", w.shape());
  int64_t field = 1;
  for (int64_t d = 2; d < w.ndim(); ++d) field *= w.shape()[d];
  return {w.shape()[1] * field, w.shape()[0] * field};
}

double calculate_gain(Nonlinearity nl, double param) {
  switch (nl) {
    case Nonlinearity::Relu: return std::sqrt(2.0);
    case Nonlinearity::LeakyRelu: return std::sqrt(2.0 / (1.0 + param * param));
    case Nonlinearity::Tanh: return 5.0 / 3.0;
    default: return 1.0;  // linear, sigmoid
  }
}

void uniform_(const Tensor& t, double lo, double hi, Generator* gen) {
  NoGradGuard ng;
  // torch: from + (to - from) * u, computed in the tensor's (here F32 for low precision) arithmetic
  const DType dt = t.dtype() == DType::F64 ? DType::F64 : DType::F32;
  assign(t, rand(t.shape(), {.dtype = dt}, gen) * (hi - lo) + lo);
}

void normal_(const Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard ng;
  const DType dt = t.dtype() == DType::F64 ? DType::F64 : DType::F32;
  assign(t, randn(t.shape(), {.dtype = dt}, gen) * std + mean);
}

void constant_(const Tensor& t, double value) {
  NoGradGuard ng;
  assign(t, full(t.shape(), value, {.dtype = t.dtype()}));
}
void zeros_(const Tensor& t) { constant_(t, 0.0); }
void ones_(const Tensor& t) { constant_(t, 1.0); }

void kaiming_uniform_(const Tensor& t, KaimingOptions o) {
  const double bound = calculate_gain(o.nonlinearity, o.a) * std::sqrt(3.0 / fan(t, o.mode));
  uniform_(t, -bound, bound, o.generator);
}

void kaiming_normal_(const Tensor& t, KaimingOptions o) {
  normal_(t, 0.0, calculate_gain(o.nonlinearity, o.a) / std::sqrt(fan(t, o.mode)), o.generator);
}

void xavier_uniform_(const Tensor& t, double gain, Generator* gen) {
  const Fans f = compute_fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(f.in + f.out));
  uniform_(t, -bound, bound, gen);
}

}  // namespace hg::nn::init
