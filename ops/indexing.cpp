// torch::indexing's Tensor::index and index_put_ (ops/indexing.h): the basic indices are view ops; the tensor
// indices, broadcast together on the host, are one index_select over the indexed dims merged into one.
#include "ops/indexing.h"

#include <algorithm>
#include <limits>
#include <string>
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

bool is_mask(const Tensor& t) { return t.dtype() != DType::I64; }  // Bool, or a floating 0/1 tensor

// How many of the tensor's dims an index uses up.
int64_t dims_used(const TensorIndex& i) {
  switch (i.kind()) {
    case Kind::Integer: case Kind::Slice: return 1;
    case Kind::Tensor: return is_mask(i.tensor()) ? i.tensor().ndim() : 1;
    default: return 0;
  }
}

// The basic indices applied as views, and the tensor indices with the dim of the view each starts at.
struct Indexed {
  Tensor view;
  std::vector<std::pair<int64_t, Tensor>> tensors;
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
      case Kind::Integer: r = select(r, dim, i.integer()); break;  // a view, as torch's (not a tensor index)
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
        check_same_device(op, x, i.tensor());
        out.tensors.emplace_back(dim, i.tensor());
        dim += dims_used(i);
        break;
    }
  }
  out.view = r;
  return out;
}

// What the tensor indices pick in r, read on the host: the dims they cover (ascending), the shape they broadcast
// to, and for each element of that shape the row-major position within the covered dims (of n in all).
struct Picks {
  std::vector<int64_t> dims;
  Shape shape;
  std::vector<int64_t> pos;
  int64_t n = 1;
  bool adjacent() const { return dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size()); }
};

// The coordinates of x's nonzero elements in row-major order, read on the host: ndim values per element, and
// how many elements (a 0-d x has no coordinates to count them by).
std::pair<std::vector<int64_t>, int64_t> nonzero_coords(const Tensor& x) {
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
  return {out, count};
}

// One index tensor along one dim of r, on the host: its values (wrapped, checked) and shape.
struct Component {
  std::vector<int64_t> values;
  Shape shape;
};

Picks picks(const char* op, const Tensor& r, const std::vector<std::pair<int64_t, Tensor>>& tensors) {
  Picks p;
  std::vector<Component> comps;
  for (const auto& [d, t] : tensors) {
    if (!is_mask(t)) {
      const int64_t size = r.shape()[d];
      Component c{{}, t.shape()};
      for (int64_t v : t.to_vector<int64_t>()) {
        HG_CHECK(v >= -size && v < size, op, ": index ", v, " is out of range for dim ", d, " of size ", size,
                 "; indices must be in [", -size, ", ", size, ")");
        c.values.push_back(v < 0 ? v + size : v);
      }
      p.dims.push_back(d);
      comps.push_back(std::move(c));
      continue;
    }
    // a mask covering k dims is k index tensors: the coordinates of its nonzero elements (torch's nonzero)
    if (t.dtype() != DType::Bool) check_floating(op, t);
    HG_CHECK(t.ndim() >= 1, op, ": a 0-d mask is not supported; give the mask the shape of the dims it selects");
    const int64_t k = t.ndim();
    for (int64_t j = 0; j < k; ++j)
      HG_CHECK(t.shape()[j] == r.shape()[d + j], op, ": the mask of shape ", t.shape(), " does not match the indexed "
               "dims of the tensor of shape ", r.shape(), " (dim ", d + j, " has size ", r.shape()[d + j], ")");
    const std::vector<int64_t> coords = nonzero_coords(t).first;  // row after row of k coordinates
    std::vector<Component> cs(static_cast<size_t>(k));
    for (size_t q = 0; q < coords.size(); ++q) cs[q % static_cast<size_t>(k)].values.push_back(coords[q]);
    for (int64_t j = 0; j < k; ++j) {
      cs[static_cast<size_t>(j)].shape = Shape{static_cast<int64_t>(cs[static_cast<size_t>(j)].values.size())};
      p.dims.push_back(d + j);
      comps.push_back(std::move(cs[static_cast<size_t>(j)]));
    }
  }
  // torch broadcasts the index tensors together; each element's position adds up the covered dims' strides
  const std::string what = std::string(op) + " (the index tensors broadcast together; a mask is one 1-d index per dim)";
  p.shape = comps[0].shape;
  for (const Component& c : comps) p.shape = broadcast_shapes(what.c_str(), p.shape, c.shape);
  for (int64_t d : p.dims) p.n *= r.shape()[d];
  p.pos.assign(static_cast<size_t>(p.shape.numel()), 0);
  const std::vector<int64_t> out_st = contiguous_strides(p.shape);
  std::vector<int64_t> dim_strides(comps.size(), 1);  // row-major within the covered dims (no division: sizes may be 0)
  for (size_t j = comps.size() - 1; j > 0; --j) dim_strides[j - 1] = dim_strides[j] * r.shape()[p.dims[j]];
  for (size_t j = 0; j < comps.size(); ++j) {
    const int64_t dim_stride = dim_strides[j];
    // comps[j]'s stride along each dim of the broadcast shape (0 where it has size 1 or lacks the dim)
    const Shape& cs = comps[j].shape;
    const std::vector<int64_t> cst = contiguous_strides(cs);
    const int64_t lead = p.shape.ndim() - cs.ndim();
    for (size_t b = 0; b < p.pos.size(); ++b) {
      int64_t src = 0;
      for (int64_t e = lead; e < p.shape.ndim(); ++e) {
        const int64_t coord = static_cast<int64_t>(b) / out_st[static_cast<size_t>(e)] % p.shape[e];
        if (cs[e - lead] != 1) src += coord * cst[static_cast<size_t>(e - lead)];
      }
      p.pos[b] += comps[j].values[static_cast<size_t>(src)] * dim_stride;
    }
  }
  return p;
}

