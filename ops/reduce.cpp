// Reductions and softmax: check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op"). Kernels see a
// contiguous (outer, r, inner) view; reduced dims that are not adjacent are first permuted to the
// end (one copy) so every reduction is a single kernel call that rounds once.
#include "ops/reduce.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <string>
#include <utility>

#include "autograd/node.h"
#include "autograd/saved.h"
#include "ops/autocast/autocast.h"
#include "ops/dispatch.h"
#include "ops/elementwise.h"
#include "ops/kernels/reduce.h"
#include "ops/shape.h"

namespace hg {
namespace {

// mask[d] != 0 for every reduced dim of an ndim-d tensor; empty dims means all dims.
std::vector<char> reduce_mask(const char* op, int64_t ndim, const std::vector<int64_t>& dims) {
  std::vector<char> mask(static_cast<size_t>(ndim), dims.empty() ? 1 : 0);
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op, d, ndim);
    if (ndim == 0) continue;  // dim 0 (or -1) of a 0-d tensor is the tensor itself, as in torch
    HG_CHECK(!mask[static_cast<size_t>(w)], op, ": dim ", w, " appears more than once in dims; list each dim once");
    mask[static_cast<size_t>(w)] = 1;
  }
  return mask;
}

// x's shape with the reduced dims set to 1 (keepdim) or removed.
Shape reduced_shape(const Shape& s, const std::vector<char>& mask, bool keepdim) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < s.ndim(); ++d) {
    if (!mask[static_cast<size_t>(d)]) out.push_back(s[d]);
    else if (keepdim) out.push_back(1);
  }
  return Shape(out);
}

int64_t reduced_count(const Shape& s, const std::vector<char>& mask) {
  int64_t n = 1;
  for (int64_t d = 0; d < s.ndim(); ++d)
    if (mask[static_cast<size_t>(d)]) n *= s[d];
  return n;
}

struct View3 {
  int64_t outer = 1, r = 1, inner = 1;
};

// The (outer, r, inner) view when the reduced dims are adjacent (size-1 dims may sit anywhere);
// false when a kept dim of size > 1 lies between two reduced ones.
bool adjacent_view(const Shape& s, const std::vector<char>& mask, View3& v) {
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < s.ndim(); ++d)
    if (mask[static_cast<size_t>(d)] && s[d] != 1) {
      if (first < 0) first = d;
      last = d;
    }
  for (int64_t d = first + 1; d < last; ++d)
    if (!mask[static_cast<size_t>(d)] && s[d] != 1) return false;
  v = View3{};
  for (int64_t d = 0; d < s.ndim(); ++d) {
    if (first >= 0 && d >= first && d <= last) v.r *= s[d];
    else if (first < 0 || d < first) v.outer *= s[d];
    else v.inner *= s[d];
  }
  return true;
}

// Runs the reduce kernel; the result has the keepdim shape. indices (I64, same shape) when asked.
Tensor reduce_raw(const Tensor& x_in, ReduceOp op, const std::vector<char>& mask, bool is_mean,
                  Tensor* indices = nullptr) {
  Tensor x = x_in.detach();
  View3 v;
  if (!adjacent_view(x.shape(), mask, v)) {  // move the reduced dims to the end: one copy, one rounding
    std::vector<int64_t> perm;
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t d = 0; d < x.ndim(); ++d)
        if (static_cast<bool>(mask[static_cast<size_t>(d)]) == (pass == 1)) perm.push_back(d);
    x = permute(x, perm);
    v = View3{reduced_shape(x_in.shape(), mask, false).numel(), reduced_count(x_in.shape(), mask), 1};
  }
  x = x.contiguous();  // a view (the permute above, or the caller's) is copied once
  Tensor y = empty(reduced_shape(x_in.shape(), mask, true), {.dtype = x.dtype(), .device = x.device()});
  ReduceArgs a{.op = op, .outer = v.outer, .r = v.r, .inner = v.inner, .scale = is_mean ? 1.0 / double(v.r) : 1.0,
               .x = x.data_ptr(), .out = y.data_ptr()};
  if (indices) {
    *indices = empty(y.shape(), {.dtype = DType::I64, .device = x.device()});
    a.indices = static_cast<int64_t*>(indices->data_ptr());
  }
  reduce_kernels().get(x.device(), x.dtype())(a);
  return y;
}

// dy (the reduced shape) broadcast back to x's shape and multiplied by scale.
Tensor expand_scaled(const Tensor& dy, const Shape& keep_shape, const Shape& x_shape, double scale) {
  if (autograd::create_graph_active()) return mul(expand(dy.reshape(keep_shape), x_shape), scale);  // recorded
  Tensor dx = empty(x_shape, {.dtype = dy.dtype(), .device = dy.device()});
  run_elementwise("sum backward", {EwOp::MulScalar, EwMode::Forward, scale}, {dy.reshape(keep_shape)}, dx);
  return dx;
}

