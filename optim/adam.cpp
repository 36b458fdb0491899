#include "optim/adam.h"

#include "ops/kernels/optim.h"
#include "optim/update.h"

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
  static constexpr const char* kNames[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return Optimizer::StateNames(kNames).first(o.amsgrad ? 3 : 2);
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
  this->for_each_update(amp, [](const Options& o, const UpdateContext& u) {
    const AdamHyper h{.lr = o.lr, .beta1 = o.betas[0], .beta2 = o.betas[1], .eps = o.eps,
                      .weight_decay = o.weight_decay, .decoupled = kDecoupled, .amsgrad = o.amsgrad};
    AdamArgs args{.n = u.param.numel(),
                  .param = u.param.data_ptr(),
                  .grad = u.grad.data_ptr(),
                  .exp_avg = u.buffer(0),
                  .exp_avg_sq = u.buffer(1),
                  .max_exp_avg_sq = u.buffer(2),  // amsgrad only
                  .master = u.master,
                  .store = u.store,
                  // with a device counter the kernel derives them itself; then only amsgrad and unscale are read
                  .s = adam_scalars(h, u.amp.steps == nullptr ? u.step : 1),
                  .h = h,
                  .amp = u.amp};
    args.s.unscale = u.unscale.host;
    adam_kernels().get(u.param.device(), u.param.dtype())(args);
  });
}

template class AdamBase<AdamOptions>;
template class AdamBase<AdamWOptions>;

}  // namespace hg::optim::detail
