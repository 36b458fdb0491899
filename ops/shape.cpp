#include "ops/shape.h"

#include <cmath>
#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>

#include "autograd/node.h"
#include "core/dispatch_table.h"
#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/broadcast.h"
#include "ops/embedding.h"
#include "ops/kernels/elementwise.h"
#include "ops/reduce.h"

namespace hg {

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim) {
  const int64_t n = std::max<int64_t>(ndim, 1);
  HG_CHECK(dim >= -n && dim < n, op, ": dim ", dim, " is out of range for a ", ndim, "-d tensor; use a dim in [", -n,
           ", ", n, ")");
  return dim < 0 ? dim + n : dim;
}

namespace {

// Copies src (viewed with `sizes` and element strides `src_strides` from src_offset, both counted from src's
// element 0 whatever its layout) into dst at dst_offset with dst_strides (likewise from dst's element 0).
void copy_strided(const Tensor& src, int64_t src_offset, const std::vector<int64_t>& sizes,
                  const std::vector<int64_t>& src_strides, const Tensor& dst, int64_t dst_offset,
                  const std::vector<int64_t>& dst_strides) {
  check_same_device("copy", src, dst);
  HG_CHECK(src.dtype() == dst.dtype(), "copy: source dtype ", src.dtype(), " differs from destination ", dst.dtype());
  HG_CHECK(sizes.size() <= static_cast<size_t>(kMaxDims), "copy: ", sizes.size(), " dims exceed the limit of ",
           kMaxDims);
  StridedCopy c;
  c.ndim = static_cast<int>(sizes.size());
  for (int d = 0; d < c.ndim; ++d) {
    c.sizes[d] = sizes[static_cast<size_t>(d)];
    c.src_strides[d] = src_strides[static_cast<size_t>(d)];
    c.dst_strides[d] = dst_strides[static_cast<size_t>(d)];
  }
  const int64_t es = static_cast<int64_t>(dtype_size(src.dtype()));
  c.elem_size = static_cast<int>(es);
  c.src = static_cast<const char*>(src.strided_data_ptr()) + src_offset * es;
  c.dst = static_cast<char*>(dst.strided_data_ptr()) + dst_offset * es;
  copy_kernels().get(src.device(), DType::F32)(c);
}

// The sizes, element strides and storage offset of a view.
struct Geometry {
  std::vector<int64_t> sizes, strides;
  int64_t offset = 0;
};
Geometry geometry_of(const Tensor& x) { return {x.shape().dims(), x.strides(), x.storage_offset()}; }
Geometry dense_geometry(const Shape& s) { return {s.dims(), contiguous_strides(s), 0}; }

// Marks y as a view of x: its base is x's base, or x.
void mark_view(const Tensor& y, const Tensor& x) {
  y.unsafe_impl()->is_view = true;
  y.unsafe_impl()->view_base = x.unsafe_impl()->view_base ? x.unsafe_impl()->view_base : x.impl_ptr();
}

// x's storage seen through g (no autograd): a view.
Tensor view_of(const Tensor& x, Geometry g) {
  Tensor y = alias_strided(x, Shape(std::move(g.sizes)), std::move(g.strides), g.offset);
  mark_view(y, x);
  return y;
}

template <class Pick>
Tensor subset_view(const char* name, const Tensor& x, Pick pick);

// dy written into the view `pick` of a zero tensor shaped xs: the backward of a subset view. Recorded (its own
// gradient is the same view of the incoming one), so that create_graph differentiates through slices.
template <class Pick>
Tensor zero_padded(const Tensor& dy, const Shape& xs, Pick pick) {
  Tensor dx = zeros(xs, {.dtype = dy.dtype(), .device = dy.device()});
  copy_into(dy.detach(), view_of(dx, pick(dense_geometry(xs))));
  autograd::record(dx, "slice_backward", {dy}, [pick](const Tensor& g, const GradMask&) {
    // pick reads a dense geometry (copy_slices' place holds its base's strides)
    return std::vector<Tensor>{subset_view("slice", contiguous(g), pick)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return dx;
}

// The view `pick` makes of x, where each element of x appears at most once (slice, select): backward writes dy
// into the same view of a zero tensor shaped like x.
template <class Pick>
Tensor subset_view(const char* name, const Tensor& x, Pick pick) {
  Tensor y = view_of(x, pick(geometry_of(x)));
  autograd::record(y, name, {x}, [xs = x.shape(), pick](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{zero_padded(dy, xs, pick)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

// A view of x with other sizes over the same elements in the same order (reshape, unsqueeze, squeeze): the
// gradient is dy reshaped back.
Tensor reshaping_view(const Tensor& x, Shape shape, std::vector<int64_t> strides) {
  Tensor y = alias_strided(x, std::move(shape), std::move(strides), x.storage_offset());
  mark_view(y, x);
  autograd::record(y, "view", {x}, [xs = x.shape()](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{reshape(dy, xs)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}
Tensor reshaping_view(const Tensor& x, Geometry g) { return reshaping_view(x, Shape(std::move(g.sizes)), std::move(g.strides)); }

// The strides that show x's elements, in order, as shape s without a copy, when there are such strides
// (torch's view rule): the dims of x are taken in runs that are contiguous with each other, and each run must
// be covered exactly by consecutive dims of s.
std::optional<std::vector<int64_t>> view_strides(const Tensor& x, const Shape& s) {
  if (x.is_contiguous()) return contiguous_strides(s);
  if (x.numel() == 0) return contiguous_strides(s);
  const std::vector<int64_t> old = x.shape().dims(), st = x.strides();
  std::vector<int64_t> out(static_cast<size_t>(s.ndim()), 1);
  int64_t vd = s.ndim() - 1;
  int64_t base = st.back(), run = 1, covered = 1;
  for (int64_t d = x.ndim() - 1; d >= 0; --d) {
    run *= old[static_cast<size_t>(d)];
    const bool run_ends = d == 0 || (old[static_cast<size_t>(d - 1)] != 1 && st[static_cast<size_t>(d - 1)] != run * base);
    if (!run_ends) continue;
    while (vd >= 0 && (covered < run || s[vd] == 1)) {
      out[static_cast<size_t>(vd)] = covered * base;
      covered *= s[vd];
      --vd;
    }
    if (covered != run) return std::nullopt;
    if (d > 0) {
      base = st[static_cast<size_t>(d - 1)];
      run = covered = 1;
    }
  }
  if (vd != -1) return std::nullopt;
  return out;
}

Shape infer_shape(const char* op, const Tensor& x, Shape s) {
  int64_t known = 1, infer = -1;
  for (int64_t i = 0; i < s.ndim(); ++i) {
    if (s[i] == -1) {
      HG_CHECK(infer < 0, op, ": only one dim can be -1, got shape ", s);
      infer = i;
    } else {
      HG_CHECK(s[i] >= 0, op, ": invalid size ", s[i], " in shape ", s);
      known *= s[i];
    }
  }
  if (infer >= 0) {
    HG_CHECK(known != 0 && x.numel() % known == 0, op, ": cannot infer the -1 in ", s, " for ", x.numel(),
             " elements (shape ", x.shape(), ")");
    s[infer] = x.numel() / known;
  }
  HG_CHECK(s.numel() == x.numel(), op, ": shape ", s, " has ", s.numel(), " elements but the tensor of shape ",
           x.shape(), " has ", x.numel());
  return s;
}

}  // namespace

void copy_into(const Tensor& src, const Tensor& dst) {
  HG_CHECK(src.shape() == dst.shape(), "copy: source shape ", src.shape(), " differs from destination ", dst.shape());
  if (src.numel() == 0) return;
  copy_strided(src, 0, src.shape().dims(), src.strides(), dst, 0, dst.strides());
}

void copy_slices(const char* op, const Tensor& view, const Tensor& value) {
  const Tensor base(view.unsafe_impl()->view_base);
  HG_CHECK(!(base.is_leaf() && base.requires_grad()), op, ": a view of a leaf Variable that requires grad is being "
           "used in an in-place operation (the view has shape ", view.shape(), ", its base ", base.shape(), "); run "
           "it under NoGradGuard, or on a clone()");
  HG_CHECK(base.is_contiguous(), op, ": the base of this view (shape ", base.shape(), ") is not contiguous; clone() "
           "the view, or make the base contiguous before viewing it");
  for (int64_t d = 0; d < view.ndim(); ++d)
    HG_CHECK(view.stride(d) != 0 || view.shape()[d] <= 1, op, ": unsupported operation: more than one element of "
             "the written-to tensor refers to a single memory location (an expanded view, shape ", view.shape(),
             "); clone() it first");
  // the view's place in its base, counted from the base's first element
  const Geometry at{view.shape().dims(), view.strides(), view.storage_offset() - base.storage_offset()};
  const auto place = [at](const Geometry& g) { return Geometry{at.sizes, at.strides, g.offset + at.offset}; };
  // the base's new history: its old values outside the view, `value` inside
  Tensor before = alias_strided(base, base.shape(), {}, base.storage_offset());
  before.unsafe_impl()->autograd = base.unsafe_impl()->autograd;
  Tensor after = alias_strided(base, base.shape(), {}, base.storage_offset());
  autograd::record(after, "CopySlices", {before, value}, [xs = base.shape(), place](const Tensor& dy, const GradMask&) {
    if (autograd::create_graph_active()) {  // recorded: dy outside the region (a constant mask), and dy's region
      Tensor inside = zeros(xs, {.dtype = DType::Bool, .device = dy.device()});
      const Tensor region = view_of(inside, place(dense_geometry(xs)));
      copy_into(ones(region.shape(), {.dtype = DType::Bool, .device = dy.device()}), region);
      const Tensor g = contiguous(dy);
      return std::vector<Tensor>{where(inside, zeros({}, {.dtype = dy.dtype(), .device = dy.device()}), g),
                                 subset_view("slice", g, place)};
    }
    const Tensor d_before = dy.clone();
    const Tensor inside = view_of(d_before, place(dense_geometry(xs)));
    const Tensor d_value = inside.clone();  // a copy even when the view is contiguous: the region is zeroed next
    copy_into(zeros(inside.shape(), {.dtype = dy.dtype(), .device = dy.device()}), inside);
    return std::vector<Tensor>{d_before, d_value};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  base.unsafe_impl()->autograd = after.unsafe_impl()->autograd;
  // the view's history: a view of the base's new history
  view.unsafe_impl()->autograd = subset_view("view", base, place).unsafe_impl()->autograd;
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  copy_into(x, y);
  autograd::record(y, "contiguous", {x}, [](const Tensor& dy, const GradMask&) { return std::vector<Tensor>{dy}; },
                   autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

Tensor reshape(const Tensor& x, Shape s) {
  s = infer_shape("reshape", x, std::move(s));
  if (x.is_contiguous()) return reshaping_view(x, std::move(s), {});  // empty strides: contiguous
  if (auto st = view_strides(x, s)) return reshaping_view(x, std::move(s), std::move(*st));
  return reshaping_view(contiguous(x), std::move(s), {});
}

Tensor view(const Tensor& x, Shape s) {
  s = infer_shape("view", x, std::move(s));
  const auto st = view_strides(x, s);
  HG_CHECK(st.has_value(), "view: shape ", s, " cannot be a view of the tensor of shape ", x.shape(), " and strides ",
           Shape(x.strides()), " (some dims it merges or splits are not contiguous with each other); use "
           ".reshape(...) instead, which copies when it must, or .contiguous().view(...)");
  return reshaping_view(x, std::move(s), std::move(*st));
}

Tensor permute(const Tensor& x, std::vector<int64_t> dims) {
  const int64_t nd = x.ndim();
  HG_CHECK(static_cast<int64_t>(dims.size()) == nd, "permute: ", dims.size(), " dims given for a ", nd,
           "-d tensor; give a permutation of all dims");
  std::vector<char> seen(static_cast<size_t>(nd), 0);
  for (int64_t& d : dims) {
    d = wrap_dim("permute", d, nd);
    HG_CHECK(!seen[static_cast<size_t>(d)], "permute: dim ", d, " appears twice; give each dim once");
    seen[static_cast<size_t>(d)] = 1;
  }
  const Geometry g = geometry_of(x);
  Geometry p{{}, {}, g.offset};
  for (int64_t d : dims) {
    p.sizes.push_back(g.sizes[static_cast<size_t>(d)]);
    p.strides.push_back(g.strides[static_cast<size_t>(d)]);
  }
  Tensor y = view_of(x, std::move(p));
  autograd::record(y, "permute", {x}, [dims](const Tensor& dy, const GradMask&) {
    std::vector<int64_t> inv(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) inv[static_cast<size_t>(dims[i])] = static_cast<int64_t>(i);
    return std::vector<Tensor>{permute(dy, inv)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

Tensor transpose(const Tensor& x, int64_t d0, int64_t d1) {
  const int64_t nd = x.ndim();
  HG_CHECK(nd >= 1, "transpose: needs at least 1 dim, got a 0-d tensor");
  d0 = wrap_dim("transpose", d0, nd);
  d1 = wrap_dim("transpose", d1, nd);
  std::vector<int64_t> perm(static_cast<size_t>(nd));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(d0)], perm[static_cast<size_t>(d1)]);
  return permute(x, perm);
}

Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  HG_CHECK(x.ndim() >= 1, "slice: cannot slice a 0-d tensor");
  dim = wrap_dim("slice", dim, x.ndim());
  HG_CHECK(step > 0, "slice: step=", step, " must be positive");
  const int64_t n = x.shape()[dim];
  auto clampi = [n](int64_t i) { return std::min(std::max(i < 0 ? i + n : i, int64_t{0}), n); };
  start = clampi(start);
  end = std::max(clampi(end), start);
  const int64_t len = (end - start + step - 1) / step;
  const auto d = static_cast<size_t>(dim);
  return subset_view("slice", x, [d, start, len, step](Geometry g) {
    g.offset += start * g.strides[d];
    g.strides[d] *= step;
    g.sizes[d] = len;
    return g;
  });
}

Tensor as_strided(const Tensor& x, const Shape& sizes, std::vector<int64_t> strides, int64_t storage_offset) {
  HG_CHECK(static_cast<int64_t>(strides.size()) == sizes.ndim(), "as_strided: ", strides.size(), " strides for ",
           sizes.ndim(), " sizes; give one stride per dim");
  HG_CHECK(!autograd::should_record({&x}), "as_strided: not differentiable here (its gradient needs overlap "
           "handling); use it under NoGradGuard or on a detached tensor, or use the view ops");
  int64_t lo = storage_offset, hi = storage_offset;
  for (int64_t d = 0; d < sizes.ndim(); ++d) {
    HG_CHECK(sizes[d] >= 0, "as_strided: size ", sizes[d], " at dim ", d, " is negative");
    const int64_t reach = sizes[d] == 0 ? 0 : (sizes[d] - 1) * strides[static_cast<size_t>(d)];
    (reach < 0 ? lo : hi) += reach;
  }
  const int64_t cap = static_cast<int64_t>(x.unsafe_impl()->storage->nbytes / dtype_size(x.dtype()));
  HG_CHECK(sizes.numel() == 0 || (lo >= 0 && hi < cap), "as_strided: sizes ", sizes, ", strides ", Shape(strides),
           " and offset ", storage_offset, " reach elements [", lo, ", ", hi, "] outside the storage's ", cap);
  return view_of(x, {sizes.dims(), std::move(strides), storage_offset});
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  if (amp::OpCast c{amp::OpId::Cat, xs}) return c.result(cat(c.inputs(), dim));
  HG_CHECK(!xs.empty(), "cat: needs at least one tensor");
  const Tensor& x0 = xs[0];
  dim = wrap_dim("cat", dim, x0.ndim());
  HG_CHECK(x0.ndim() >= 1, "cat: cannot concatenate 0-d tensors; reshape them to 1-d");
  DType dt = x0.dtype();
  for (const Tensor& x : xs) dt = promote_types(dt, x.dtype());
  std::vector<int64_t> sizes = x0.shape().dims();
  sizes[static_cast<size_t>(dim)] = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const Tensor& x = xs[i];
    check_same_device("cat", x0, x);
    HG_CHECK(x.ndim() == x0.ndim(), "cat: tensor ", i, " has ", x.ndim(), " dims but tensor 0 has ", x0.ndim());
    for (int64_t d = 0; d < x.ndim(); ++d)
      HG_CHECK(d == dim || x.shape()[d] == x0.shape()[d], "cat: tensor ", i, " has shape ", x.shape(),
               " but tensor 0 has ", x0.shape(), "; all dims except dim ", dim, " must match");
    sizes[static_cast<size_t>(dim)] += x.shape()[dim];
  }
  Tensor y = empty(Shape(sizes), {.dtype = dt, .device = x0.device()});
  const auto dst_strides = contiguous_strides(y.shape());
  std::vector<Tensor> ins;
  int64_t at = 0;
  for (const Tensor& x_in : xs) {
    Tensor x = x_in.dtype() == dt ? x_in : x_in.to(dt);
    if (x.numel() > 0)
      copy_strided(x, 0, x.shape().dims(), x.strides(), y, at * dst_strides[static_cast<size_t>(dim)], dst_strides);
    at += x.shape()[dim];
    ins.push_back(x);
  }
  std::vector<int64_t> lens;
  for (const Tensor& x : ins) lens.push_back(x.shape()[dim]);
  autograd::record(y, "cat", ins, [dim, lens](const Tensor& dy, const GradMask& needs) {
    std::vector<Tensor> g(lens.size());
    int64_t s = 0;
    for (size_t i = 0; i < lens.size(); ++i) {
      if (needs[i]) g[i] = slice(dy, dim, s, s + lens[i]);
      s += lens[i];
    }
    return g;
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

Tensor clone(const Tensor& x) {
  Tensor y = empty_like(x);
  if (x.is_contiguous()) copy_bytes(y.data_ptr(), y.device(), x.data_ptr(), x.device(), x.nbytes());
  else copy_into(x, y);
  autograd::record(y, "clone", {x}, [](const Tensor& dy, const GradMask&) { return std::vector<Tensor>{dy}; },
                   autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

// Tensor members (declared in core/tensor.h).
Tensor Tensor::reshape(Shape s) const { return hg::reshape(*this, std::move(s)); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return hg::transpose(*this, d0, d1); }
Tensor Tensor::permute(std::vector<int64_t> dims) const { return hg::permute(*this, std::move(dims)); }
Tensor Tensor::slice(int64_t dim, int64_t start, int64_t end, int64_t step) const {
  return hg::slice(*this, dim, start, end, step);
}
Tensor Tensor::clone() const { return hg::clone(*this); }
Tensor Tensor::contiguous_copy() const { return hg::contiguous(*this); }
Tensor Tensor::view(Shape s) const { return hg::view(*this, std::move(s)); }
Tensor Tensor::as_strided(const Shape& sizes, std::vector<int64_t> strides, int64_t storage_offset) const {
  return hg::as_strided(*this, sizes, std::move(strides), storage_offset);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) {
  const int64_t nd = std::max<int64_t>(x.ndim(), 1);
  const int64_t s = wrap_dim("flatten", start_dim, nd), e = wrap_dim("flatten", end_dim, nd);
  HG_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim, " for shape ", x.shape());
  if (x.ndim() == 0) return reshape(x, {1});
  std::vector<int64_t> dims;
  int64_t merged = 1;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (d < s || d > e) dims.push_back(x.shape()[d]);
    else merged *= x.shape()[d];
    if (d == e) dims.push_back(merged);
  }
  return reshape(x, Shape(dims));
}

// ---- torch's spellings ----

Tensor unsqueeze(const Tensor& x, int64_t dim) {
  const int64_t n = x.ndim() + 1;
  HG_CHECK(dim >= -n && dim < n, "unsqueeze: dim ", dim, " is out of range for a ", x.ndim(), "-d tensor; use a dim in [",
           -n, ", ", n, ")");
  if (dim < 0) dim += n;
  if (x.is_contiguous()) {  // the common case, without the stride bookkeeping
    std::vector<int64_t> s = x.shape().dims();
    s.insert(s.begin() + dim, 1);
    return reshaping_view(x, Shape(std::move(s)), {});
  }
  Geometry g = geometry_of(x);
  const auto d = static_cast<size_t>(dim);
  const int64_t stride = d < g.sizes.size() ? g.sizes[d] * g.strides[d] : 1;
  g.sizes.insert(g.sizes.begin() + dim, 1);
  g.strides.insert(g.strides.begin() + dim, stride);
  return reshaping_view(x, g);
}

namespace {
// x without the size-1 dims `drop` marks
Tensor drop_unit_dims(const Tensor& x, const std::vector<char>& drop) {
  if (x.is_contiguous()) {
    std::vector<int64_t> s;
    for (size_t d = 0; d < drop.size(); ++d)
      if (!drop[d]) s.push_back(x.shape()[static_cast<int64_t>(d)]);
    return reshaping_view(x, Shape(std::move(s)), {});
  }
  const Geometry g = geometry_of(x);
  Geometry out{{}, {}, g.offset};
  for (size_t d = 0; d < g.sizes.size(); ++d)
    if (!drop[d]) {
      out.sizes.push_back(g.sizes[d]);
      out.strides.push_back(g.strides[d]);
    }
  return reshaping_view(x, out);
}
}  // namespace

Tensor squeeze(const Tensor& x) {
  std::vector<char> drop;
  for (int64_t d : x.shape()) drop.push_back(d == 1);
  return std::count(drop.begin(), drop.end(), 1) == 0 ? x : drop_unit_dims(x, drop);
}

Tensor squeeze(const Tensor& x, int64_t dim) {
  if (x.ndim() == 0) {
    HG_CHECK(dim == 0 || dim == -1, "squeeze: dim ", dim, " is out of range for a 0-d tensor; use 0 or -1");
    return x;
  }
  dim = wrap_dim("squeeze", dim, x.ndim());
  if (x.shape()[dim] != 1) return x;
  std::vector<char> drop(static_cast<size_t>(x.ndim()), 0);
  drop[static_cast<size_t>(dim)] = 1;
  return drop_unit_dims(x, drop);
}

Tensor select(const Tensor& x, int64_t dim, int64_t index) {
  HG_CHECK(x.ndim() >= 1, "select: cannot index a 0-d tensor");
  dim = wrap_dim("select", dim, x.ndim());
  const int64_t n = x.shape()[dim];
  HG_CHECK(index >= -n && index < n, "select: index ", index, " is out of range for dim ", dim, " of size ", n,
           " (shape ", x.shape(), "); use an index in [", -n, ", ", n, ")");
  if (index < 0) index += n;
  const auto d = static_cast<size_t>(dim);
  return subset_view("select", x, [d, index](Geometry g) {
    g.offset += index * g.strides[d];
    g.sizes.erase(g.sizes.begin() + static_cast<int64_t>(d));
    g.strides.erase(g.strides.begin() + static_cast<int64_t>(d));
    return g;
  });
}

Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length) {
  HG_CHECK(x.ndim() >= 1, "narrow: cannot narrow a 0-d tensor");
  dim = wrap_dim("narrow", dim, x.ndim());
  const int64_t n = x.shape()[dim];
  if (start < 0 && start >= -n) start += n;
  HG_CHECK(start >= 0 && length >= 0 && start + length <= n, "narrow: start ", start, " and length ", length,
           " do not fit dim ", dim, " of size ", n, " (shape ", x.shape(), "); need 0 <= start <= start + length <= ", n);
  return slice(x, dim, start, start + length);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  HG_CHECK(x.ndim() >= 1, "split: cannot split a 0-d tensor");
  dim = wrap_dim("split", dim, x.ndim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    HG_CHECK(s >= 0, "split: a size ", s, " is negative");
    total += s;
  }
  HG_CHECK(total == x.shape()[dim], "split: the sizes sum to ", total, " but dim ", dim, " has size ", x.shape()[dim],
           " (shape ", x.shape(), "); they must add up to it");
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(slice(x, dim, at, at + s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t dim) {
  HG_CHECK(x.ndim() >= 1, "split: cannot split a 0-d tensor");
  dim = wrap_dim("split", dim, x.ndim());
  const int64_t n = x.shape()[dim];
  HG_CHECK(split_size > 0 || (split_size == 0 && n == 0), "split: split_size=", split_size,
           " must be positive (dim ", dim, " has size ", n, ")");
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += split_size) sizes.push_back(std::min(split_size, n - at));
  if (sizes.empty()) sizes.push_back(0);  // torch: an empty dim gives one empty piece
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  HG_CHECK(chunks > 0, "chunk: chunks=", chunks, " must be positive");
  HG_CHECK(x.ndim() >= 1, "chunk: cannot chunk a 0-d tensor");
  const int64_t n = x.shape()[wrap_dim("chunk", dim, x.ndim())];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, n == 0 ? 0 : 1), dim);
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  HG_CHECK(!xs.empty(), "stack: needs at least one tensor");
  for (size_t k = 1; k < xs.size(); ++k)
    HG_CHECK(xs[k].shape() == xs[0].shape(), "stack: tensor ", k, " has shape ", xs[k].shape(), " but tensor 0 has ",
             xs[0].shape(), "; stack takes tensors of one shape");
  std::vector<Tensor> parts;
  for (const Tensor& t : xs) parts.push_back(unsqueeze(t, dim));
  return cat(parts, dim);
}

Tensor expand(const Tensor& x, const Shape& sizes) {
  const int64_t nd = sizes.ndim(), lead = nd - x.ndim();
  HG_CHECK(lead >= 0, "expand: ", nd, " sizes ", sizes, " are fewer than the tensor's ", x.ndim(), " dims (shape ",
           x.shape(), ")");
  std::vector<int64_t> out(static_cast<size_t>(nd)), strides(static_cast<size_t>(nd), 0);
  const auto st = x.strides();
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t want = sizes[d];
    if (d < lead) {
      HG_CHECK(want >= 0, "expand: size ", want, " at new leading dim ", d, " must be >= 0 (-1 only keeps an existing dim)");
      out[static_cast<size_t>(d)] = want;
      continue;
    }
    const int64_t have = x.shape()[d - lead];
    const int64_t size = want == -1 ? have : want;
    HG_CHECK(size == have || have == 1, "expand: dim ", d - lead, " of size ", have, " cannot become ", want,
             " (shape ", x.shape(), " to ", sizes, "); only size-1 dims expand");
    out[static_cast<size_t>(d)] = size;
    strides[static_cast<size_t>(d)] = have == 1 && size != 1 ? 0 : st[static_cast<size_t>(d - lead)];
  }
  Tensor y = view_of(x, {out, strides, x.storage_offset()});
  autograd::record(y, "expand", {x}, [xs = x.shape()](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{sum_to(dy, xs)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<char> flipped(static_cast<size_t>(x.ndim()), 0);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim("flip", d, x.ndim());
    HG_CHECK(!flipped[static_cast<size_t>(w)], "flip: dim ", d, " appears twice in the dims");
    flipped[static_cast<size_t>(w)] = 1;
  }
  const std::vector<int64_t> sizes = x.shape().dims();
  std::vector<int64_t> src_strides = x.strides();
  int64_t offset = 0;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (!flipped[d] || sizes[d] == 0) continue;
    offset += (sizes[d] - 1) * src_strides[d];  // start at the last element and walk back
    src_strides[d] = -src_strides[d];
  }
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  if (y.numel() > 0) copy_strided(x, offset, sizes, src_strides, y, 0, contiguous_strides(y.shape()));
  autograd::record(y, "flip", {x}, [dims](const Tensor& dy, const GradMask&) { return std::vector<Tensor>{flip(dy, dims)}; },
                   autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

Tensor roll(const Tensor& x, int64_t shifts, int64_t dim) {
  HG_CHECK(x.ndim() >= 1, "roll: cannot roll a 0-d tensor");
  dim = wrap_dim("roll", dim, x.ndim());
  const int64_t n = x.shape()[dim];
  if (n == 0) return clone(x);
  const int64_t s = ((shifts % n) + n) % n;
  if (s == 0) return clone(x);
  return cat({slice(x, dim, n - s, n), slice(x, dim, 0, n - s)}, dim);
}

Tensor repeat(const Tensor& x, const std::vector<int64_t>& reps) {
  const int64_t nd = static_cast<int64_t>(reps.size()), lead = nd - x.ndim();
  HG_CHECK(lead >= 0, "repeat: ", nd, " repeats are fewer than the tensor's ", x.ndim(), " dims (shape ", x.shape(),
           "); give one per dim");
  std::vector<int64_t> pairs, wide, out;  // x as (1, s0, 1, s1, ...), expanded to (r0, s0, r1, s1, ...)
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t r = reps[static_cast<size_t>(d)], size = d < lead ? 1 : x.shape()[d - lead];
    HG_CHECK(r >= 0, "repeat: repeat ", r, " at dim ", d, " must be >= 0");
    pairs.insert(pairs.end(), {1, size});
    wide.insert(wide.end(), {r, size});
    out.push_back(r * size);
  }
  return reshape(expand(reshape(x, Shape(pairs)), Shape(wide)), Shape(out));
}

Tensor triangle_mask(int64_t rows, int64_t cols, int64_t k, bool lower, TensorOptions o) {
  // column minus row, made on the device from two aranges (no rows x cols upload), compared with k
  const TensorOptions f64{.dtype = DType::F64, .device = o.device};
  const Tensor diff = sub(reshape(arange(cols, f64), {1, cols}), reshape(arange(rows, f64), {rows, 1}));
  return (lower ? le(diff, static_cast<double>(k)) : ge(diff, static_cast<double>(k))).to(o.dtype);
}

namespace {
Tensor triangle(const char* name, const Tensor& x, int64_t k, bool lower) {
  HG_CHECK(x.ndim() >= 2, name, ": needs at least 2 dims, got shape ", x.shape());
  if (x.dtype() == DType::I64) return triangle(name, x.to(DType::F64), k, lower).to(DType::I64);  // exact to 2^53
  const int64_t rows = x.shape()[x.ndim() - 2], cols = x.shape()[x.ndim() - 1];
  const Tensor mask = triangle_mask(rows, cols, k, lower, {.dtype = DType::F64, .device = x.device()});
  return where(mask, x, zeros({}, {.dtype = x.dtype(), .device = x.device()}));
}
}  // namespace

Tensor tril(const Tensor& x, int64_t k) { return triangle("tril", x, k, true); }
Tensor triu(const Tensor& x, int64_t k) { return triangle("triu", x, k, false); }

std::vector<Tensor> unbind(const Tensor& x, int64_t dim) {
  HG_CHECK(x.ndim() >= 1, "unbind: cannot unbind a 0-d tensor");
  dim = wrap_dim("unbind", dim, x.ndim());
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.shape()[dim]; ++i) out.push_back(select(x, dim, i));
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  check_same_device("masked_fill", x, mask);
  HG_CHECK(broadcast_shapes("masked_fill", x.shape(), mask.shape()) == x.shape(), "masked_fill: mask of shape ",
           mask.shape(), " does not broadcast to x's shape ", x.shape());
  return where(mask, full({}, value, {.dtype = x.dtype(), .device = x.device()}), x);
}

}  // namespace hg