Tensor sum_mean(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim, bool is_mean) {
  // Bool and I64: through F64 (exact to 2^53); a sum is I64 as torch's, a mean F32 (torch refuses these means;
  // halfgrad gives (pred == y).mean(), the accuracy)
  if (x.defined() && is_integral(x.dtype()))
    return sum_mean(op, x.to(DType::F64), dims, keepdim, is_mean).to(is_mean ? DType::F32 : DType::I64);
  check_floating(op, x);
  const std::vector<char> mask = reduce_mask(op, x.ndim(), dims);
  const Tensor yk = reduce_raw(x, ReduceOp::Sum, mask, is_mean);
  Tensor y = keepdim ? yk : alias_with_shape(yk, reduced_shape(x.shape(), mask, false));
  const double scale = is_mean ? 1.0 / double(reduced_count(x.shape(), mask)) : 1.0;
  autograd::record(y, op, {x}, [xs = x.shape(), ks = yk.shape(), scale](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{expand_scaled(dy, ks, xs, scale)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return y;
}

// 0, 1, ..., n-1 in F64 on dev, made once per (n, device) and kept (read only): on a GPU making it is
// a copy from the host that waits, which a step captured after a warm-up must not do.
Tensor positions(int64_t n, Device dev) {
  static std::mutex m;
  static auto* cache = new std::map<std::pair<int64_t, std::string>, Tensor>;  // outlives static destructors
  if (dev.is_cpu()) return arange(0.0, double(n), 1.0, {.dtype = DType::F64});
  std::lock_guard<std::mutex> lock(m);
  Tensor& t = (*cache)[{n, dev.str()}];
  if (!t.defined()) t = arange(0.0, double(n), 1.0, {.dtype = DType::F64, .device = dev});
  return t;
}

// dy (keepdim shape) routed to the position idx along dim, zeros elsewhere: the backward of max/min
// with dim. An index mask compared in F64 (exact for any length, F16 is not past 2048) keeps this on
// the elementwise engine, so it runs on every backend.
Tensor route_to_index(const Tensor& dy_keep, const Tensor& idx_keep, const Shape& xs, int64_t dim) {
  if (dy_keep.numel() == xs.numel()) return dy_keep.reshape(xs);  // a dim of size 1: nothing to route
  std::vector<int64_t> ps(static_cast<size_t>(xs.ndim()), 1);
  ps[static_cast<size_t>(dim)] = xs[dim];
  const Tensor pos = positions(xs[dim], dy_keep.device());
  const Tensor hit = eq(pos.reshape(Shape(ps)), idx_keep.to(DType::F64));
  return where(hit, dy_keep, zeros({}, {.dtype = dy_keep.dtype(), .device = dy_keep.device()}));
}

// I64 and Bool tensors (no gradient) reduce through F64, exact for magnitudes below 2^53, and their values come
// back in their own dtype, as torch's max/min/argmax of integers and booleans.
bool integral(const Tensor& x) { return x.defined() && is_integral(x.dtype()); }

ValuesIndices extreme_dim(const char* op, ReduceOp rop, const Tensor& x, int64_t dim, bool keepdim) {
  if (integral(x)) {
    const ValuesIndices r = extreme_dim(op, rop, x.to(DType::F64), dim, keepdim);
    return {r.values.to(x.dtype()), r.indices};
  }
  check_floating(op, x);
  const int64_t d = wrap_dim(op, dim, x.ndim());
  HG_CHECK(x.ndim() == 0 || x.shape()[d] > 0, op, ": cannot reduce over dim ", d, " of size 0 (shape ", x.shape(),
           "); the ", op, " of no elements is undefined");
  const std::vector<char> mask = reduce_mask(op, x.ndim(), {d});
  Tensor idx;
  const Tensor vk = reduce_raw(x, rop, mask, false, &idx);
  const Shape out = reduced_shape(x.shape(), mask, keepdim);
  ValuesIndices res{keepdim ? vk : alias_with_shape(vk, out), keepdim ? idx : alias_with_shape(idx, out)};
  autograd::record(res.values, op, {x}, [xs = x.shape(), ks = vk.shape(), idx, d](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{route_to_index(dy.reshape(ks), idx, xs, d)};  // recorded ops, a constant index
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);
  return res;
}

// The all-reduce max/min. Backward splits dy evenly among tied extremes, as torch.max() does (its
// evenly_distribute_backward), where a NaN result ties with every NaN input.
Tensor extreme_all(const char* op, ReduceOp rop, const Tensor& x) {
  if (integral(x)) return extreme_all(op, rop, x.to(DType::F64)).to(x.dtype());
  check_floating(op, x);
  HG_CHECK(x.numel() > 0, op, ": cannot reduce an empty tensor (shape ", x.shape(), "); the ", op,
           " of no elements is undefined");
  const std::vector<char> all(static_cast<size_t>(x.ndim()), 1);
  Tensor y = alias_with_shape(reduce_raw(x, rop, all, false), Shape{});
  autograd::record(y, op, {x}, [xd = x.detach(), yd = y.detach()](const Tensor& dy, const GradMask&) {
    const DType ct = xd.dtype() == DType::F64 ? DType::F64 : DType::F32;  // an exact tie count
    const Tensor hit = add(detail::eq_values(xd, yd), mul(detail::ne_values(xd, xd), detail::ne_values(yd, yd)));  // never both
    const Tensor share = div(dy.to(ct), sum(hit.to(ct))).to(xd.dtype());
    return std::vector<Tensor>{mul(hit, share)};  // recorded ops; the tie mask is constant (its derivative is 0)
  }, autograd::Saves::only({0}, true), autograd::DoubleBackward::Yes);
  return y;
}

Tensor softmax_impl(const char* op, bool log, const Tensor& x_in, int64_t dim) {
  check_floating(op, x_in);
  const Tensor x = x_in.contiguous();
  const int64_t d = wrap_dim(op, dim, x.ndim());
  View3 v;  // a 0-d tensor is one row of one element
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (i < d) v.outer *= x.shape()[i];
    else if (i == d) v.r = x.shape()[i];
    else v.inner *= x.shape()[i];
  }
  Tensor y = empty_like(x);
  if (x.numel() > 0)
    softmax_kernels().get(x.device(), x.dtype())(
        {.log = log, .outer = v.outer, .r = v.r, .inner = v.inner, .x = x.data_ptr(), .y = y.data_ptr()});
  autograd::record(y, op, {x}, [yd = y.detach(), log, v, d](const Tensor& dy, const GradMask&) {
    if (autograd::create_graph_active()) {  // recorded: softmax y (dy - sum(dy y)), log_softmax dy - e^y sum(dy)
      const Tensor y = autograd::saved_output(yd);
      return std::vector<Tensor>{log ? sub(dy, mul(exp(y), sum(dy, {d}, {.keepdim = true})))
                                     : mul(y, sub(dy, sum(mul(dy, y), {d}, {.keepdim = true})))};
    }
    Tensor dx = empty_like(dy);
    if (dy.numel() > 0)
      softmax_backward_kernels().get(dy.device(), dy.dtype())({.log = log, .outer = v.outer, .r = v.r, .inner = v.inner,
                                                               .y = yd.data_ptr(), .dy = dy.data_ptr(),
                                                               .dx = dx.data_ptr()});
    return std::vector<Tensor>{dx};
  }, autograd::Saves::output_only(), autograd::DoubleBackward::Yes);
  return y;
}

}  // namespace

Tensor sum(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Sum, {x}}) return c.result(sum(c[0]));
  return sum_mean("sum", x, {}, false, false);
}
Tensor sum(const Tensor& x, std::vector<int64_t> dims, ReduceOptions o) {
  if (amp::OpCast c{amp::OpId::Sum, {x}}) return c.result(sum(c[0], std::move(dims), o));
  return sum_mean("sum", x, dims, o.keepdim, false);
}
// mean of no elements is NaN (0 * 1/0), as in torch.
Tensor mean(const Tensor& x) {
  if (amp::OpCast c{amp::OpId::Mean, {x}}) return c.result(mean(c[0]));
  return sum_mean("mean", x, {}, false, true);
}
Tensor mean(const Tensor& x, std::vector<int64_t> dims, ReduceOptions o) {
  if (amp::OpCast c{amp::OpId::Mean, {x}}) return c.result(mean(c[0], std::move(dims), o));
  return sum_mean("mean", x, dims, o.keepdim, true);
}

