// batch_norm and layer_norm: check -> autocast -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op"). The
// kernels (cpu/norm.cpp, cuda/kernels/norm.cu, math in ops/norm_math.h) compute the statistics in
// F32 (F64 for F64) and write y in x's dtype; forward saves each group's mean and 1/std for backward,
// which computes dx, dweight and dbias in one kernel. weight, bias and the running statistics may have
// any floating dtype (F32 parameters with F16/BF16 x are the mixed-precision case): the kernels read
// them in the compute dtype, and the gradients come back in each parameter's own dtype.
#include "ops/norm.h"

#include "autograd/node.h"
#include "autograd/saved.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"
#include "ops/shape.h"
#include "core/allocator.h"
#include "ops/autocast/autocast.h"
#include "ops/kernels/norm.h"

namespace hg {

namespace {


DType compute_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

// An optional per-channel (or per-normalized-element) tensor: undefined, or floating with `shape` on x's device.
void check_param(const char* op, const char* name, const Tensor& p, const Shape& shape, const Tensor& x) {
  if (!p.defined()) return;
  check_floating(op, p);
  check_same_device(op, p, x);
  HG_CHECK(p.shape() == shape, op, ": ", name, " has shape ", p.shape(), " but x of shape ", x.shape(), " needs ",
           shape);
}

// What the kernels read: raw memory in the compute dtype, outside autograd (backward is recorded here).
Tensor as_compute(const Tensor& p, DType cdt) { return p.defined() ? p.detach().to(cdt).contiguous() : Tensor(); }
void* ptr(const Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }
Tensor buffer_if(bool want, const Shape& s, DType dt, Device dev) {
  return want ? empty(s, {.dtype = dt, .device = dev}) : Tensor();
}
// A parameter's gradient, computed in the compute dtype, in the parameter's dtype.
Tensor grad_as(const Tensor& g, DType dt) { return g.defined() ? g.to(dt) : Tensor(); }
DType dtype_or_f32(const Tensor& t) { return t.defined() ? t.dtype() : DType::F32; }

// A running statistic as the kernel's in-place buffer: the tensor itself when it has the compute dtype,
// else a converted copy that commit() rounds back into it. Never recorded: torch updates the running
// statistics outside autograd.
struct RunningStat {
  Tensor target, buf;
  RunningStat(const Tensor& r, DType cdt) : target(r.defined() ? r.detach() : Tensor()), buf(as_compute(r, cdt)) {}
  void commit() const {
    if (!buf.defined() || buf.unsafe_impl()->storage == target.unsafe_impl()->storage) return;
    copy_into(buf.to(target.dtype()), target);  // target may be a view
  }
};

// What forward saves for backward, and the gradients' buffers: both ops' Args have these fields.
struct Saved {
  Tensor x, w, mean, invstd;  // x detached; w in the compute dtype
  Shape param_shape;  // weight's and bias's
  DType wdt, bdt;
};

// Where a norm's statistics live, for its gradients in recorded ops: the dims each statistic reduces over, the
// shape that lines a parameter (or a saved statistic) up with x, and whether the statistics are x's own
// (training, layer_norm) or constants (batch_norm's running statistics in eval).
struct Layout {
  std::vector<int64_t> stat_dims = {};  // batch_norm: all but 1; layer_norm: the normalized (trailing) dims
  std::vector<int64_t> param_dims = {};  // the dims a parameter's gradient sums over
  Shape param_view;
  bool stats_from_x = true;
  double eps = 0;
};

// dx, dweight and dbias as recorded ops (backward under create_graph), in the compute dtype: the statistics
// recomputed from x (biased variance, as the kernels), so the second derivative sees how they depend on x.
// xhat = (x - mean) invstd, g = dy weight; dx = invstd (g - mean(g) - xhat mean(g xhat)) over the statistic's
// dims, or g invstd for constant statistics; dweight = sum(dy xhat), dbias = sum(dy) over the other dims.
std::vector<Tensor> norm_grads_ops(const Layout& l, const Tensor& x, const Tensor& weight, const Saved& sv,
                                   const Tensor& dy_in, const GradMask& needs) {
  const DType cdt = sv.mean.dtype();
  const Tensor xc = x.to(cdt), dy = dy_in.to(cdt);
  const ReduceOptions keep{.keepdim = true};
  Tensor mu, invstd;
  if (l.stats_from_x) {
    mu = mean(xc, l.stat_dims, keep);
    invstd = rsqrt(add(mean(pow(sub(xc, mu), 2.0), l.stat_dims, keep), l.eps));
  } else {
    mu = reshape(sv.mean, l.param_view);
    invstd = reshape(sv.invstd, l.param_view);
  }
  const Tensor xhat = mul(sub(xc, mu), invstd);
  const Tensor g = weight.defined() ? mul(dy, reshape(weight.to(cdt), l.param_view)) : dy;
  const auto over_params = [&](const Tensor& t) {
    return reshape(l.param_dims.empty() ? t : sum(t, l.param_dims), sv.param_shape);
  };
  std::vector<Tensor> out(3);
  if (needs[0]) {
    const Tensor dx = l.stats_from_x ? mul(invstd, sub(sub(g, mean(g, l.stat_dims, keep)),
                                                       mul(xhat, mean(mul(g, xhat), l.stat_dims, keep))))
                                     : mul(g, invstd);
    out[0] = dx.to(x.dtype());
  }
  if (needs[1]) out[1] = grad_as(over_params(mul(dy, xhat)), sv.wdt);
  if (needs[2]) out[2] = grad_as(over_params(dy), sv.bdt);
  return out;
}

// Records the backward of a norm: one kernel writes dx, dweight and dbias (each only when needed) from
// dy and the saved statistics; the parameters' gradients come back in their own dtypes.
template <class Args, class Kernel>
void record_norm(Tensor& y, const char* op, const Tensor& x, const Tensor& weight, const Tensor& bias,
                 const Args& shape, DispatchTable<Kernel>& table, Saved sv, Layout layout) {
  autograd::record(y, op, {x, weight, bias}, [shape, &table, sv, layout, sx = autograd::SavedTensor(x),
                                              sweight = autograd::SavedTensor(weight)](const Tensor& dy_in,
                                                                                       const GradMask& needs) {
    if (autograd::create_graph_active())
      return norm_grads_ops(layout, sx.unpack(), sweight.unpack(), sv, dy_in, needs);
    const Tensor dy = dy_in.to(sv.x.dtype());
    const Device dev = sv.x.device();
    const Tensor dx = buffer_if(needs[0], sv.x.shape(), sv.x.dtype(), dev);
    const Tensor dw = buffer_if(needs[1], sv.param_shape, sv.mean.dtype(), dev);
    const Tensor db = buffer_if(needs[2], sv.param_shape, sv.mean.dtype(), dev);
    Args g = shape;
    g.x = sv.x.data_ptr(), g.weight = ptr(sv.w), g.mean = sv.mean.data_ptr(), g.invstd = sv.invstd.data_ptr();
    g.dy = dy.data_ptr(), g.dx = ptr(dx), g.dweight = ptr(dw), g.dbias = ptr(db);
    table.get(dev, sv.x.dtype())(g);
    return std::vector<Tensor>{dx, grad_as(dw, sv.wdt), grad_as(db, sv.bdt)};
  }, autograd::Saves::only({0, 1}), autograd::DoubleBackward::Yes);  // x and weight; never the bias (nor the
                                                                      // running statistics: not inputs)
}

// torch's argument rules for batch_norm; returns S, the size of x's trailing dims (N,C,S).
int64_t check_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                         const Tensor& bias, const BatchNormFuncOptions& o) {
  check_floating("batch_norm", x);
  HG_CHECK(x.ndim() >= 2, "batch_norm: x has shape ", x.shape(), "; it must be (N,C) or (N,C,*)");
  const int64_t c = x.shape()[1];
  for (auto [name, p] : {std::pair{"running_mean", &running_mean}, std::pair{"running_var", &running_var},
                         std::pair{"weight", &weight}, std::pair{"bias", &bias}})
    check_param("batch_norm", name, *p, Shape{c}, x);
  if (o.training) {
    const int64_t per_channel = c > 0 ? x.numel() / c : 0;
    HG_CHECK(per_channel > 1, "batch_norm: expected more than 1 value per channel when training, got x of shape ",
             x.shape(), "; use a batch of more than one element or eval mode");
  } else {
    HG_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: eval mode normalises with the running statistics, but running_mean or running_var is "
             "undefined; pass them or use training mode");
  }
  int64_t s = 1;
  for (int64_t d = 2; d < x.ndim(); ++d) s *= x.shape()[d];
  return s;
}

