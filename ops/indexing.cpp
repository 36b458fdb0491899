// torch::indexing's Tensor::index and index_put_ (ops/indexing.h): the basic indices are view ops; one tensor
// index is an index_select over the indexed dims merged into one, its positions found on the host.
#include "ops/indexing.h"

#include <limits>
#include <string_view>

#include "ops/broadcast.h"
#include "ops/elementwise.h"
#include "ops/shape.h"

namespace hg {
namespace indexing {

TensorIndex::TensorIndex(const char* s) : kind_(Kind::Ellipsis) {
  HG_CHECK(s != nullptr && std::string_view(s) == "...", "index: the string index \"", s ? s : "",
           "\" is not an index; the only string index is \"...\" (Ellipsis)");
}

TensorIndex::TensorIndex(Tensor t) : kind_(Kind::Tensor), tensor_(std::move(t)) {
  HG_CHECK(tensor_.defined(), "index: a tensor index is undefined");
}

}  // namespace indexing

namespace {

using indexing::TensorIndex;
using Kind = TensorIndex::Kind;

bool is_mask(const Tensor& t) { return t.dtype() != DType::I64; }

// How many of the tensor's dims an index uses up.
int64_t dims_used(const TensorIndex& i) {
  switch (i.kind()) {
    case Kind::Integer: case Kind::Slice: return 1;
    case Kind::Tensor: return is_mask(i.tensor()) ? i.tensor().ndim() : 1;
    default: return 0;
  }
}

// The basic indices applied as views, and the tensor index (if any) with the dim of the view it starts at.
struct Indexed {
  Tensor view;
  Tensor tensor;
  int64_t dim = 0;
};

Indexed apply_basic(const char* op, const Tensor& x, const std::vector<TensorIndex>& indices) {
  int64_t used = 0, ellipses = 0;
  for (const TensorIndex& i : indices) {
    used += dims_used(i);
    ellipses += i.kind() == Kind::Ellipsis;
  }
  HG_CHECK(ellipses <= 1, op, ": an index can only have a single ellipsis (\"...\")");
  HG_CHECK(used <= x.ndim(), op, ": too many indices for a tensor of dimension ", x.ndim(), " (shape ", x.shape(),
           "): the indices use ", used, " dims");
  Indexed out;
  Tensor r = x;
  int64_t dim = 0;
  for (const TensorIndex& i : indices) {
    switch (i.kind()) {
      case Kind::Integer: r = select(r, dim, i.integer()); break;
      case Kind::Slice: {
        const indexing::Slice& s = i.slice();
        HG_CHECK(s.step > 0, op, ": slice step ", s.step, " must be positive (torch's rule; use flip for a reversal)");
        r = slice(r, dim, s.start.value_or(0), s.stop.value_or(std::numeric_limits<int64_t>::max()), s.step);
        ++dim;
        break;
      }
      case Kind::None: r = unsqueeze(r, dim++); break;
      case Kind::Boolean:  // true adds a dim of 1, false a dim of 0 (torch)
        r = unsqueeze(r, dim);
        if (!i.boolean()) r = slice(r, dim, 0, 0);
        ++dim;
        break;
      case Kind::Ellipsis: dim += x.ndim() - used; break;
      case Kind::Tensor:
        HG_CHECK(!out.tensor.defined(), op, ": more than one tensor index; torch broadcasts them together, halfgrad "
                 "takes one per call: index with the first, then index the result");
        check_same_device(op, x, i.tensor());
        out.tensor = i.tensor();
        out.dim = dim;
        dim += dims_used(i);
        break;
    }
  }
  out.view = r;
  return out;
}

// What a tensor index picks along dims [d, d + k) of r, merged into one dim of n positions: the positions, and
// the shape they take in the result.
struct Picks {
  std::vector<int64_t> pos;
  Shape shape;
  int64_t k = 1, n = 0;
};

Picks picks(const char* op, const Tensor& r, int64_t d, const Tensor& t) {
  Picks p;
  if (!is_mask(t)) {
    p.n = r.shape()[d];
    for (int64_t v : t.to_vector<int64_t>()) {
      HG_CHECK(v >= -p.n && v < p.n, op, ": index ", v, " is out of range for dim ", d, " of size ", p.n,
               "; indices must be in [", -p.n, ", ", p.n, ")");
      p.pos.push_back(v < 0 ? v + p.n : v);
    }
    p.shape = t.shape();
    return p;
  }
  check_floating(op, t);
  HG_CHECK(t.ndim() >= 1, op, ": a 0-d mask is not supported; give the mask the shape of the dims it selects");
  p.k = t.ndim();
  for (int64_t j = 0; j < p.k; ++j)
    HG_CHECK(t.shape()[j] == r.shape()[d + j], op, ": the mask of shape ", t.shape(), " does not match the indexed dims ",
             "of the tensor of shape ", r.shape(), " (dim ", d + j, " has size ", r.shape()[d + j], ")");
  const std::vector<double> m = t.to_vector<double>();
  p.n = static_cast<int64_t>(m.size());
  for (int64_t q = 0; q < p.n; ++q)
    if (m[static_cast<size_t>(q)] != 0) p.pos.push_back(q);
  p.shape = Shape{static_cast<int64_t>(p.pos.size())};
  return p;
}

// r's shape with dims [d, d + k) replaced by `middle`.
Shape replace_dims(const Shape& s, int64_t d, int64_t k, const std::vector<int64_t>& middle) {
  std::vector<int64_t> out(s.dims().begin(), s.dims().begin() + d);
  out.insert(out.end(), middle.begin(), middle.end());
  out.insert(out.end(), s.dims().begin() + d + k, s.dims().end());
  return Shape(std::move(out));
}

Tensor positions_tensor(const std::vector<int64_t>& pos, Device dev) {
  return from_vector(pos, Shape{static_cast<int64_t>(pos.size())}).to(dev);
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  HG_CHECK(x.defined(), "index: the tensor is undefined");
  const Indexed ix = apply_basic("index", x, indices);
  if (!ix.tensor.defined()) return ix.view;
  if (x.dtype() == DType::I64) return index(x.to(DType::F64), indices).to(DType::I64);  // exact to 2^53
  const Tensor& r = ix.view;
  const int64_t d = ix.dim;
  const Picks p = picks("index", r, d, ix.tensor);
  const Tensor merged = reshape(r, replace_dims(r.shape(), d, p.k, {p.n}));
  const Tensor picked = index_select(merged, d, positions_tensor(p.pos, x.device()));
  return reshape(picked, replace_dims(r.shape(), d, p.k, p.shape.dims()));
}

const Tensor& index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& v) {
  HG_CHECK(x.defined() && v.defined(), "index_put_: the tensor or the value is undefined");
  const Indexed ix = apply_basic("index_put_", x, indices);
  if (!ix.tensor.defined()) {
    ix.view.copy_(v);  // a view of x: writes into x
    return x;
  }
  const Tensor& r = ix.view;
  const int64_t d = ix.dim;
  const Picks p = picks("index_put_", r, d, ix.tensor);
  const Shape merged_shape = replace_dims(r.shape(), d, p.k, {p.n});
  HG_CHECK(can_view(r, merged_shape), "index_put_: the dims the mask covers cannot be merged without a copy in this "
           "tensor (shape ", r.shape(), ", strides ", Shape(r.strides()), "); call .contiguous() on it first and index that");
  const Tensor merged = view(r, merged_shape);  // a view: the write goes through it into x
  // the values in the picked shape, then spread to every position of the merged dim: position q takes the value
  // of the (last) pick of q, or a filler row where nothing picks q; where() keeps r's own value there
  const int64_t count = static_cast<int64_t>(p.pos.size());
  const Shape picked_shape = replace_dims(r.shape(), d, p.k, p.shape.dims());
  Tensor vals = v.device() == x.device() ? v : v.to(x.device());
  const DType cdt = x.dtype() == DType::I64 ? DType::F64 : x.dtype();
  vals = expand(vals.to(cdt), picked_shape).reshape(replace_dims(r.shape(), d, p.k, {count}));
  std::vector<int64_t> inv(static_cast<size_t>(p.n), count);
  for (int64_t j = 0; j < count; ++j) inv[static_cast<size_t>(p.pos[static_cast<size_t>(j)])] = j;
  const Tensor filler = zeros(replace_dims(r.shape(), d, p.k, {1}), {.dtype = cdt, .device = x.device()});
  const Tensor spread = index_select(cat({vals, filler}, d), d, positions_tensor(inv, x.device()));
  std::vector<double> hit(static_cast<size_t>(p.n));
  for (size_t q = 0; q < hit.size(); ++q) hit[q] = inv[q] != count ? 1.0 : 0.0;
  std::vector<int64_t> hit_shape(static_cast<size_t>(merged.ndim()), 1);
  hit_shape[static_cast<size_t>(d)] = p.n;
  const Tensor hit_t = from_vector(hit, Shape(hit_shape), {.dtype = cdt}).to(x.device());
  merged.copy_(where(hit_t, spread, merged.to(cdt)));
  return x;
}

const Tensor& index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, double v) {
  HG_CHECK(x.defined(), "index_put_: the tensor is undefined");
  return index_put_(x, indices, full({}, v, {.dtype = x.dtype() == DType::I64 ? DType::F64 : x.dtype(), .device = x.device()}));
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  HG_CHECK(x.defined() && mask.defined(), "masked_select: the tensor or the mask is undefined");
  const Tensor xs = x.ndim() == 0 ? reshape(x, {1}) : x;
  const Shape s = broadcast_shapes("masked_select", xs.shape(), mask.shape());
  const Tensor xe = xs.shape() == s ? xs : expand(xs, s);
  const Tensor me = mask.shape() == s ? mask : expand(mask, s);
  return reshape(index(xe, {me}), {-1});
}

