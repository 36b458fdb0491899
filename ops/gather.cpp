// Ops addressed by an index tensor along one dim (ops/shape.h): one_hot, index_select, gather, index_add and
// scatter(_add). Reads are differentiable through embedding's index_add_rows and its transpose (ops/embedding.h),
// so their double backward follows; every index is checked against the dim's size first.
#include <algorithm>
#include <utility>

#include "autograd/node.h"
#include "ops/autocast/autocast.h"
#include "ops/broadcast.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/reduce.h"
#include "ops/shape.h"

namespace hg {

namespace {
// The smallest and largest value of a non-empty I64 index tensor (a GPU's are read: a wait)
std::pair<int64_t, int64_t> index_bounds(const char* op, const Tensor& index) {
  HG_CHECK(index.dtype() == DType::I64, op, ": indices must be I64, got ", index.dtype());
  const Tensor wide = index.to(DType::F64);  // exact for |index| <= 2^53
  return {static_cast<int64_t>(min(wide).item()), static_cast<int64_t>(max(wide).item())};
}

// Every index in [0, n)
void check_index_range(const char* op, const Tensor& index, int64_t n, int64_t dim) {
  HG_CHECK(index.dtype() == DType::I64, op, ": indices must be I64, got ", index.dtype());
  if (index.numel() == 0) return;
  const auto [lo, hi] = index_bounds(op, index);
  HG_CHECK(lo >= 0 && hi < n, op, ": index ", lo < 0 ? lo : hi, " is out of range for dim ", dim, " of size ", n,
           "; indices must be in [0, ", n, ")");
}

// x with dim moved first or last (a copy unless it is there already), and the permutation that moves it back
std::pair<Tensor, std::vector<int64_t>> move_dim(const Tensor& x, int64_t dim, bool to_front) {
  std::vector<int64_t> order;
  if (to_front) order.push_back(dim);
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != dim) order.push_back(d);
  if (!to_front) order.push_back(dim);
  std::vector<int64_t> back(order.size());
  for (size_t k = 0; k < order.size(); ++k) back[static_cast<size_t>(order[k])] = static_cast<int64_t>(k);
  const bool in_place = dim == (to_front ? 0 : x.ndim() - 1);
  return {in_place ? x : permute(x, order), in_place ? std::vector<int64_t>{} : back};
}
// y moved back by move_dim's permutation (none: y itself)
Tensor move_back(const Tensor& y, const std::vector<int64_t>& back) { return back.empty() ? y : permute(y, back); }
}  // namespace

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  HG_CHECK(num_classes >= -1, "one_hot: num_classes=", num_classes, " must be -1 (inferred) or >= 0");
  if (indices.numel() > 0) {
    const auto [lo, hi] = index_bounds("one_hot", indices);
    HG_CHECK(lo >= 0, "one_hot: index ", lo, " is negative; class indices are in [0, num_classes)");
    if (num_classes == -1) num_classes = hi + 1;
    HG_CHECK(hi < num_classes, "one_hot: index ", hi, " is not smaller than num_classes=", num_classes);
  } else {
    HG_CHECK(indices.dtype() == DType::I64, "one_hot: indices must be I64, got ", indices.dtype());
    HG_CHECK(num_classes >= 0, "one_hot: cannot infer num_classes from an empty tensor; pass it");
  }
  const Tensor classes = arange(0.0, static_cast<double>(num_classes), 1.0, {.dtype = DType::F64, .device = indices.device()});
  return eq(unsqueeze(indices.to(DType::F64), -1), classes).to(DType::I64);
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_floating("index_select", x);
  check_same_device("index_select", x, index);
  HG_CHECK(index.ndim() <= 1, "index_select: index must be 0-d or 1-d, got shape ", index.shape());
  HG_CHECK(x.ndim() >= 1, "index_select: cannot index a 0-d tensor");
  dim = wrap_dim("index_select", dim, x.ndim());
  const int64_t n = x.shape()[dim];
  check_index_range("index_select", index, n, dim);
  amp::Autocast off(x.device(), std::nullopt, {.enabled = false});  // runs in x's dtype, as torch's
  // rows of an (n, rest) table with dim first, then one embedding lookup per index
  const auto [front, back] = move_dim(x, dim, true);
  const Tensor rows = reshape(front, {n, n == 0 ? 0 : front.numel() / n});
  const int64_t k = index.numel();
  std::vector<int64_t> picked = front.shape().dims();
  picked[0] = k;
  return move_back(reshape(embedding(reshape(index, {k}), rows), Shape(picked)), back);
}

