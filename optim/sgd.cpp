#include "optim/sgd.h"

#include "optim/update.h"

namespace hg::optim {

void SGD::check_options(const SGDArgs& o) {
  HG_CHECK(o.lr != kRequired, "SGD: lr is required; pass it, e.g. SGD(params, {.lr = 0.01})");
  HG_CHECK(o.lr >= 0, "SGD: lr=", o.lr, "; a learning rate must be >= 0");
  HG_CHECK(o.momentum >= 0, "SGD: momentum=", o.momentum, "; it must be >= 0");
  HG_CHECK(o.weight_decay >= 0, "SGD: weight_decay=", o.weight_decay, "; it must be >= 0");
  HG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0 and dampening == 0 (got momentum=",
           o.momentum, ", dampening=", o.dampening, "); set them or drop nesterov");
}

Optimizer::StateNames SGD::state_names(const SGDArgs& o) {
  static constexpr const char* kNames[] = {"momentum_buffer"};
  return StateNames(kNames).first(o.momentum != 0 ? 1 : 0);
}

std::array<double, kSgdHyperCount> SGD::hyper(const SGDArgs& o) {
  std::array<double, kSgdHyperCount> h{};
  h[kSgdLr] = o.lr;
  h[kSgdMomentum] = o.momentum;
  h[kSgdDampening] = o.dampening;
  h[kSgdWeightDecay] = o.weight_decay;
  h[kSgdNesterov] = o.nesterov ? 1.0 : 0.0;
  return h;
}

void SGD::step(const AmpStep& amp) { run_updates<SgdRule>(amp); }

}  // namespace hg::optim
