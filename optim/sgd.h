#pragma once
// SGD with momentum, dampening, Nesterov momentum and L2 weight decay: torch.optim.SGD (1.13), e.g.
//   hg::optim::SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
// The momentum buffer is set to the first step's gradient (undamped), then
// buf = momentum * buf + (1 - dampening) * grad (ops/kernels/optim_rules.h).
#include <array>
#include <concepts>
#include <type_traits>

#include "core/chained_options.h"
#include "optim/optimizer.h"

namespace hg::optim {

struct SGDArgs {
  double lr = kRequired;  // no default: must be given (torch)
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0
};

// libtorch's chained spelling: optim::SGD(params, optim::SGDOptions(0.1).momentum(0.9).nesterov(true)).
class SGDOptions : public ChainedOptions<SGDArgs> {
 public:
  explicit SGDOptions(double lr) { args_.lr = lr; }
  HG_OPTION(SGDOptions, double, lr)
  HG_OPTION(SGDOptions, double, momentum)
  HG_OPTION(SGDOptions, double, dampening)
  HG_OPTION(SGDOptions, double, weight_decay)
  HG_OPTION(SGDOptions, bool, nesterov)
};

template <class O, class F>
  requires std::same_as<std::remove_const_t<O>, SGDArgs>
void visit_options(O& o, F&& f) {
  f("lr", o.lr);
  f("momentum", o.momentum);
  f("dampening", o.dampening);
  f("weight_decay", o.weight_decay);
  f("nesterov", o.nesterov);
}

// State per parameter (with momentum): momentum_buffer.
class SGD final : public OptimizerOf<SGD, SGDArgs> {
 public:
  using OptimizerOf::OptimizerOf;
  using Optimizer::step;
  void step(const AmpStep& amp) override;

 private:
  friend class OptimizerOf<SGD, SGDArgs>;
  static constexpr const char* kName = "SGD";
  static constexpr bool kCountsSteps = false;
  static void check_options(const SGDArgs& o);
  static StateNames state_names(const SGDArgs& o);
  static std::array<double, 5> hyper(const SGDArgs& o);  // ops/kernels/optim_rules.h's SgdHyperIndex order
};

}  // namespace hg::optim
