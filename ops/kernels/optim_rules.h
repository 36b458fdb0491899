#pragma once
// The optimizers' update rules: per element, written once as HG_HD code (docs/ARCHITECTURE.md, Principles 3)
// and run by each backend's one update driver (cpu/optim.cpp, cuda/kernels/optim.cu) for every rule in
// UpdateRules at the end. The protocol a rule follows is in ops/kernels/optim.h.
//
// The formulas are torch 1.13's non-fused single-tensor ones (torch/optim/sgd.py, adam.py, adamw.py,
// rmsprop.py) in their operation order. Every scalar (1 - beta1, lr / bias_correction1, ...) is derived
// in double, as torch does with Python floats, and rounded once to the compute type C; each operation
// then rounds in C. ATen's addcmul and addcdiv compute self + (value * t1) * t2 and self + (value * t1) / t2,
// and the rules keep that order.
#include <math.h>

#include <cstdint>

#include "ops/functors.h"
#include "ops/kernels/optim.h"

namespace hg::optim {

// ---- SGD (torch.optim.SGD) --------------------------------------------------------------------

// The order of SGD's hyper-parameters (optim/sgd.cpp's hyper()).
enum SgdHyperIndex { kSgdLr, kSgdMomentum, kSgdDampening, kSgdWeightDecay, kSgdNesterov, kSgdHyperCount };

// buf[0]: the momentum buffer, with momentum != 0. The first step sets it to the gradient, undamped.
struct SgdRule {
  static constexpr const char* kName = "SGD.step";
  static constexpr int kBuffers = 1, kHyper = kSgdHyperCount;
  // no momentum; first step; first step with nesterov; momentum; nesterov
  static constexpr int kVariants = 5;
  static int buffers_for(const double* h) { return h[kSgdMomentum] != 0 ? 1 : 0; }

  template <class C>
  struct Update {
    C neg_lr, momentum, keep, weight_decay, unscale;  // keep = 1 - dampening
    int form;

    HG_HD explicit Update(const StepInputs& in)
        : neg_lr(static_cast<C>(-in.hyper[kSgdLr])), momentum(static_cast<C>(in.hyper[kSgdMomentum])),
          keep(static_cast<C>(1.0 - in.hyper[kSgdDampening])), weight_decay(static_cast<C>(in.hyper[kSgdWeightDecay])),
          unscale(static_cast<C>(in.unscale)) {
      const bool nesterov = in.hyper[kSgdNesterov] != 0;
      // momentum needs its buffer: a parameter whose state was made without one keeps none
      if (in.num_buffers < 1 || in.hyper[kSgdMomentum] == 0) form = 0;
      else if (in.first_step) form = nesterov ? 2 : 1;
      else form = nesterov ? 4 : 3;
    }
    HG_HD int variant() const { return form; }

    template <int V>
    HG_HD void apply(C& p, C g, C* const* buf, int64_t i) const {
      constexpr bool kMomentum = V != 0, kFirst = V == 1 || V == 2, kNesterov = V == 2 || V == 4;
      if (unscale != C(1)) g = g * unscale;  // torch's unscale: val * inv_scale, in the compute type
      if (weight_decay != C(0)) g = g + weight_decay * p;  // torch skips it at 0 (0 * inf would be NaN)
      if constexpr (kMomentum) {
        const C b = kFirst ? g : buf[0][i] * momentum + keep * g;
        buf[0][i] = b;
        g = kNesterov ? g + momentum * b : b;
      }
      p = p + neg_lr * g;
    }
  };
};

template <>
HG_KERNEL_TABLE(UpdateKernel, update_kernels<SgdRule>, SgdRule::kName);

// ---- Adam / AdamW (torch.optim.Adam, torch.optim.AdamW) ------------------------------------------

// The order of Adam's and AdamW's hyper-parameters (optim/adam.cpp's hyper()). decoupled (AdamW):
// p *= 1 - lr * weight_decay; else (Adam) grad += weight_decay * p.
enum AdamHyperIndex {
  kAdamLr, kAdamBeta1, kAdamBeta2, kAdamEps, kAdamWeightDecay, kAdamDecoupled, kAdamAmsgrad, kAdamHyperCount
};

// buf: exp_avg, exp_avg_sq and, with amsgrad, max_exp_avg_sq. The bias corrections use the step's number.
struct AdamRule {
  static constexpr const char* kName = "Adam.step";
  static constexpr int kBuffers = 3, kHyper = kAdamHyperCount;
  static constexpr int kVariants = 2;  // without, with amsgrad
  static int buffers_for(const double* h) { return h[kAdamAmsgrad] != 0 ? 3 : 2; }

  template <class C>
  struct Update {
    C beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps, l2, decay, unscale;
    bool amsgrad;

    HG_HD explicit Update(const StepInputs& in) {
      const double* h = in.hyper;
      const double t = static_cast<double>(in.step);
      const double bias_correction1 = 1.0 - ::pow(h[kAdamBeta1], t);
      const double bias_correction2 = 1.0 - ::pow(h[kAdamBeta2], t);
      const bool decoupled = h[kAdamDecoupled] != 0;
      beta1 = static_cast<C>(h[kAdamBeta1]);
      one_minus_beta1 = static_cast<C>(1.0 - h[kAdamBeta1]);
      beta2 = static_cast<C>(h[kAdamBeta2]);
      one_minus_beta2 = static_cast<C>(1.0 - h[kAdamBeta2]);
      neg_step_size = static_cast<C>(-(h[kAdamLr] / bias_correction1));  // -lr / (1 - beta1^step)
      bc2_sqrt = static_cast<C>(::sqrt(bias_correction2));                // sqrt(1 - beta2^step)
      eps = static_cast<C>(h[kAdamEps]);
      l2 = static_cast<C>(decoupled ? 0.0 : h[kAdamWeightDecay]);
      decay = static_cast<C>(decoupled ? 1.0 - h[kAdamLr] * h[kAdamWeightDecay] : 1.0);
      unscale = static_cast<C>(in.unscale);
      amsgrad = in.num_buffers >= 3;
    }
    HG_HD int variant() const { return amsgrad ? 1 : 0; }

