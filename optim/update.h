#pragma once
// An optimizer's step: its rule's update kernel (ops/kernels/optim_rules.h) called once per device and dtype
// for the parameters that have a gradient, with the arguments Optimizer::prepare_update makes (docs/ARCHITECTURE.md, "A new
// optimizer"). Included by the optimizers' .cpp files only: it holds the backend contract's types
// (ops/kernels/optim.h), which the user's headers must not reach.
#include "ops/kernels/optim.h"
#include "ops/kernels/optim_rules.h"
#include "optim/optimizer.h"

namespace hg::optim {

template <class Derived, class Options>
template <class Rule>
void OptimizerOf<Derived, Options>::run_updates(const AmpStep& amp) {
  thread_local BatchedCalls<UpdateArgs> calls;  // reused from step to step: a step allocates nothing after the first
  calls.clear();  size_t index = 0;  // the parameter's index <i>
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Options& o = groups_[g].options;
    const size_t num_buffers = Derived::state_names(o).size();
    const auto hyper = Derived::hyper(o);  // a std::array: nothing is allocated per step
    static_assert(hyper.size() == Rule::kHyper, "hyper() gives the rule's hyper-parameters, in its order");
    for (const Tensor& p : groups_[g].params) {
      const size_t i = index++;
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;  // skipped, as torch does
      calls.add(p.device(), p.dtype(),
                prepare_update(Derived::kName, i, g, p, grad, amp, num_buffers, Derived::kCountsSteps, hyper));
    }
  }
  calls.run(update_kernels<Rule>());  // one kernel call per (device, dtype): one launch on a GPU
}

}  // namespace hg::optim
