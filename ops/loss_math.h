#pragma once
// The math of the loss-family kernels, written once as HG_HD functions for the CPU loops
// (cpu/loss.cpp) and the CUDA kernels (cuda/kernels/loss.cu): the cross-entropy / NLL row and
// its gradient. C is the compute type (float, double for F64).
#include <stdint.h>

#include "core/macros.h"
#include "core/rng.h"
#include "ops/functors.h"

namespace hg::lossfn {

// ---- cross-entropy / NLL -------------------------------------------------------------------------

enum class TargetKind : uint8_t { Valid, Ignored, OutOfRange };

// torch checks ignore_index first: an ignore_index outside [0, C) (the default -100) is still ignored.
HG_HD TargetKind classify_target(int64_t t, int64_t ignore_index, int64_t classes) {
  if (t == ignore_index) return TargetKind::Ignored;
  return t >= 0 && t < classes ? TargetKind::Valid : TargetKind::OutOfRange;
}

// The running maximum of a row; NaN never wins here (a NaN makes the exp-sum, so the row, NaN).
template <class C> HG_HD C max_step(C m, C v) { return v > m ? v : m; }

// The row's log-sum-exp from its maximum m and shifted exp-sum s = sum_k exp(x_k - m) (saved for backward).
template <class C> HG_HD C log_sum_exp(C m, C s) { return m + fn::m_log(s); }

// Cross-entropy with label smoothing eps (torch.nn.functional.cross_entropy), from the shifted
// quantities s = sum_k exp(x_k - m), x_t - m and d = sum_k (x_k - m) so that large logits do not cancel
// (m + log s - x_t in F32 loses log s's digits when m is 1e4):
//   (1-eps) (lse - x_t) + eps/C sum_k (lse - x_k) = log s - (1-eps) (x_t - m) - eps/C d.
// With eps == 0 the sum is skipped: a -inf logit of another class must not give 0 * -inf = NaN.
template <class C> HG_HD C ce_row_loss(C s, C xt_shifted, C d, C eps, C classes) {
  const C ls = fn::m_log(s);
  return eps == C(0) ? ls - xt_shifted : ls - (C(1) - eps) * xt_shifted - eps / classes * d;
}

// softmax_k = exp(x_k - lse), rebuilt in backward from the logits and the saved log-sum-exp.
template <class C> HG_HD C softmax_prob(C x_k, C lse) { return fn::m_exp(x_k - lse); }

// d loss / d x_k = g (softmax_k - q_k), q = (1-eps) one_hot(t) + eps/C: the smoothed target.
template <class C> HG_HD C ce_grad(C p_k, bool is_target, C eps, C classes, C g) {
  const C q = (is_target ? C(1) - eps : C(0)) + eps / classes;
  return g * (p_k - q);
}

// NLL on log-probabilities: loss = -x_t, d loss / d x_k = -g [k == t].
template <class C> HG_HD C nll_grad(bool is_target, C g) { return is_target ? -g : C(0); }

}  // namespace hg::lossfn
