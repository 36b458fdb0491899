#pragma once
// An optimizer's step: its rule's update kernel (ops/kernels/optim_rules.h) called once per device and dtype
// for the parameters that have a gradient, with the arguments Optimizer::prepare_update makes (docs/ARCHITECTURE.md, "A new
// optimizer"). Included by the optimizers' .cpp files only: it holds the backend contract's types
// (ops/kernels/optim.h), which the user's headers must not reach.
#include <vector>

#include "ops/kernels/optim.h"
#include "ops/kernels/optim_rules.h"
#include "optim/optimizer.h"

namespace hg::optim {

template <class Derived, class Options>
template <class Rule>
void OptimizerOf<Derived, Options>::run_updates(const AmpStep& amp) {
  struct Pending {
    Device device;
    DType dtype;
    UpdateArgs args;
  };
  // reused from step to step: a step allocates nothing after the first
  thread_local std::vector<Pending> pending;
  thread_local std::vector<UpdateArgs> batch;
  pending.clear();
  size_t index = 0;  // the parameter's index <i>
  for (size_t g = 0; g < groups_.size(); ++g) {
    const Options& o = groups_[g].options;
    const size_t num_buffers = Derived::state_names(o).size();
    const auto hyper = Derived::hyper(o);  // a std::array: nothing is allocated per step
    static_assert(hyper.size() == Rule::kHyper, "hyper() gives the rule's hyper-parameters, in its order");
    for (const Tensor& p : groups_[g].params) {
      const size_t i = index++;
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;  // skipped, as torch does
      pending.push_back({p.device(), p.dtype(),
                         prepare_update(Derived::kName, i, g, p, grad, amp, num_buffers, Derived::kCountsSteps, hyper)});
    }
  }
  // One kernel call per (device, dtype), its parameters in index order: one launch on a GPU.
  DispatchTable<UpdateKernel>& kernels = update_kernels<Rule>();
  for (size_t first = 0; first < pending.size(); ++first) {
    const Pending& lead = pending[first];
    if (lead.args.n < 0) continue;  // taken by an earlier batch
    batch.clear();
    for (size_t k = first; k < pending.size(); ++k) {
      if (pending[k].args.n < 0 || !(pending[k].device == lead.device) || pending[k].dtype != lead.dtype) continue;
      batch.push_back(pending[k].args);
      if (k != first) pending[k].args.n = -1;
    }
    kernels.get(lead.device, lead.dtype)(batch);
  }
}

}  // namespace hg::optim
