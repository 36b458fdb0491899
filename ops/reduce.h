#pragma once
// Reductions and softmax. F16/BF16 inputs accumulate in F32 (F64 in F64); results keep the input
// dtype like PyTorch. dims may be negative; an empty dims list reduces over every dimension.
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hg {


Tensor sum(const Tensor& x);  // all elements -> 0-d tensor
Tensor sum(const Tensor& x, std::vector<int64_t> dims, ReduceOptions o = {});
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, std::vector<int64_t> dims, ReduceOptions o = {});

struct ValuesIndices {
  Tensor values;
  Tensor indices;  // I64, position along dim of the first maximum/minimum
};
ValuesIndices max(const Tensor& x, int64_t dim, ReduceOptions o = {});
ValuesIndices min(const Tensor& x, int64_t dim, ReduceOptions o = {});
Tensor max(const Tensor& x);  // all elements -> 0-d
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, ReduceOptions o = {});  // I64, not differentiable
Tensor argmax(const Tensor& x);                                     // index into the flattened tensor
Tensor argmin(const Tensor& x, int64_t dim, ReduceOptions o = {});  // I64; the first minimum (a NaN wins, as torch)
Tensor argmin(const Tensor& x);
// The 2-norm of every element, sqrt(sum x^2) (torch.linalg.vector_norm / Tensor.norm()): summed in F32 for
// F16/BF16 (F64 for F64), returned in x's dtype; its gradient x / norm, 0 where the norm is 0 (torch's).
Tensor norm(const Tensor& x);

struct VarOptions {
  int64_t correction = 1;  // 1: unbiased (torch default), 0: population variance
  bool keepdim = false;
};
// One signature (empty dims = every element), so var(x, {1}) and var(x, {}, {.correction = 0}) are
// never ambiguous.
Tensor var(const Tensor& x, std::vector<int64_t> dims = {}, VarOptions o = {});

// Sums the dims that broadcasting added or expanded from 1, so the result has `shape` (backward of
// broadcasting ops).
Tensor sum_to(const Tensor& x, const Shape& shape);

// Numerically stable (max subtracted), computed in F32 for F16/BF16.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

}  // namespace hg
