#pragma once
// Losses with PyTorch's definitions (torch.nn.functional) and reductions. Every loss computes in
// F32 (F64 for F64) and returns F32 for F16/BF16 input (autocast lists every loss as Fp32).
#include <cstdint>

#include "core/tensor.h"

namespace hg {

enum class Reduction : uint8_t { Mean, Sum, None };

struct CrossEntropyOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  // torch's `weight`: a floating (C) tensor on the logits' device, each class's loss times its weight. With class
  // indices the mean divides by the sum of the non-ignored targets' weights (label smoothing's term too, as
  // torch); with probability targets each class's term is weighted and the mean divides by the batch size.
  // Undefined: every class weighs 1 (the fused kernel; with a weight the loss is composed of log_softmax,
  // gather and sums).
  Tensor weight{};
};
// logits (N,C) or (N,C,d1,...) or (C); target I64 class indices (N) or (N,d1,...) or (). Fused
// log-softmax + NLL: keeps one F32 log-sum-exp per row for backward, never the probabilities.
// Mean divides by the number of non-ignored targets, like torch. A floating target of the logits' shape holds
// class probabilities instead (torch's second form; label_smoothing applies, ignore_index does not).
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions o = {});

struct NllLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  Tensor weight{};  // torch's: per class (C); the mean divides by the sum of the non-ignored targets' weights
};
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, NllLossOptions o = {});

struct LossOptions {
  Reduction reduction = Reduction::Mean;
};
Tensor mse_loss(const Tensor& input, const Tensor& target, LossOptions o = {});
Tensor l1_loss(const Tensor& input, const Tensor& target, LossOptions o = {});

struct BceWithLogitsOptions {
  Reduction reduction = Reduction::Mean;
  Tensor pos_weight{};  // undefined, or broadcastable to the input (weight of positive examples)
};
// Numerically stable: max(x,0) - x*t + log1p(exp(-|x|)) (with pos_weight as torch defines it).
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, BceWithLogitsOptions o = {});

}  // namespace hg
