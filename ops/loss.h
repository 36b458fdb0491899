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
};
// logits (N,C) or (N,C,d1,...) or (C); target I64 class indices (N) or (N,d1,...) or (). Fused
// log-softmax + NLL: keeps one F32 log-sum-exp per row for backward, never the probabilities.
// Mean divides by the number of non-ignored targets, like torch.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, CrossEntropyOptions o = {});

struct NllLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
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

// ---- kernel interface (ops/cpu/loss.cpp, cuda/kernels/loss.cu) -----------------------------------
template <class Fn> class DispatchTable;  // ops/dispatch.h

// cross_entropy fuses log-softmax into the loss; nll_loss takes log-probabilities.
enum class ClassScores : uint8_t { Logits, LogProbs };

// x (dtype T) is viewed as (outer, classes, inner) with the class dim in the middle, so (N,C,d...) needs
// no permute: row r = o*inner + j holds x[(o*classes + k)*inner + j] for k < classes, and its target is
// target[r] (I64). Buffers marked C hold the compute type (float; double for F64).
//  forward:  writes stats (C, 2*rows+1): [0, rows) the row log-sum-exp (Logits), [rows, 2*rows) scratch
//            row losses (Mean/Sum), [2*rows] the number of non-ignored rows (Mean/Sum); and loss (C):
//            rows values (None) or one (Mean: sum / count, Sum: sum). An ignored row's loss is 0.
//  backward: reads x, target, stats and dy (C, like loss); writes dx (T, x's layout), 0 on ignored rows.
// A target outside [0, classes) that is not ignore_index throws on the CPU; a GPU cannot throw from a
// kernel without a host sync, so there that row's loss and gradient are NaN.
struct CrossEntropyArgs {
  ClassScores scores = ClassScores::Logits;
  Reduction reduction = Reduction::Mean;
  int64_t outer = 1, classes = 1, inner = 1;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  const void* x = nullptr;
  const int64_t* target = nullptr;
  void* stats = nullptr;
  void* loss = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
};
using CrossEntropyKernel = void (*)(const CrossEntropyArgs& a);
DispatchTable<CrossEntropyKernel>& cross_entropy_kernels();
DispatchTable<CrossEntropyKernel>& cross_entropy_backward_kernels();
namespace cpu {
void register_cross_entropy(DispatchTable<CrossEntropyKernel>& fwd, DispatchTable<CrossEntropyKernel>& bwd);
}

}  // namespace hg
