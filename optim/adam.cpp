#include "optim/adam.h"

#include "ops/kernels/optim.h"

namespace hg::optim::detail {

template <class Options>
void AdamBase<Options>::check_options(const Options& o) {
  HG_CHECK(o.lr >= 0, kName, ": lr=", o.lr, "; a learning rate must be >= 0");
  HG_CHECK(o.eps >= 0, kName, ": eps=", o.eps, "; it must be >= 0");
  for (int k = 0; k < 2; ++k)
    HG_CHECK(o.betas[k] >= 0 && o.betas[k] < 1, kName, ": betas[", k, "]=", o.betas[k], "; betas must be in [0, 1)");
  HG_CHECK(o.weight_decay >= 0, kName, ": weight_decay=", o.weight_decay, "; it must be >= 0");
}

template <class Options>
Optimizer::StateNames AdamBase<Options>::state_names(const Options& o) {
  if (o.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

template <class Options>
std::array<double, 5> AdamBase<Options>::device_hyper(const Options& o) {
  static_assert(kAdamHyperCount == 5);
  std::array<double, 5> h{};
  h[kAdamLr] = o.lr;
  h[kAdamBeta1] = o.betas[0];
  h[kAdamBeta2] = o.betas[1];
  h[kAdamEps] = o.eps;
  h[kAdamWeightDecay] = o.weight_decay;
  return h;
}

template <class Options>
void AdamBase<Options>::step(const AmpStep& amp) {
  size_t i = 0;  // the parameter's index <i>
  for (size_t gi = 0; gi < this->groups_.size(); ++gi) {
    const auto& group = this->groups_[gi];
    const Options& o = group.options;
    const AdamHyper h{.lr = o.lr, .beta1 = o.betas[0], .beta2 = o.betas[1], .eps = o.eps,
                      .weight_decay = o.weight_decay, .decoupled = kDecoupled, .amsgrad = o.amsgrad};
    const size_t num_buffers = o.amsgrad ? 3 : 2;
    const std::array<double, 5> hyper = device_hyper(o);  // (no allocation per step)
    for (const Tensor& p : group.params) {
      const size_t index = i++;
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      this->check_grad(kName, index, p, g);
      this->ensure_state(kName, index, p, num_buffers);
      typename Optimizer::ParamState& s = this->state_[index];
      const GradUnscale u = p.grad_unscale();
      const DeviceStep dev = this->device_step(index, gi, p, amp.found_inf, u, s.step, true, hyper);
      if (dev.steps == nullptr) s.step += 1;  // else the kernel counts the steps taken on the device
      AdamArgs args{.n = p.numel(),
                    .param = p.data_ptr(),
                    .grad = g.data_ptr(),
                    .exp_avg = s.buffers[0].data_ptr(),
                    .exp_avg_sq = s.buffers[1].data_ptr(),
                    .max_exp_avg_sq = o.amsgrad ? s.buffers[2].data_ptr() : nullptr,
                    .master = this->master_for(index, p),
                    .store = this->param_store(index, p),
                    // with a device counter the kernel derives them itself; then only amsgrad and unscale are read
                    .s = adam_scalars(h, dev.steps == nullptr ? s.step : 1),
                    .h = h,
                    .amp = dev};
      args.s.unscale = u.host;
      adam_kernels().get(p.device(), p.dtype())(args);
    }
  }
}

template class AdamBase<AdamOptions>;
template class AdamBase<AdamWOptions>;

}  // namespace hg::optim::detail
