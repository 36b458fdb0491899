#include "optim/rmsprop.h"

#include "optim/update.h"

namespace hg::optim {

void RMSprop::check_options(const RMSpropArgs& o) {
  HG_CHECK(o.lr >= 0, "RMSprop: lr=", o.lr, "; a learning rate must be >= 0");
  HG_CHECK(o.eps >= 0, "RMSprop: eps=", o.eps, "; it must be >= 0");
  HG_CHECK(o.momentum >= 0, "RMSprop: momentum=", o.momentum, "; it must be >= 0");
  HG_CHECK(o.weight_decay >= 0, "RMSprop: weight_decay=", o.weight_decay, "; it must be >= 0");
  HG_CHECK(o.alpha >= 0, "RMSprop: alpha=", o.alpha, "; it must be >= 0");
}

Optimizer::StateNames RMSprop::state_names(const RMSpropArgs& o) {
  // torch's order: the momentum buffer before grad_avg (the rule reads them in this order)
  static constexpr const char* kPlain[] = {"square_avg"};
  static constexpr const char* kMomentum[] = {"square_avg", "momentum_buffer"};
  static constexpr const char* kCentered[] = {"square_avg", "grad_avg"};
  static constexpr const char* kBoth[] = {"square_avg", "momentum_buffer", "grad_avg"};
  if (o.momentum > 0) return o.centered ? StateNames(kBoth) : StateNames(kMomentum);
  return o.centered ? StateNames(kCentered) : StateNames(kPlain);
}

std::array<double, kRmspropHyperCount> RMSprop::hyper(const RMSpropArgs& o) {
  std::array<double, kRmspropHyperCount> h{};
  h[kRmspropLr] = o.lr;
  h[kRmspropAlpha] = o.alpha;
  h[kRmspropEps] = o.eps;
  h[kRmspropWeightDecay] = o.weight_decay;
  h[kRmspropMomentum] = o.momentum;
  h[kRmspropCentered] = o.centered ? 1.0 : 0.0;
  return h;
}

void RMSprop::step(const AmpStep& amp) { run_updates<RmspropRule>(amp); }

}  // namespace hg::optim
