#pragma once
// Adam and AdamW: torch.optim.Adam / torch.optim.AdamW (1.13, the non-fused formulas), e.g.
//   hg::optim::AdamW opt(model.parameters(), {.lr = 3e-4, .weight_decay = 0.1});
// Adam adds weight_decay * p to the gradient (L2); AdamW first multiplies p by 1 - lr * weight_decay
// (decoupled decay). step_size = lr / (1 - beta1^t), denom = sqrt(v) / sqrt(1 - beta2^t) + eps.
#include <array>
#include <concepts>
#include <tuple>
#include <type_traits>

#include "core/chained_options.h"
#include "optim/optimizer.h"

namespace hg::optim {

struct AdamArgs {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;  // L2, added to the gradient
  bool amsgrad = false;
};

struct AdamWArgs {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;  // decoupled: p *= 1 - lr * weight_decay
  bool amsgrad = false;
};

// libtorch's chained spellings: optim::Adam(params, optim::AdamOptions(1e-3).betas({0.9, 0.98}).weight_decay(1e-4)).
template <class Self, class Args>
class AdamOptionsOf : public ChainedOptions<Args> {
 public:
  explicit AdamOptionsOf(double lr = 1e-3) { this->args_.lr = lr; }
  HG_OPTION(Self, double, lr)
  HG_OPTION(Self, double, eps)
  HG_OPTION(Self, double, weight_decay)
  HG_OPTION(Self, bool, amsgrad)
  // a tuple, as libtorch's: .betas({0.9, 0.98}) or .betas(std::make_tuple(0.9, 0.98))
  Self& betas(std::tuple<double, double> b) {
    this->args_.betas = {std::get<0>(b), std::get<1>(b)};
    return static_cast<Self&>(*this);
  }
  std::tuple<double, double> betas() const { return {this->args_.betas[0], this->args_.betas[1]}; }
};
class AdamOptions : public AdamOptionsOf<AdamOptions, AdamArgs> {
 public:
  using AdamOptionsOf::AdamOptionsOf;
};
class AdamWOptions : public AdamOptionsOf<AdamWOptions, AdamWArgs> {
 public:
  using AdamOptionsOf::AdamOptionsOf;
};

template <class O>
concept AdamArgsType = std::same_as<std::remove_const_t<O>, AdamArgs> ||
                          std::same_as<std::remove_const_t<O>, AdamWArgs>;

template <AdamArgsType O, class F>
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
  static constexpr bool kDecoupled = std::is_same_v<Options, AdamWArgs>;
  static constexpr const char* kName = kDecoupled ? "AdamW" : "Adam";
  static constexpr bool kCountsSteps = true;
  static void check_options(const Options& o);
  static Optimizer::StateNames state_names(const Options& o);
  static std::array<double, 7> hyper(const Options& o);  // ops/kernels/optim_rules.h's AdamHyperIndex order
};

extern template class AdamBase<AdamArgs>;
extern template class AdamBase<AdamWArgs>;

}  // namespace detail

class Adam final : public detail::AdamBase<AdamArgs> {
 public:
  using AdamBase::AdamBase;
};

class AdamW final : public detail::AdamBase<AdamWArgs> {
 public:
  using AdamBase::AdamBase;
};

}  // namespace hg::optim
