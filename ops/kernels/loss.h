#pragma once
// The kernel contract of ops/loss.h: argument structs and dispatch tables (docs/ARCHITECTURE.md,
// "Dispatch and registration"). Implemented by cpu/loss.cpp, cuda/kernels/loss.cu.
#include "core/dispatch_table.h"
#include "ops/loss.h"

namespace hg {

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
HG_KERNEL_TABLE(CrossEntropyKernel, cross_entropy_kernels, "cross_entropy");
HG_KERNEL_TABLE(CrossEntropyKernel, cross_entropy_backward_kernels, "cross_entropy backward");

}  // namespace hg
