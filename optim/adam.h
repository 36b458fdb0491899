#pragma once
// Adam and AdamW: torch.optim.Adam / torch.optim.AdamW (1.13, the non-fused formulas), e.g.
//   hg::optim::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
// Adam adds weight_decay * p to the gradient (L2); AdamW first multiplies p by 1 - lr * weight_decay
// (decoupled decay). step_size = lr / (1 - beta1^t), denom = sqrt(v) / sqrt(1 - beta2^t) + eps.
#include <array>
#include <concepts>
#include <type_traits>

#include "optim/optimizer.h"

namespace hg::optim {

struct AdamOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;  // L2, added to the gradient
  bool amsgrad = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
  bool amsgrad = false;
};

template <class O>
concept AdamOptionsType = std::same_as<std::remove_const_t<O>, AdamOptions> ||
                          std::same_as<std::remove_const_t<O>, AdamWOptions>;

template <AdamOptionsType O, class F>
void visit_options(O& o, F&& f) {
  f("lr", o.lr);
  f("beta1", o.betas[0]);
  f("beta2", o.betas[1]);
  f("eps", o.eps);
  f("weight_decay", o.weight_decay);
  f("amsgrad", o.amsgrad);
}

namespace detail {

// State per parameter: step, exp_avg, exp_avg_sq (and max_exp_avg_sq with amsgrad).
template <class Options>
class AdamBase : public OptimizerOf<AdamBase<Options>, Options> {
  using Base = OptimizerOf<AdamBase<Options>, Options>;

 public:
  using Base::Base;
  using Optimizer::step;
  void step(const AmpStep& amp) override;

 private:
  friend Base;
  static constexpr bool kDecoupled = std::is_same_v<Options, AdamWOptions>;
  static constexpr const char* kName = kDecoupled ? "AdamW" : "Adam";
  static constexpr bool kCountsSteps = true;
  static void check_options(const Options& o);
  static Optimizer::StateNames state_names(const Options& o);
  static std::array<double, 7> hyper(const Options& o);  // ops/kernels/optim_rules.h's AdamHyperIndex order
};

extern template class AdamBase<AdamOptions>;
extern template class AdamBase<AdamWOptions>;

}  // namespace detail

class Adam final : public detail::AdamBase<AdamOptions> {
 public:
  using AdamBase::AdamBase;
};

class AdamW final : public detail::AdamBase<AdamWOptions> {
 public:
  using AdamBase::AdamBase;
};

}  // namespace hg::optim
