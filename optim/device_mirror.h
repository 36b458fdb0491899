#pragma once
// What an Optimizer keeps in device memory so that a step reads it when it runs, not when the host called
// it (a step captured in a CUDA graph, the grad scaler's device path: docs/ARCHITECTURE.md, "The loss
// scale, from scale() to the update"): each parameter's step counter, advanced by the kernels only by a
// step not skipped, and each group's hyper-parameters, uploaded when the host's values change.
// Indexed by the optimizer's parameter index <i> and group index <g>.
#include <cstdint>
#include <span>
#include <vector>

#include "autograd/grad_unscale.h"
#include "core/tensor.h"

namespace hg::optim {

struct DeviceStep;  // ops/kernels/optim.h

class DeviceMirror {
 public:
  // The optimizer's new group: n more parameters, without counters.
  void add_params(size_t n) { steps_.resize(steps_.size() + n); }

  // What parameter i's update reads from device memory (ops/kernels/optim.h's DeviceStep): amp's found_inf and
  // the device parts of `unscale` (its GradUnscale), and the step counter, made on p's device from
  // steps_so_far at the first step with a found_inf flag when `counts` (updates with state).
  // On a CUDA device the counter is always made, and `hyper` (group g's hyper-parameters in the order
  // of its rule's *HyperIndex, ops/kernels/optim_rules.h) is read from device memory, so that a step
  // captured in a CUDA graph counts and follows set_lr (and any option changed by an eager step) when
  // it is replayed.
  DeviceStep device_step(size_t i, size_t g, const Tensor& p, const float* found_inf, const GradUnscale& unscale,
                         int64_t steps_so_far, bool counts, std::span<const double> hyper);
  // Group g's hyper-parameters in device memory (made at its first step on a CUDA device) follow the
  // host's values: an upload (which does not wait for the device) when one changed.
  void upload_hyper(size_t g, std::span<const double> hyper);

  // Parameter i's device counter (I64, one element), undefined until the device path made one.
  const Tensor& steps(size_t i) const { return steps_[i]; }
  // The steps parameter i took: its device counter when it has one (a sync), else `host`.
  int64_t steps_taken(size_t i, int64_t host) const;
  // load_state_dict: the loaded host counts replace the counters (new ones start from them).
  void drop_steps();

 private:
  struct DeviceHyper {
    Tensor value;              // F64 on the group's CUDA device
    std::vector<double> host;  // what it holds
  };
  std::vector<DeviceHyper> hyper_;  // by group
  std::vector<Tensor> steps_;       // by parameter
};

}  // namespace hg::optim
