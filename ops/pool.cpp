// Pooling ops: check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op"). The window math lives in
// ops/pool_math.h; here only torch's argument rules and shapes. Max pooling saves the flat index of
// each window's maximum (I64, like torch's return_indices) for its backward.
#include "ops/pool.h"

#include "autograd/node.h"
#include "ops/autocast/autocast.h"
#include "ops/elementwise.h"
#include "ops/kernels/pool.h"
#include "ops/shape.h"

namespace hg {
namespace {


// x as (N,C,H,W): a 3-D (C,H,W) input is a batch of one.
Tensor as_batched(const char* op, const Tensor& x) {
  check_floating(op, x);
  HG_CHECK(x.ndim() == 3 || x.ndim() == 4, op, ": x has shape ", x.shape(),
           "; it must be 4-D (N,C,H,W) or 3-D (C,H,W)");
  const Shape& s = x.shape();
  return (x.ndim() == 4 ? x : x.reshape({1, s[0], s[1], s[2]})).contiguous();  // the kernels read dense planes
}

void check_at_least(const char* op, const char* what, Size2 v, int64_t min, const char* fix) {
  HG_CHECK(v.h >= min && v.w >= min, op, ": ", what, "=(", v.h, ", ", v.w, ") must be >= ", min, "; ", fix);
}

// torch's rules for a windowed pool, and its geometry (dilation 1 for avg pooling).
PoolGeom window_geom(const char* op, PoolKind kind, const Shape& s, const Pool2dOptions& o) {
  const Size2 k = o.kernel_size;
  const Size2 st{o.stride.h == 0 ? k.h : o.stride.h, o.stride.w == 0 ? k.w : o.stride.w};
  check_at_least(op, "kernel_size", k, 1, "pass e.g. .kernel_size = 2 for 2x2 windows");
  check_at_least(op, "stride", st, 1, "0 (the default) means stride = kernel_size");
  check_at_least(op, "padding", o.padding, 0, "padding cannot be negative");
  check_at_least(op, "dilation", o.dilation, 1, "pass .dilation = 1 for dense windows");
  HG_CHECK(kind == PoolKind::Max || o.dilation == Size2(1), op, ": dilation=(", o.dilation.h, ", ", o.dilation.w,
           ") is not supported (torch's avg_pool2d has none); leave .dilation = 1");
  HG_CHECK(o.padding.h <= k.h / 2 && o.padding.w <= k.w / 2, op, ": padding=(", o.padding.h, ", ", o.padding.w,
           ") must be at most half of kernel_size=(", k.h, ", ", k.w,
           ") (as in torch: every window must overlap the input); pad less or use a larger kernel");
  const int64_t oh = pool_out_size(s[2], k.h, st.h, o.padding.h, o.dilation.h, o.ceil_mode);
  const int64_t ow = pool_out_size(s[3], k.w, st.w, o.padding.w, o.dilation.w, o.ceil_mode);
  HG_CHECK(oh >= 1 && ow >= 1, op, ": x of shape ", s, " gives an output of ", oh, "x", ow, " for kernel_size=(",
           k.h, ", ", k.w, "), stride=(", st.h, ", ", st.w, "), padding=(", o.padding.h, ", ", o.padding.w,
           "), dilation=(", o.dilation.h, ", ", o.dilation.w, "); the input is smaller than one window");
  return {.kind = kind,
          .h = {.in = s[2], .out = oh, .k = k.h, .s = st.h, .p = o.padding.h, .d = o.dilation.h},
          .w = {.in = s[3], .out = ow, .k = k.w, .s = st.w, .p = o.padding.w, .d = o.dilation.w},
          .count_include_pad = o.count_include_pad};
}

int64_t* index_ptr(const Tensor& idx) {
  return idx.defined() ? static_cast<int64_t*>(idx.data_ptr()) : nullptr;
}

Tensor pool_forward(const char* op, const Tensor& x, const PoolGeom& g);

// The pool's backward: dy spread over the windows (avg) or routed to each window's maximum at idx (max), as
// (N,C,H,W); op names the forward. Linear in dy and recorded, so create_graph differentiates through it: its own gradient is the pool
// applied to the incoming gradient (avg), or that gradient read at the maxima's positions (max, the gather
// transposing the routing).
Tensor pool_transpose(const char* op, const Tensor& dy_in, const PoolGeom& g, const Shape& xs, const Tensor& idx) {
  const Tensor dy = dy_in.contiguous();
  const int64_t planes = xs[0] * xs[1];
  Tensor dx = empty(xs, {.dtype = dy.dtype(), .device = dy.device()});
  if (dx.numel() > 0)
    pool2d_backward_kernels().get(dy.device(), dy.dtype())(
        {.g = g, .planes = planes, .indices = index_ptr(idx), .dy = dy.data_ptr(), .dx = dx.data_ptr()});
  const char* name = g.kind == PoolKind::Max   ? "max_pool2d_backward"
                     : g.kind == PoolKind::Avg ? "avg_pool2d_backward"
                                               : "adaptive_avg_pool2d_backward";
  autograd::record(dx, name, {dy}, [op, g, xs, ys = dy.shape(), idx](const Tensor& gx, const GradMask&) {
    if (g.kind != PoolKind::Max) return std::vector<Tensor>{pool_forward(op, gx.contiguous(), g)};
    // a window that covers no input (padding and dilation allow it) has index -1 and passed nothing on: 0 there
    const Tensor at = reshape(idx, {ys[0] * ys[1], -1});
    const Tensor picked = gather(reshape(gx, {xs[0] * xs[1], xs[2] * xs[3]}), 1, clamp(at, 0.0, static_cast<double>(xs[2] * xs[3] - 1)));
    return std::vector<Tensor>{reshape(where(lt(at, 0.0), zeros({}, {.dtype = gx.dtype(), .device = gx.device()}), picked), ys)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);  // reads only the indices
  return dx;
}

// Runs the pool described by g on x (4-D, dense) and records its backward.
Tensor pool_forward(const char* op, const Tensor& x, const PoolGeom& g) {
  const Shape& s = x.shape();
  const TensorOptions opts{.dtype = x.dtype(), .device = x.device()};
  Tensor y = empty({s[0], s[1], g.h.out, g.w.out}, opts);
  const Tensor idx = g.kind == PoolKind::Max ? empty(y.shape(), {.dtype = DType::I64, .device = x.device()}) : Tensor();
  if (y.numel() > 0)
    pool2d_forward_kernels().get(x.device(), x.dtype())(
        {.g = g, .planes = s[0] * s[1], .x = x.data_ptr(), .y = y.data_ptr(), .indices = index_ptr(idx)});
  autograd::record(y, op, {x}, [op, g, xs = s, idx](const Tensor& dy, const GradMask&) {
    return std::vector<Tensor>{pool_transpose(op, dy, g, xs, idx)};
  }, autograd::Saves::none(), autograd::DoubleBackward::Yes);  // reads only the indices it made
  return y;
}

// The pool of x (3-D or 4-D, as the caller got it; `x` is its dense 4-D form).
Tensor pool(const char* op, const Tensor& x_in, const Tensor& x, const PoolGeom& g) {
  const Tensor y = pool_forward(op, x, g);
  return x_in.ndim() == 3 ? y.reshape({x.shape()[1], g.h.out, g.w.out}) : y;
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, Pool2dOptions o) {
  if (amp::OpCast c{amp::OpId::MaxPool2d, {x_in}}) return c.result(max_pool2d(c[0], o));
  const Tensor x = as_batched("max_pool2d", x_in);
  return pool("max_pool2d", x_in, x, window_geom("max_pool2d", PoolKind::Max, x.shape(), o));
}

Tensor avg_pool2d(const Tensor& x_in, Pool2dOptions o) {
  if (amp::OpCast c{amp::OpId::AvgPool2d, {x_in}}) return c.result(avg_pool2d(c[0], o));
  const Tensor x = as_batched("avg_pool2d", x_in);
  return pool("avg_pool2d", x_in, x, window_geom("avg_pool2d", PoolKind::Avg, x.shape(), o));
}

Tensor adaptive_avg_pool2d(const Tensor& x_in, Size2 output_size) {
  if (amp::OpCast c{amp::OpId::AdaptiveAvgPool2d, {x_in}})
    return c.result(adaptive_avg_pool2d(c[0], output_size));
  const char* op = "adaptive_avg_pool2d";
  const Tensor x = as_batched(op, x_in);
  const Shape& s = x.shape();
  check_at_least(op, "output_size", output_size, 1, "pass e.g. output_size = 1 for global average pooling");
  HG_CHECK(s[2] >= 1 && s[3] >= 1, op, ": x has shape ", s, "; its height and width must be >= 1");
  const PoolGeom g{.kind = PoolKind::AdaptiveAvg, .h = {.in = s[2], .out = output_size.h},
                   .w = {.in = s[3], .out = output_size.w}};
  return pool(op, x_in, x, g);
}

}  // namespace hg
