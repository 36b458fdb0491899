#include "optim/adam.h"

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
std::array<double, kAdamHyperCount> AdamBase<Options>::hyper(const Options& o) {
  std::array<double, kAdamHyperCount> h{};
  h[kAdamLr] = o.lr;
  h[kAdamBeta1] = o.betas[0];
  h[kAdamBeta2] = o.betas[1];
  h[kAdamEps] = o.eps;
  h[kAdamWeightDecay] = o.weight_decay;
  h[kAdamDecoupled] = kDecoupled ? 1.0 : 0.0;
  h[kAdamAmsgrad] = o.amsgrad ? 1.0 : 0.0;
  return h;
}

template <class Options>
void AdamBase<Options>::step(const AmpStep& amp) {
  this->template run_updates<AdamRule>(amp);
}

template class AdamBase<AdamArgs>;
template class AdamBase<AdamWArgs>;

}  // namespace hg::optim::detail
