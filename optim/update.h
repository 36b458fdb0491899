#pragma once
// What an optimizer's step gets for each parameter that has a gradient: everything its update kernel's
// arguments need but its own options (docs/ARCHITECTURE.md, "A new optimizer"). Included by the optimizers'
// .cpp files only: it holds the backend contract's types (ops/kernels/optim.h), which the user's headers
// must not reach.
#include <span>

#include "ops/kernels/optim.h"
#include "optim/optimizer.h"

namespace hg::optim {

// One parameter's update, made by Optimizer::prepare_update; valid while the step's callback runs.
struct UpdateContext {
  size_t index = 0;  // the parameter's index <i>
  size_t group = 0;
  const Tensor& param;
  const Tensor& grad;             // matches param: dtype, numel, device (checked)
  std::span<const Tensor> state;  // the optimizer's buffers in its state_names order (zeros at the first step)
  float* master = nullptr;        // the F32 master of an F16/BF16 parameter, or null (optim/param_precision.h)
  ParamStore store = {};          // how the update is rounded into a low-precision parameter without a master
  GradUnscale unscale = {};       // the factor the gradient still carries: .host goes into the kernel's scalars
  DeviceStep amp = {};            // what the kernel reads from device memory (optim/device_mirror.h)
  bool first_step = false;        // the buffers were just made (SGD's momentum buffer starts as the gradient)
  int64_t step = 0;  // optimizers that count steps: the steps counted on the host, this one included

  // Buffer k's memory, or null when the options make no such buffer (SGD without momentum, Adam without amsgrad).
  void* buffer(size_t k) const { return k < state.size() ? state[k].data_ptr() : nullptr; }
};

template <class Derived, class Options>
template <class F>
void OptimizerOf<Derived, Options>::for_each_update(const AmpStep& amp, F&& update) {
  size_t index = 0;  // the parameter's index <i>
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Options& o = groups_[g].options;
    const size_t num_buffers = Derived::state_names(o).size();
    const auto hyper = Derived::device_hyper(o);  // a std::array: nothing is allocated per step
    for (const Tensor& p : groups_[g].params) {
      const size_t i = index++;
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;  // skipped, as torch does
      update(o, prepare_update(Derived::kName, i, g, p, grad, amp, num_buffers, Derived::kCountsSteps, hyper));
    }
  }
}

}  // namespace hg::optim
