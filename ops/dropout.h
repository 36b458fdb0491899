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

// ---- kernel interface (ops/cpu/loss.cpp, cuda/kernels/loss.cu) -----------------------------------
template <class Fn> class DispatchTable;  // ops/dispatch.h

// y[i] = x[i] * (keep(i) ? scale : 0) for i < n, keep(i) from Philox (seed, offset) as ops/loss_math.h
// says. The backward is the same kernel on dy (it regenerates the mask, so none is stored).
struct DropoutArgs {
  int64_t n = 0;
  uint64_t seed = 0, offset = 0;
  uint32_t threshold = 0;  // ceil(p * 2^24)
  double scale = 1.0;      // 1 / (1 - p)
  const void* x = nullptr;
  void* y = nullptr;
};
using DropoutKernel = void (*)(const DropoutArgs& a);
DispatchTable<DropoutKernel>& dropout_kernels();
namespace cpu {
void register_dropout(DispatchTable<DropoutKernel>& t);
}

}  // namespace hg