// r's shape with dims [d, d + k) replaced by `middle`.
Shape replace_dims(const Shape& s, int64_t d, int64_t k, const std::vector<int64_t>& middle) {
  std::vector<int64_t> out(s.dims().begin(), s.dims().begin() + d);
  out.insert(out.end(), middle.begin(), middle.end());
  out.insert(out.end(), s.dims().begin() + d + k, s.dims().end());
  return Shape(std::move(out));
}

// r with the indexed dims together (torch: where they are when adjacent, else moved to the front, which is where
// the result's index dims then go), and the dim they start at.
std::pair<Tensor, int64_t> arrange(const Tensor& r, const Picks& p) {
  if (p.adjacent()) return {r, p.dims.front()};
  std::vector<int64_t> perm = p.dims;
  for (int64_t d = 0; d < r.ndim(); ++d)
    if (std::find(p.dims.begin(), p.dims.end(), d) == p.dims.end()) perm.push_back(d);
  return {permute(r, perm), 0};
}

Tensor positions_tensor(const std::vector<int64_t>& pos, Device dev) {
  return from_vector(pos, Shape{static_cast<int64_t>(pos.size())}).to(dev);
}

}  // namespace

Tensor index(const Tensor& x, const std::vector<TensorIndex>& indices) {
  HG_CHECK(x.defined(), "index: the tensor is undefined");
  const Indexed ix = apply_basic("index", x, indices);
  if (ix.tensors.empty()) return ix.view;
  if (x.dtype() == DType::I64) return index(x.to(DType::F64), indices).to(DType::I64);  // exact to 2^53
  const Picks p = picks("index", ix.view, ix.tensors);
  const auto [r, d] = arrange(ix.view, p);
  const int64_t k = static_cast<int64_t>(p.dims.size());
  const Tensor merged = reshape(r, replace_dims(r.shape(), d, k, {p.n}));
  const Tensor picked = index_select(merged, d, positions_tensor(p.pos, x.device()));
  return reshape(picked, replace_dims(r.shape(), d, k, p.shape.dims()));
}

const Tensor& index_put_(const Tensor& x, const std::vector<TensorIndex>& indices, const Tensor& v) {
  HG_CHECK(x.defined() && v.defined(), "index_put_: the tensor or the value is undefined");
  const Indexed ix = apply_basic("index_put_", x, indices);
  if (ix.tensors.empty()) {
    ix.view.copy_(v);  // a view of x: writes into x
    return x;
  }
  const Picks p = picks("index_put_", ix.view, ix.tensors);
  const auto [r, d] = arrange(ix.view, p);  // a view of x
  const int64_t k = static_cast<int64_t>(p.dims.size());
  const DType cdt = x.dtype() == DType::I64 ? DType::F64 : x.dtype();
  const Tensor merged = reshape(r, replace_dims(r.shape(), d, k, {p.n})).to(cdt);
  // the values in the picked shape, then spread to every position of the merged dim: position q takes the value
  // of the (last) pick of q, or a filler row where nothing picks q; where() keeps r's own value there
  const int64_t count = static_cast<int64_t>(p.pos.size());
  Tensor vals = v.device() == x.device() ? v : v.to(x.device());
  vals = expand(vals.to(cdt), replace_dims(r.shape(), d, k, p.shape.dims())).reshape(replace_dims(r.shape(), d, k, {count}));
  std::vector<int64_t> inv(static_cast<size_t>(p.n), count);
  for (int64_t j = 0; j < count; ++j) inv[static_cast<size_t>(p.pos[static_cast<size_t>(j)])] = j;
  const Tensor filler = zeros(replace_dims(r.shape(), d, k, {1}), {.dtype = cdt, .device = x.device()});
  const Tensor spread = index_select(cat({vals, filler}, d), d, positions_tensor(inv, x.device()));
  std::vector<double> hit(static_cast<size_t>(p.n));
  for (size_t q = 0; q < hit.size(); ++q) hit[q] = inv[q] != count ? 1.0 : 0.0;
  std::vector<int64_t> hit_shape(static_cast<size_t>(merged.ndim()), 1);
  hit_shape[static_cast<size_t>(d)] = p.n;
  const Tensor hit_t = from_vector(hit, Shape(hit_shape), {.dtype = cdt}).to(x.device());
  r.copy_(reshape(where(hit_t, spread, merged), r.shape()));  // r is a view of x: the write lands in x
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
  const auto [coords, count] = nonzero_coords(x);
  return from_vector(coords, Shape{count, x.ndim()}).to(x.device());
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
