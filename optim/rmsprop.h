#pragma once
// RMSprop: torch.optim.RMSprop (1.13, the non-fused formulas), e.g.
//   hg::optim::RMSprop opt(model.parameters(), {.lr = 1e-3, .momentum = 0.9, .centered = true});
// square_avg = alpha * square_avg + (1 - alpha) * g^2; avg = sqrt(square_avg) + eps (centered: the
// variance square_avg - grad_avg^2 under the root, grad_avg the running mean of g); then p -= lr * g / avg,
// or with momentum buf = momentum * buf + g / avg and p -= lr * buf (ops/kernels/optim_rules.h).
#include <array>
#include <concepts>
#include <type_traits>

#include "core/chained_options.h"
#include "optim/optimizer.h"

namespace hg::optim {

struct RMSpropArgs {
  double lr = 1e-2;
  double alpha = 0.99;      // smoothing of the squared gradients' average
  double eps = 1e-8;
  double weight_decay = 0;  // L2, added to the gradient
  double momentum = 0;
  bool centered = false;    // divide by the estimated variance, not the raw second moment
};

// libtorch's chained spelling: optim::RMSprop(params, optim::RMSpropOptions(1e-3).alpha(0.9).centered(true)).
class RMSpropOptions : public ChainedOptions<RMSpropArgs> {
 public:
  explicit RMSpropOptions(double lr = 1e-2) { args_.lr = lr; }
  HG_OPTION(RMSpropOptions, double, lr)
  HG_OPTION(RMSpropOptions, double, alpha)
  HG_OPTION(RMSpropOptions, double, eps)
  HG_OPTION(RMSpropOptions, double, weight_decay)
  HG_OPTION(RMSpropOptions, double, momentum)
  HG_OPTION(RMSpropOptions, bool, centered)
};

template <class O, class F>
  requires std::same_as<std::remove_const_t<O>, RMSpropArgs>
void visit_options(O& o, F&& f) {
  f("lr", o.lr);
  f("alpha", o.alpha);
  f("eps", o.eps);
  f("weight_decay", o.weight_decay);
  f("momentum", o.momentum);
  f("centered", o.centered);
}

// State per parameter: step, square_avg, momentum_buffer (momentum > 0), grad_avg (centered).
class RMSprop final : public OptimizerOf<RMSprop, RMSpropArgs> {
 public:
  using OptimizerOf::OptimizerOf;
  using Optimizer::step;
  void step(const AmpStep& amp) override;

 private:
  friend class OptimizerOf<RMSprop, RMSpropArgs>;
  static constexpr const char* kName = "RMSprop";
  static constexpr bool kCountsSteps = true;  // torch keeps state['step'], though the update does not use it
  static void check_options(const RMSpropArgs& o);
  static StateNames state_names(const RMSpropArgs& o);
  static std::array<double, 6> hyper(const RMSpropArgs& o);  // ops/kernels/optim_rules.h's RmspropHyperIndex order
};

}  // namespace hg::optim