    template <int V>
    HG_HD void apply(C& p, C g, C* const* buf, int64_t i) const {
      if (unscale != C(1)) g = g * unscale;  // torch's unscale: val * inv_scale, in the compute type
      if (decay != C(1)) p = p * decay;      // torch: param.mul_(1 - lr * weight_decay)
      if (l2 != C(0)) g = g + l2 * p;        // torch: grad.add(param, alpha=weight_decay)
      const C m = buf[0][i] * beta1 + one_minus_beta1 * g;        // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
      const C v = buf[1][i] * beta2 + (one_minus_beta2 * g) * g;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
      buf[0][i] = m;
      buf[1][i] = v;
      C s = v;
      if constexpr (V == 1) {
        const C old = buf[2][i];
        s = (v > old || v != v) ? v : old;  // torch.maximum: NaN propagates
        buf[2][i] = s;
      }
      const C denom = fn::m_sqrt(s) / bc2_sqrt + eps;  // (sqrt(v) / bias_correction2_sqrt).add_(eps)
      p = p + (neg_step_size * m) / denom;            // param.addcdiv_(exp_avg, denom, value=-step_size)
    }
  };
};

template <>
HG_KERNEL_TABLE(UpdateKernel, update_kernels<AdamRule>, AdamRule::kName);

// ---- RMSprop (torch.optim.RMSprop) ----------------------------------------------------------------

// The order of RMSprop's hyper-parameters (optim/rmsprop.cpp's hyper()).
enum RmspropHyperIndex {
  kRmspropLr, kRmspropAlpha, kRmspropEps, kRmspropWeightDecay, kRmspropMomentum, kRmspropCentered, kRmspropHyperCount
};

// buf: square_avg, then momentum_buffer (with momentum > 0), then grad_avg (centered), torch's order.
struct RmspropRule {
  static constexpr const char* kName = "RMSprop.step";
  static constexpr int kBuffers = 3, kHyper = kRmspropHyperCount;
  static constexpr int kVariants = 4;  // bit 0: centered, bit 1: momentum
  static int buffers_for(const double* h) {
    return 1 + (h[kRmspropMomentum] > 0 ? 1 : 0) + (h[kRmspropCentered] != 0 ? 1 : 0);
  }

  template <class C>
  struct Update {
    C neg_lr, alpha, one_minus_alpha, eps, weight_decay, momentum, unscale;
    int form;

    HG_HD explicit Update(const StepInputs& in)
        : neg_lr(static_cast<C>(-in.hyper[kRmspropLr])), alpha(static_cast<C>(in.hyper[kRmspropAlpha])),
          one_minus_alpha(static_cast<C>(1.0 - in.hyper[kRmspropAlpha])), eps(static_cast<C>(in.hyper[kRmspropEps])),
          weight_decay(static_cast<C>(in.hyper[kRmspropWeightDecay])),
          momentum(static_cast<C>(in.hyper[kRmspropMomentum])), unscale(static_cast<C>(in.unscale)) {
      const bool centered = in.hyper[kRmspropCentered] != 0 && in.num_buffers >= 2;
      // the buffers decide the form (a buffer is read only if it is there)
      const bool with_momentum = in.num_buffers >= (centered ? 3 : 2);
      form = (centered ? 1 : 0) | (with_momentum ? 2 : 0);
    }
    HG_HD int variant() const { return form; }

    template <int V>
    HG_HD void apply(C& p, C g, C* const* buf, int64_t i) const {
      constexpr bool kCentered = (V & 1) != 0, kMomentum = (V & 2) != 0;
      if (unscale != C(1)) g = g * unscale;  // torch's unscale: val * inv_scale, in the compute type
      if (weight_decay != C(0)) g = g + weight_decay * p;  // grad.add(param, alpha=weight_decay)
      const C sq = buf[0][i] * alpha + (one_minus_alpha * g) * g;  // square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
      buf[0][i] = sq;
      C avg;
      if constexpr (kCentered) {
        constexpr int kGradAvg = kMomentum ? 2 : 1;
        const C ga = buf[kGradAvg][i] * alpha + one_minus_alpha * g;  // grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha)
        buf[kGradAvg][i] = ga;
        avg = fn::m_sqrt(sq + (C(-1) * ga) * ga);  // square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
      } else {
        avg = fn::m_sqrt(sq);
      }
      avg = avg + eps;
      if constexpr (kMomentum) {
        const C b = buf[1][i] * momentum + g / avg;  // buf.mul_(momentum).addcdiv_(grad, avg)
        buf[1][i] = b;
        p = p + neg_lr * b;  // param.add_(buf, alpha=-lr)
      } else {
        p = p + (neg_lr * g) / avg;  // param.addcdiv_(grad, avg, value=-lr)
      }
    }
  };
};

template <>
HG_KERNEL_TABLE(UpdateKernel, update_kernels<RmspropRule>, RmspropRule::kName);

// ---- the list every backend registers -------------------------------------------------------------

// A new rule adds its table line above and its name here.
template <class... Rules>
struct RuleList {};
using UpdateRules = RuleList<SgdRule, AdamRule, RmspropRule>;

}  // namespace hg::optim