// torch's argument rules for layer_norm.
void check_layer_norm(const Tensor& x, const Shape& ns, const Tensor& weight, const Tensor& bias) {
  check_floating("layer_norm", x);
  const int64_t nd = ns.ndim();
  bool match = nd >= 1 && nd <= x.ndim();
  for (int64_t i = 0; match && i < nd; ++i) match = x.shape()[x.ndim() - nd + i] == ns[i];
  HG_CHECK(match, "layer_norm: normalized_shape ", ns, " is not the trailing shape of x ", x.shape(),
           "; pass the last dims of x (e.g. {", x.ndim() ? x.shape()[x.ndim() - 1] : 0, "})");
  check_param("layer_norm", "weight", weight, ns, x);
  check_param("layer_norm", "bias", bias, ns, x);
}

}  // namespace

// x is (N,C,*) viewed as (N,C,S); running_mean/var, weight, bias are (C) or undefined; y is x's shape.
Tensor batch_norm(const Tensor& x_in, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormFuncOptions o) {
  // The running statistics are updated in place: they are never cast (a cast copy would take the update).
  if (amp::OpCast c{amp::OpId::BatchNorm, {x_in, weight, bias}})
    return c.result(batch_norm(c[0], running_mean, running_var, c[1], c[2], o));
  const Tensor x = x_in.contiguous();
  const int64_t s = check_batch_norm(x, running_mean, running_var, weight, bias, o);
  const int64_t c = x.shape()[1];
  const DType cdt = compute_dtype(x.dtype());
  const TensorOptions stat{.dtype = cdt, .device = x.device()};
  const Tensor w = as_compute(weight, cdt), b = as_compute(bias, cdt), mean = empty({c}, stat), invstd = empty({c}, stat);
  const RunningStat rm(running_mean, cdt), rv(running_var, cdt);
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  const BatchNormArgs shape{.n = x.shape()[0], .c = c, .s = s, .training = o.training};
  BatchNormArgs a = shape;
  a.eps = o.eps, a.momentum = o.momentum, a.x = x.data_ptr(), a.weight = ptr(w), a.bias = ptr(b), a.y = y.data_ptr();
  a.mean = mean.data_ptr(), a.invstd = invstd.data_ptr(), a.running_mean = ptr(rm.buf), a.running_var = ptr(rv.buf);
  batch_norm_forward_kernels().get(x.device(), x.dtype())(a);
  if (o.training) {
    rm.commit();
    rv.commit();
  }
  std::vector<int64_t> view(static_cast<size_t>(x.ndim() - 1), 1);
  view[0] = c;  // (C, 1, ...): lines up with x's dim 1
  Layout l{.param_view = Shape(view), .stats_from_x = o.training, .eps = o.eps};
  for (int64_t d = 0; d < x.ndim(); ++d)
    if (d != 1) l.stat_dims.push_back(d);
  l.param_dims = l.stat_dims;
  record_norm(y, "batch_norm", x, weight, bias, shape, batch_norm_backward_kernels(),
              {x.detach(), w, mean, invstd, Shape{c}, dtype_or_f32(weight), dtype_or_f32(bias)}, l);
  return y;
}