ValuesIndices max(const Tensor& x, int64_t dim, ReduceOptions o) { return extreme_dim("max", ReduceOp::Max, x, dim, o.keepdim); }
ValuesIndices min(const Tensor& x, int64_t dim, ReduceOptions o) { return extreme_dim("min", ReduceOp::Min, x, dim, o.keepdim); }
Tensor max(const Tensor& x) { return extreme_all("max", ReduceOp::Max, x); }
Tensor min(const Tensor& x) { return extreme_all("min", ReduceOp::Min, x); }

namespace {
// argmax/argmin over the flattened tensor: an I64 0-d index, the first extreme (a NaN wins)
Tensor arg_extreme_all(const char* name, ReduceOp op, const Tensor& x) {
  if (integral(x)) return arg_extreme_all(name, op, x.to(DType::F64));
  check_floating(name, x);
  HG_CHECK(x.numel() > 0, name, ": cannot reduce an empty tensor (shape ", x.shape(), "); it has no ",
           op == ReduceOp::Max ? "maximum" : "minimum");
  Tensor idx;
  reduce_raw(x, op, std::vector<char>(static_cast<size_t>(x.ndim()), 1), false, &idx);
  return alias_with_shape(idx, Shape{});
}
}  // namespace

Tensor argmax(const Tensor& x, int64_t dim, ReduceOptions o) {
  NoGradGuard no_grad;
  return extreme_dim("argmax", ReduceOp::Max, x, dim, o.keepdim).indices;
}
Tensor argmax(const Tensor& x) { return arg_extreme_all("argmax", ReduceOp::Max, x); }
Tensor argmin(const Tensor& x, int64_t dim, ReduceOptions o) {
  NoGradGuard no_grad;
  return extreme_dim("argmin", ReduceOp::Min, x, dim, o.keepdim).indices;
}
Tensor argmin(const Tensor& x) { return arg_extreme_all("argmin", ReduceOp::Min, x); }