namespace {
// The flat row-major position in a tensor of shape xs of each element of index, whose values pick along dim while
// its other coordinates are its own (gather's and scatter's addressing): 1-d I64, exact through F64 (to 2^53).
Tensor addressed_positions(const Shape& xs, int64_t dim, const Tensor& index) {
  const TensorOptions f64{.dtype = DType::F64, .device = index.device()};
  const std::vector<int64_t> st = contiguous_strides(xs);
  Tensor pos = mul(index.to(DType::F64), static_cast<double>(st[static_cast<size_t>(dim)]));
  for (int64_t d = 0; d < index.ndim(); ++d) {
    if (d == dim) continue;
    std::vector<int64_t> along(static_cast<size_t>(index.ndim()), 1);
    along[static_cast<size_t>(d)] = index.shape()[d];
    const Tensor coord = mul(arange(0.0, static_cast<double>(index.shape()[d]), 1.0, f64), static_cast<double>(st[static_cast<size_t>(d)]));
    pos = add(pos, reshape(coord, Shape(along)));
  }
  return reshape(pos.to(DType::I64), {-1});
}
}  // namespace

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_floating("gather", x);
  check_same_device("gather", x, index);
  HG_CHECK(index.ndim() == x.ndim() && x.ndim() >= 1, "gather: index has shape ", index.shape(), " but x has ",
           x.shape(), "; they must have the same number of dims (at least 1)");
  dim = wrap_dim("gather", dim, x.ndim());
  for (int64_t d = 0; d < x.ndim(); ++d)
    HG_CHECK(d == dim || index.shape()[d] <= x.shape()[d], "gather: index.shape[", d, "]=", index.shape()[d],
             " exceeds x.shape[", d, "]=", x.shape()[d], "; off the gathered dim the index may not be larger");
  const int64_t n = x.shape()[dim];
  check_index_range("gather", index, n, dim);
  amp::Autocast off(x.device(), std::nullopt, {.enabled = false});
  // one embedding lookup of each addressed position into x's values, seen as an (numel, 1) table
  const Tensor values = embedding(addressed_positions(x.shape(), dim, index), reshape(x, {x.numel(), 1}));
  return reshape(values, index.shape());
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, double alpha) {
  check_floating("index_add", x);
  check_same_device("index_add", x, index);
  check_same_device("index_add", x, source);
  HG_CHECK(index.ndim() <= 1, "index_add: index must be 0-d or 1-d, got shape ", index.shape());
  HG_CHECK(x.ndim() >= 1, "index_add: cannot index a 0-d tensor");
  dim = wrap_dim("index_add", dim, x.ndim());
  const int64_t n = x.shape()[dim], k = index.numel();
  Shape want = x.shape();
  want[dim] = k;
  HG_CHECK(source.shape() == want, "index_add: source has shape ", source.shape(), " but x of shape ", x.shape(),
           " with ", k, " indices along dim ", dim, " needs ", want);
  check_index_range("index_add", index, n, dim);
  amp::Autocast off(x.device(), std::nullopt, {.enabled = false});
  // rows of source (dim first) added into rows of a zero (n, rest) table, then moved back
  const auto [front, back] = move_dim(source.to(x.dtype()), dim, true);
  const int64_t rest = k == 0 ? 0 : front.numel() / k;
  const Tensor rows = index_add_rows(reshape(index, {k}), reshape(front, {k, rest}), n);
  std::vector<int64_t> sizes = front.shape().dims();
  sizes[0] = n;
  const Tensor added = move_back(reshape(rows, Shape(sizes)), back);
  return add(x, alpha == 1.0 ? added : mul(added, alpha));
}

namespace {
// scatter's addressed positions in x and src cut to index's shape, after torch's shape rules and the index range
std::pair<Tensor, Tensor> scatter_positions(const char* op, const Tensor& x, int64_t& dim, const Tensor& index,
                                            const Tensor& src) {
  check_floating(op, x);
  check_same_device(op, x, index);
  check_same_device(op, x, src);
  HG_CHECK(index.ndim() == x.ndim() && src.ndim() == x.ndim() && x.ndim() >= 1, op, ": index ", index.shape(), ", src ",
           src.shape(), " and x ", x.shape(), " must have the same number of dims (at least 1)");
  dim = wrap_dim(op, dim, x.ndim());
  for (int64_t d = 0; d < x.ndim(); ++d) {
    HG_CHECK(index.shape()[d] <= src.shape()[d], op, ": index.shape[", d, "]=", index.shape()[d], " exceeds src.shape[",
             d, "]=", src.shape()[d]);
    HG_CHECK(d == dim || index.shape()[d] <= x.shape()[d], op, ": index.shape[", d, "]=", index.shape()[d],
             " exceeds x.shape[", d, "]=", x.shape()[d], "; off the scattered dim the index may not be larger");
  }
  check_index_range(op, index, x.shape()[dim], dim);
  Tensor cut = src;
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (cut.shape()[d] > index.shape()[d]) cut = slice(cut, d, 0, index.shape()[d]);
  return {addressed_positions(x.shape(), dim, index), reshape(cut.to(x.dtype()), {-1, 1})};
}
}  // namespace

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  amp::Autocast off(x.device(), std::nullopt, {.enabled = false});
  const auto [pos, values] = scatter_positions("scatter_add", x, dim, index, src);
  return add(x, reshape(index_add_rows(pos, values, x.numel()), x.shape()));
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  amp::Autocast off(x.device(), std::nullopt, {.enabled = false});
  const auto [pos, values] = scatter_positions("scatter", x, dim, index, src);
  Tensor hits;
  {
    NoGradGuard ng;
    hits = index_add_rows(pos, ones({pos.numel(), 1}, {.dtype = x.dtype(), .device = x.device()}), x.numel());
    // torch leaves which value lands unspecified when positions repeat; halfgrad refuses rather than pick one
    HG_CHECK(pos.numel() == 0 || max(hits).item() <= 1.0, "scatter: the index sends several values to one position "
             "(torch leaves which one lands unspecified); make the index unique along dim, or use scatter_add");
  }
  const Tensor spread = reshape(index_add_rows(pos, values, x.numel()), x.shape());
  return where(reshape(hits, x.shape()), spread, x);
}

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, double value) {
  return scatter(x, dim, index, full(index.shape(), value, {.dtype = x.dtype(), .device = x.device()}));
}

}  // namespace hg
