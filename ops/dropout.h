#pragma once
// Dropout with inverted scaling: in training each element is kept with probability 1-p and scaled
// by 1/(1-p); in eval (or p == 0) x is returned unchanged. The mask comes from the Philox generator
// (the default one unless given), so a seed fixes it on every backend.
#include "core/rng.h"
#include "core/tensor.h"

namespace hg {

struct DropoutFuncOptions {
  double p = 0.5;
  bool training = true;
  Generator* generator = nullptr;
};
Tensor dropout(const Tensor& x, DropoutFuncOptions o = {});

}  // namespace hg