Tensor nonzero(const Tensor& x) {
  HG_CHECK(x.defined(), "nonzero: the tensor is undefined");
  const std::vector<double> v = x.to_vector<double>();
  const std::vector<int64_t> st = contiguous_strides(x.shape());
  std::vector<int64_t> out;
  int64_t count = 0;
  for (size_t q = 0; q < v.size(); ++q) {
    if (v[q] == 0) continue;
    ++count;
    int64_t rem = static_cast<int64_t>(q);
    for (size_t j = 0; j < st.size(); ++j) {
      out.push_back(rem / st[j]);
      rem %= st[j];
    }
  }
  return from_vector(out, Shape{count, x.ndim()}).to(x.device());
}

// ---- the members (core/tensor.h) ----
Tensor Tensor::index(const std::vector<indexing::TensorIndex>& indices) const { return hg::index(*this, indices); }
const Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, const Tensor& v) const {
  return hg::index_put_(*this, indices, v);
}
const Tensor& Tensor::index_put_(const std::vector<indexing::TensorIndex>& indices, double v) const {
  return hg::index_put_(*this, indices, v);
}
Tensor Tensor::masked_select(const Tensor& mask) const { return hg::masked_select(*this, mask); }
Tensor Tensor::nonzero() const { return hg::nonzero(*this); }

}  // namespace hg
