#pragma once
// Parameter initialisers (torch.nn.init), in place and without recording autograd. Random ones draw
// from the given generator or the default one, so hg::manual_seed fixes a model's initial weights.
#include <cstdint>

#include "core/rng.h"
#include "core/tensor.h"

namespace hg::nn::init {

// fan_in = size(1) * receptive field, fan_out = size(0) * receptive field (torch's convention for
// (out, in, kh, kw) and (out, in) weights).
struct Fans {
  int64_t in = 0, out = 0;
};
Fans compute_fans(const Tensor& w);

enum class FanMode : uint8_t { FanIn, FanOut };
enum class Nonlinearity : uint8_t { Linear, Relu, LeakyRelu, Tanh, Sigmoid };
double calculate_gain(Nonlinearity nl, double param = 0.01);  // param: the leaky-relu slope

void uniform_(const Tensor& t, double lo, double hi, Generator* gen = nullptr);
void normal_(const Tensor& t, double mean, double std, Generator* gen = nullptr);
void constant_(const Tensor& t, double value);
void zeros_(const Tensor& t);
void ones_(const Tensor& t);

struct KaimingOptions {
  double a = 0;  // negative slope of the leaky relu that follows (sqrt(5) for torch's Linear/Conv default)
  FanMode mode = FanMode::FanIn;
  Nonlinearity nonlinearity = Nonlinearity::LeakyRelu;
  Generator* generator = nullptr;
};
// U(-b, b) with b = gain * sqrt(3 / fan).
void kaiming_uniform_(const Tensor& t, KaimingOptions o = {});
void kaiming_normal_(const Tensor& t, KaimingOptions o = {});
void xavier_uniform_(const Tensor& t, double gain = 1.0, Generator* gen = nullptr);

}  // namespace hg::nn::init