// x is (*, normalized_shape) viewed as (rows, k); weight and bias have normalized_shape or are undefined.
Tensor layer_norm(const Tensor& x_in, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                  const Tensor& bias, LayerNormFuncOptions o) {
  if (amp::OpCast c{amp::OpId::LayerNorm, {x_in, weight, bias}})
    return c.result(layer_norm(c[0], normalized_shape, c[1], c[2], o));
  const Tensor x = x_in.contiguous();
  const Shape ns(normalized_shape);
  check_layer_norm(x, ns, weight, bias);
  const int64_t k = ns.numel(), rows = k > 0 ? x.numel() / k : 0;
  const DType cdt = compute_dtype(x.dtype());
  const TensorOptions stat{.dtype = cdt, .device = x.device()};
  const Tensor w = as_compute(weight, cdt), b = as_compute(bias, cdt), mean = empty({rows}, stat),
               invstd = empty({rows}, stat);
  Tensor y = empty(x.shape(), {.dtype = x.dtype(), .device = x.device()});
  const LayerNormArgs shape{.rows = rows, .k = k};
  LayerNormArgs a = shape;
  a.eps = o.eps, a.x = x.data_ptr(), a.weight = ptr(w), a.bias = ptr(b), a.y = y.data_ptr();
  a.mean = mean.data_ptr(), a.invstd = invstd.data_ptr();
  layer_norm_forward_kernels().get(x.device(), x.dtype())(a);
  Layout l{.param_view = ns, .eps = o.eps};
  for (int64_t d = 0; d < x.ndim(); ++d) (d < x.ndim() - ns.ndim() ? l.param_dims : l.stat_dims).push_back(d);
  record_norm(y, "layer_norm", x, weight, bias, shape, layer_norm_backward_kernels(),
              {x.detach(), w, mean, invstd, ns, dtype_or_f32(weight), dtype_or_f32(bias)}, l);
  return y;
}

}  // namespace hg
