#include "nn/sequential.h"

#include <typeinfo>

#include "nn/activation.h"
#include "nn/layers.h"
#include "ops/matmul.h"

namespace hg::nn {
namespace {

// The Linear of a Linear + ReLU pair that runs as one op (linear with Activation::Relu): where x's device
// fuses them into the GEMM's epilogue (ops/matmul.h), both exactly nn::Linear and nn::ReLU (a subclass may
// forward differently) and neither with forward hooks (each would see the other's output). nullptr otherwise.
Linear* fusable_linear(Module& a, Module& b, const Tensor& x) {
  if (typeid(a) != typeid(Linear) || typeid(b) != typeid(ReLU)) return nullptr;
  if (a.num_forward_hooks() != 0 || b.num_forward_hooks() != 0 || !linear_fuses_activation(x.device())) return nullptr;
  return static_cast<Linear*>(&a);
}

}  // namespace

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  const auto& children = named_children();
  for (size_t k = 0; k < children.size(); ++k) {
    Module& m = *children[k].second;
    if (k + 1 < children.size()) {
      if (Linear* lin = fusable_linear(m, *children[k + 1].second, y)) {
        y = lin->call_fused(y, [lin](const Tensor& in) { return linear(in, lin->weight, lin->bias, Activation::Relu); });
        ++k;  // the ReLU ran inside
        continue;
      }
    }
    y = m(y);  // through operator(): forward hooks fire
  }
  return y;
}

std::shared_ptr<Module> Sequential::operator[](int64_t i) const {
  const int64_t n = size();
  HG_CHECK(i >= -n && i < n, "Sequential: index ", i, " is out of range for ", n, " modules");
  return named_children()[static_cast<size_t>(i < 0 ? i + n : i)].second;
}

}  // namespace hg::nn