Tensor norm(const Tensor& x) {
  check_floating("norm", x);
  const DType acc = x.dtype() == DType::F64 ? DType::F64 : DType::F32;
  Tensor y;
  {
    NoGradGuard no_grad;
    const Tensor xa = x.dtype() == acc ? x : x.to(acc);
    y = sqrt(sum(mul(xa, xa)));
    if (y.dtype() != x.dtype()) y = y.to(x.dtype());
  }
  // (y as a detached alias: capturing y itself would make a reference cycle)
  autograd::record(y, "norm", {x}, [sx = autograd::SavedTensor(x), yd = y.detach(), acc](const Tensor& dy,
                                                                                          const GradMask&) {
    const Tensor x = sx.unpack();
    // x * (dy / norm), and 0 where the norm is 0 (the subgradient torch picks); in recorded ops, the norm attached
    // to this node under create_graph (its dependence on x is part of the second derivative)
    const Tensor n = autograd::saved_output(yd).to(acc);
    const Tensor f = where(eq(n, 0.0), zeros({}, {.dtype = acc, .device = n.device()}), div(dy.to(acc), n));
    Tensor dx = mul(x.to(acc), f);
    return std::vector<Tensor>{dx.dtype() == x.dtype() ? dx : dx.to(x.dtype())};
  }, autograd::Saves{0b1, true}, autograd::DoubleBackward::Yes);
  return y;
}

// Composed from differentiable ops in F32 (F64 for F64) so F16/BF16 data does not lose the small
// squared deviations. N - correction <= 0 divides by 0 like torch: inf, or NaN where the sum is 0.
Tensor var(const Tensor& x, std::vector<int64_t> dims, VarOptions o) {
  if (amp::OpCast c{amp::OpId::Var, {x}}) return c.result(var(c[0], std::move(dims), o));
  check_floating("var", x);
  const std::vector<char> mask = reduce_mask("var", x.ndim(), dims);
  const int64_t n = reduced_count(x.shape(), mask);
  const Tensor xc = x.to(x.dtype() == DType::F64 ? DType::F64 : DType::F32);
  const Tensor dev = sub(xc, mean(xc, dims, {.keepdim = true}));
  const Tensor ss = sum(mul(dev, dev), dims, {.keepdim = o.keepdim});
  return div(ss, double(std::max<int64_t>(0, n - o.correction))).to(x.dtype());
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.ndim() - shape.ndim();
  HG_CHECK(lead >= 0, "sum_to: cannot sum shape ", x.shape(), " to ", shape, " which has more dims");
  std::vector<int64_t> dims(static_cast<size_t>(lead));
  std::iota(dims.begin(), dims.end(), int64_t{0});
  for (int64_t i = 0; i < shape.ndim(); ++i) {
    const int64_t xd = x.shape()[lead + i];
    HG_CHECK(shape[i] == xd || shape[i] == 1, "sum_to: cannot sum shape ", x.shape(), " to ", shape, ": dim ", i,
             " is ", shape[i], " but the tensor has ", xd, " (only sizes 1 or equal sizes reduce)");
    if (shape[i] == 1 && xd != 1) dims.push_back(lead + i);
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims).reshape(shape);
}

Tensor softmax(const Tensor& x, int64_t dim) {
  if (amp::OpCast c{amp::OpId::Softmax, {x}}) return c.result(softmax(c[0], dim));
  return softmax_impl("softmax", false, x, dim);
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (amp::OpCast c{amp::OpId::LogSoftmax, {x}}) return c.result(log_softmax(c[0], dim));
  return softmax_impl("log_softmax", true, x, dim);
}

}  // namespace hg
