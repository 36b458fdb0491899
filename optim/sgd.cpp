#include "optim/sgd.h"

#include "ops/kernels/optim.h"
#include "optim/update.h"

namespace hg::optim {

void SGD::check_options(const SGDOptions& o) {
  HG_CHECK(o.lr != kRequired, "SGD: lr is required; pass it, e.g. SGD(params, {.lr = 0.01})");
  HG_CHECK(o.lr >= 0, "SGD: lr=", o.lr, "; a learning rate must be >= 0");
  HG_CHECK(o.momentum >= 0, "SGD: momentum=", o.momentum, "; it must be >= 0");
  HG_CHECK(o.weight_decay >= 0, "SGD: weight_decay=", o.weight_decay, "; it must be >= 0");
  HG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0), "SGD: nesterov needs momentum > 0 and dampening == 0 (got momentum=",
           o.momentum, ", dampening=", o.dampening, "); set them or drop nesterov");
}

Optimizer::StateNames SGD::state_names(const SGDOptions& o) {
  static constexpr const char* kNames[] = {"momentum_buffer"};
  return StateNames(kNames).first(o.momentum != 0 ? 1 : 0);
}

std::array<double, 4> SGD::device_hyper(const SGDOptions& o) {
  static_assert(kSgdHyperCount == 4);
  std::array<double, 4> h{};
  h[kSgdLr] = o.lr;
  h[kSgdMomentum] = o.momentum;
  h[kSgdDampening] = o.dampening;
  h[kSgdWeightDecay] = o.weight_decay;
  return h;
}

void SGD::step(const AmpStep& amp) {
  for_each_update(amp, [](const SGDOptions& o, const UpdateContext& u) {
    const SgdArgs args{.n = u.param.numel(),
                       .param = u.param.data_ptr(),
                       .grad = u.grad.data_ptr(),
                       .momentum_buffer = u.buffer(0),
                       .master = u.master,
                       .store = u.store,
                       .s = {.lr = o.lr,
                             .momentum = o.momentum,
                             .dampening = o.dampening,
                             .weight_decay = o.weight_decay,
                             .nesterov = o.nesterov,
                             .first_step = u.first_step,
                             .unscale = u.unscale.host},
                       .amp = u.amp};
    sgd_kernels().get(u.param.device(), u.param.dtype())(args);
  });
}

}  // namespace hg::optim
