#pragma once
// gradcheck: compares autograd's gradients with central differences, in F64.
// The output y = f(inputs) is projected on a fixed random direction r (backward with seed r), so
// any output shape works: analytic d<r,y>/dx from backward, numeric from (y(x+eps)-y(x-eps))/2eps.
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hg {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_error = 0;
  std::string message;  // which input and element disagreed, with both values
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Inputs must be F64 CPU tensors; those with requires_grad are checked.
GradcheckResult gradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

// torch.autograd.gradgradcheck: checks second derivatives. The first-order gradients g of <r, f(inputs)> (r a fixed
// random direction) with respect to the inputs that require grad, computed with autograd::grad(create_graph), are
// projected on fixed random directions v, and F = <g, v> is gradchecked: its backward (double backward, a
// Hessian-vector product) against central differences of F. First, at the inputs, the gradients create_graph
// computes (the backwards written in recorded ops) must equal the plain backward's (which may run fused kernels).
GradcheckResult gradgradcheck(const GradcheckFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opts = {});

}  // namespace hg
