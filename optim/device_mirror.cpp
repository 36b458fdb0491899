// The optimizer's device-resident step counters and hyper-parameters.
#include "optim/device_mirror.h"

#include <algorithm>

#include "ops/kernels/optim.h"

namespace hg::optim {

void DeviceMirror::upload_hyper(size_t g, std::span<const double> hyper) {
  if (g >= hyper_.size() || !hyper_[g].value.defined()) return;
  DeviceHyper& d = hyper_[g];
  if (std::equal(hyper.begin(), hyper.end(), d.host.begin(), d.host.end())) return;
  HG_CHECK(static_cast<int64_t>(hyper.size()) == d.value.numel(), "Optimizer: group ", g, " has ", hyper.size(),
           " hyper-parameters, its device copy ", d.value.numel());
  copy_bytes(d.value.data_ptr(), d.value.device(), hyper.data(), Device::cpu(), hyper.size_bytes());
  d.host.assign(hyper.begin(), hyper.end());
}

DeviceStep DeviceMirror::device_step(size_t i, size_t g, const Tensor& p, const float* found_inf,
                                     const GradUnscale& unscale, int64_t steps_so_far, bool counts,
                                     std::span<const double> hyper) {
  DeviceStep a{.found_inf = found_inf, .inv_scale = unscale.inv_scale, .clip = unscale.clip};
  const bool cuda = p.device().is_cuda();
  if (cuda) {
    if (hyper_.size() <= g) hyper_.resize(g + 1);
    DeviceHyper& d = hyper_[g];
    if (!d.value.defined()) {
      d.value = empty({static_cast<int64_t>(hyper.size())}, {.dtype = DType::F64, .device = p.device()});
      d.host.clear();  // differs from any values: uploaded below
    }
    if (d.value.device() == p.device()) {  // (a group spread over devices keeps its values by value)
      upload_hyper(g, hyper);  // a no-op unless an option changed since the last step or set_lr
      a.hyper = static_cast<const double*>(d.value.data_ptr());
    }
  }
  Tensor& steps = steps_[i];
  if (counts && (found_inf != nullptr || cuda) && !steps.defined()) {
    // made once, at a parameter's first step on the device path (a host-to-device copy)
    steps = empty({1}, {.dtype = DType::I64, .device = p.device()});
    copy_bytes(steps.data_ptr(), p.device(), &steps_so_far, Device::cpu(), sizeof steps_so_far);
  }
  if (steps.defined()) a.steps = static_cast<int64_t*>(steps.data_ptr());
  return a;
}

int64_t DeviceMirror::steps_taken(size_t i, int64_t host) const {
  const Tensor& s = steps_[i];
  if (!s.defined()) return host;
  int64_t v = 0;
  copy_bytes(&v, Device::cpu(), s.data_ptr(), s.device(), sizeof v);
  return v;
}

void DeviceMirror::drop_steps() {
  for (Tensor& s : steps_) s = Tensor();
}

}  // namespace hg::optim
