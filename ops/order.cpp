// cumsum, cumprod, sort, argsort and topk as compositions (ops/order.h).
#include "ops/order.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/shape.h"

namespace hg {

namespace {
// A scan along dim (cumsum, cumprod): I64 runs in F64 (exact to 2^53), a 0-d or empty x is copied, and the
// floating body(x, dim, n) runs with autocast off (in x's dtype, as torch's).
template <class Body>
Tensor scan(const char* op, const Tensor& x, int64_t dim, Body body) {
  HG_CHECK(x.defined(), op, ": the tensor is undefined");
  if (x.dtype() == DType::I64) return scan(op, x.to(DType::F64), dim, body).to(DType::I64);
  check_floating(op, x);
  if (x.ndim() == 0) return clone(x);
  dim = wrap_dim(op, dim, x.ndim());
  if (x.numel() == 0) return clone(x);
  amp::Autocast off(x.device(), std::nullopt, {.enabled = false});
  return body(x, dim, x.shape()[dim]);
}
}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  return scan("cumsum", x, dim, [](const Tensor& x, int64_t dim, int64_t n) {
    HG_CHECK(n <= 8192, "cumsum: dim ", dim, " has size ", n, "; this cumsum is a GEMM with an (n, n) triangle of "
             "ones and stops at n = 8192 (reshape the dim into blocks and add their cumsums' last values)");
    // ones where row i <= column j: (..., n) @ U sums the first j + 1 entries into column j (accumulating in F32)
    const Tensor upper = triangle_mask(n, n, 0, false, {.dtype = x.dtype(), .device = x.device()});
    const Tensor last = transpose(x, dim, -1);  // a view
    const Tensor y = matmul(reshape(last, {-1, n}), upper);
    return transpose(reshape(y, last.shape()), dim, -1).contiguous();
  });
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  return scan("cumprod", x, dim, [](const Tensor& x, int64_t dim, int64_t n) {
    // a scan by doubling: after the step with shift s, y[j] is the product of x[j - 2s + 1 .. j]; ceil(log2 n)
    // products of elementwise muls with shifted copies (ones shifted in), so zeros and the gradient need no care
    Tensor y = x;
    for (int64_t s = 1; s < n; s *= 2) {
      Shape pad = x.shape();
      pad[dim] = s;
      const Tensor shifted = cat({ones(pad, {.dtype = x.dtype(), .device = x.device()}), slice(y, dim, 0, n - s)}, dim);
      y = mul(y, shifted);
    }
    return y.same(x) ? clone(x) : y;
  });
}

namespace {
// The order of each row along dim, as an I64 tensor of x's shape (host work: x is read back).
Tensor order_indices(const char* op, const Tensor& x, int64_t dim, bool descending) {
  check_floating(op, x);
  const Tensor last = transpose(x.detach(), dim, -1).contiguous();
  const int64_t n = last.ndim() == 0 ? 1 : last.shape()[last.ndim() - 1];
  const std::vector<double> v = last.to_vector<double>();
  std::vector<int64_t> idx(v.size());
  for (size_t r = 0; n > 0 && r < v.size() / static_cast<size_t>(n); ++r) {
    const double* row = v.data() + r * static_cast<size_t>(n);
    int64_t* out = idx.data() + r * static_cast<size_t>(n);
    std::iota(out, out + n, int64_t{0});
    // NaN is the largest value (torch): last ascending, first descending
    const auto less = [row](int64_t a, int64_t b) {
      const double x = row[a], y = row[b];
      return std::isnan(y) ? !std::isnan(x) : x < y;
    };
    if (descending) std::stable_sort(out, out + n, [&](int64_t a, int64_t b) { return less(b, a); });
    else std::stable_sort(out, out + n, less);
  }
  const Tensor ids = from_vector(idx, last.shape()).to(x.device());
  return transpose(ids, dim, -1).contiguous();
}
}  // namespace

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  HG_CHECK(x.defined(), "sort: the tensor is undefined");
  if (x.ndim() == 0) return {clone(x), zeros({}, {.dtype = DType::I64, .device = x.device()})};
  dim = wrap_dim("sort", dim, x.ndim());
  if (x.dtype() == DType::I64) {
    auto [v, i] = sort(x.to(DType::F64), dim, descending);
    return {v.to(DType::I64), i};
  }
  const Tensor idx = order_indices("sort", x, dim, descending);
  return {gather(x, dim, idx), idx};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return std::get<1>(sort(x, dim, descending)); }

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  HG_CHECK(x.defined(), "topk: the tensor is undefined");
  const int64_t d = wrap_dim("topk", dim, x.ndim());
  const int64_t n = x.ndim() == 0 ? 1 : x.shape()[d];
  HG_CHECK(k >= 0 && k <= n, "topk: k=", k, " is out of range for dim ", d, " of size ", n, "; need 0 <= k <= ", n);
  (void)sorted;  // always sorted: a sorted order is one of the orders torch allows for sorted=false
  auto [v, i] = sort(x, d, largest);
  if (x.ndim() == 0) return {v, i};
  return {narrow(v, d, 0, k).contiguous(), narrow(i, d, 0, k).contiguous()};
}

// ---- the members (core/tensor.h) ----
Tensor Tensor::cumsum(int64_t dim) const { return hg::cumsum(*this, dim); }
Tensor Tensor::cumprod(int64_t dim) const { return hg::cumprod(*this, dim); }
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const { return hg::sort(*this, dim, descending); }
Tensor Tensor::argsort(int64_t dim, bool descending) const { return hg::argsort(*this, dim, descending); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return hg::topk(*this, k, dim, largest, sorted);
}

}  // namespace hg
