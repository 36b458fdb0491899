#include "optim/sgd.h"

#include "ops/kernels/optim.h"

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
  if (o.momentum == 0) return {};
  return {"momentum_buffer"};
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
  size_t i = 0;  // the parameter's index <i>
  for (size_t gi = 0; gi < groups_.size(); ++gi) {
    const Group& group = groups_[gi];
    const SGDOptions& o = group.options;
    const size_t num_buffers = o.momentum != 0 ? 1 : 0;
    const std::array<double, 4> hyper = device_hyper(o);  // (no allocation per step)
    for (const Tensor& p : group.params) {
      const size_t index = i++;
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      check_grad(kName, index, p, g);
      const bool first = ensure_state(kName, index, p, num_buffers);
      const GradUnscale u = p.grad_unscale();
      const SgdArgs args{.n = p.numel(),
                         .param = p.data_ptr(),
                         .grad = g.data_ptr(),
                         .momentum_buffer = num_buffers ? state_[index].buffers[0].data_ptr() : nullptr,
                         .master = master_for(index, p),
                         .store = param_store(index, p),
                         .s = {.lr = o.lr,
                               .momentum = o.momentum,
                               .dampening = o.dampening,
                               .weight_decay = o.weight_decay,
                               .nesterov = o.nesterov,
                               .first_step = first,
                               .unscale = u.host},
                         .amp = device_step(index, gi, p, amp.found_inf, u, first ? 0 : 1, num_buffers != 0, hyper)};
      sgd_kernels().get(p.device(), p.dtype())(args);
    }
  }
}

}  // namespace hg::optim
