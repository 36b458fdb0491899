#pragma once
// Ops of order along a dim, composed of existing ops (docs/ARCHITECTURE.md, "An op composed of others"):
// cumsum (a GEMM with a triangle of ones), cumprod (a scan by doubling), sort/argsort/topk (the order found on the host, the values gathered,
// so they are differentiable in x). On a GPU, sort, argsort and topk read x back: a wait.
#include <cstdint>
#include <tuple>

#include "core/tensor.h"

namespace hg {

// y[..., j, ...] = x[..., 0, ...] + ... + x[..., j, ...] along dim (torch.cumsum), in x's dtype (I64: exact to
// 2^53). Differentiable. Costs an (n, n) matrix for a dim of size n: an hg::Error past n = 8192.
Tensor cumsum(const Tensor& x, int64_t dim);
// y[..., j, ...] = x[..., 0, ...] * ... * x[..., j, ...] along dim (torch.cumprod), in x's dtype (I64: exact to
// 2^53). A scan by doubling: ceil(log2 n) elementwise products, so the products' order (and rounding) differs
// from a sequential loop's. Differentiable, zeros included.
Tensor cumprod(const Tensor& x, int64_t dim);
// (values, indices) sorted along dim, ascending unless descending; stable (equal values keep their order), NaN
// after every number ascending and before them descending, as torch.sort(stable=True).
std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false);
// the k largest (or smallest) along dim with their indices, in sorted order (torch.topk)
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);

}  // namespace hg
