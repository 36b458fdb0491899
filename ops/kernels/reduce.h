#pragma once
// The kernel contract of the reductions and softmax (docs/ARCHITECTURE.md, "Dispatch and registration");
// implemented by cpu/reduce.cpp and cuda/kernels/reduce.cu.
#include <cstdint>

#include "core/dispatch_table.h"

namespace hg {

// Reduction over the middle dim of contiguous x viewed as (outer, r, inner) -> out (outer, inner).
// Accumulates in F32 (F64 for F64); the result is multiplied by `scale` before the one rounding
// (mean passes 1/r). Max/Min also write the first index of the extreme into `indices` when non-null,
// and propagate NaN like torch.max.
enum class ReduceOp : uint8_t { Sum, Max, Min };
struct ReduceArgs {
  ReduceOp op = ReduceOp::Sum;
  int64_t outer = 1, r = 1, inner = 1;
  double scale = 1.0;
  const void* x = nullptr;
  void* out = nullptr;
  int64_t* indices = nullptr;
};
using ReduceKernel = void (*)(const ReduceArgs& args);
// Softmax (or log-softmax) over the middle dim of (outer, r, inner), max-subtracted, F32 math.
struct SoftmaxArgs {
  bool log = false;
  int64_t outer = 1, r = 1, inner = 1;
  const void* x = nullptr;
  void* y = nullptr;
};
using SoftmaxKernel = void (*)(const SoftmaxArgs& args);
// dx from y = softmax(x) (or log_softmax) and dy, same layout.
struct SoftmaxBackwardArgs {
  bool log = false;
  int64_t outer = 1, r = 1, inner = 1;
  const void* y = nullptr;
  const void* dy = nullptr;
  void* dx = nullptr;
};
using SoftmaxBackwardKernel = void (*)(const SoftmaxBackwardArgs& args);

HG_KERNEL_TABLE(ReduceKernel, reduce_kernels, "reduce");
HG_KERNEL_TABLE(SoftmaxKernel, softmax_kernels, "softmax");
HG_KERNEL_TABLE(SoftmaxBackwardKernel, softmax_backward_kernels, "softmax backward");

}  // namespace hg
