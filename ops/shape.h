#pragma once
// Shape ops. reshape/view share storage (tensors are always contiguous); transpose, permute, slice
// and cat copy through one strided-copy kernel per backend. All are differentiable.
#include <vector>

#include "core/tensor.h"

namespace hg {

Tensor reshape(const Tensor& x, Shape s);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor permute(const Tensor& x, std::vector<int64_t> dims);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor cat(const std::vector<Tensor>& xs, int64_t dim);
Tensor clone(const Tensor& x);
// Merges dims start_dim..end_dim into one (torch.flatten); shares storage like reshape.
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);

// Normalises a possibly negative dim for an ndim-d tensor, or throws naming op.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim);

}  // namespace hg
