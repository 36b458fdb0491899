// conv2d: check -> dispatch -> record backward (docs/ARCHITECTURE.md, "One op"). The kernels see one ConvArgs problem:
// forward, backward-data (dx) and backward-weight (dw and db in one pass over dy).
#include "ops/conv.h"

#include "autograd/node.h"
#include "autograd/saved.h"
#include "ops/autocast/autocast.h"
#include "ops/kernels/conv.h"
#include "ops/reduce.h"

namespace hg {
namespace {


void check_at_least(const char* what, Size2 v, int64_t min, const char* fix) {
  HG_CHECK(v.h >= min && v.w >= min, "conv2d: ", what, "=(", v.h, ", ", v.w, ") must be >= ", min, "; ", fix);
}

void check_options(const Conv2dFuncOptions& o) {
  check_at_least("stride", o.stride, 1, "pass .stride = 1 for a dense convolution");
  check_at_least("dilation", o.dilation, 1, "pass .dilation = 1 for an undilated kernel");
  check_at_least("padding", o.padding, 0, "padding adds zeros around x and cannot be negative");
  HG_CHECK(o.groups >= 1, "conv2d: groups=", o.groups, " must be >= 1; pass .groups = 1 for a dense convolution");
}

void check_shapes(const Tensor& x, const Tensor& w, const Tensor& b, int64_t groups) {
  HG_CHECK(x.ndim() == 4, "conv2d: x has shape ", x.shape(), "; it must be 4-D (N,C,H,W) or 3-D (C,H,W)");
  HG_CHECK(w.ndim() == 4, "conv2d: w has shape ", w.shape(), "; it must be 4-D (K,C/groups,R,S)");
  const int64_t c = x.shape()[1], k = w.shape()[0];
  HG_CHECK(c > 0 && k > 0, "conv2d: x has C=", c, " channels and w has K=", k, " filters; both must be > 0");
  HG_CHECK(c % groups == 0, "conv2d: x has C=", c, " channels, which groups=", groups,
           " does not divide; use a groups value that divides C");
  HG_CHECK(k % groups == 0, "conv2d: w has K=", k, " filters, which groups=", groups,
           " does not divide; use a groups value that divides K");
  HG_CHECK(w.shape()[1] == c / groups, "conv2d: w.shape[1]=", w.shape()[1], " but x has C=", c, " channels in ",
           groups, " group(s), so w.shape[1] must be C/groups=", c / groups, " (w is ", w.shape(), ", x is ",
           x.shape(), ")");
  HG_CHECK(!b.defined() || (b.ndim() == 1 && b.shape()[0] == k), "conv2d: b has shape ", b.shape(),
           " but w has K=", k, " filters; b must be (", k, ") or undefined");
}

// Output size along one axis, as torch: (in + 2*pad - dil*(r-1) - 1) / stride + 1.
int64_t out_size(const char* axis, int64_t in, int64_t r, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t extent = dil * (r - 1) + 1;
  HG_CHECK(in + 2 * pad >= extent, "conv2d: the padded input ", axis, "=", in, "+2*", pad, "=", in + 2 * pad,
           " is smaller than the dilated kernel ", axis, "=", extent, " (kernel ", r, ", dilation ", dil,
           "); pad more, or use a smaller kernel or dilation");
  return (in + 2 * pad - extent) / stride + 1;
}

// The problem's sizes (pointers stay null; each pass fills its own).
ConvArgs resolve(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dFuncOptions& o) {
  check_options(o);
  check_shapes(x, w, b, o.groups);
  ConvArgs a{.dtype = x.dtype(), .n = x.shape()[0], .c = x.shape()[1], .h = x.shape()[2], .w = x.shape()[3],
             .k = w.shape()[0], .r = w.shape()[2], .s = w.shape()[3],
             .stride_h = o.stride.h, .stride_w = o.stride.w, .pad_h = o.padding.h, .pad_w = o.padding.w,
             .dil_h = o.dilation.h, .dil_w = o.dilation.w, .groups = o.groups};
  a.oh = out_size("height", a.h, a.r, a.stride_h, a.pad_h, a.dil_h);
  a.ow = out_size("width", a.w, a.s, a.stride_w, a.pad_w, a.dil_w);
  return a;
}

Tensor grad_x(ConvArgs a, const Tensor& w, const Tensor& dy) {
  Tensor dx = empty({a.n, a.c, a.h, a.w}, {.dtype = dy.dtype(), .device = dy.device()});
  if (dx.numel() == 0) return dx;
  a.wt = w.data_ptr(), a.dy = dy.data_ptr(), a.dx = dx.data_ptr();
  conv2d_backward_data_kernels().get(dy.device(), dy.dtype())(a);
  return dx;
}

// dw (and db in the same pass when both are wanted); db alone is a plain sum of dy.
std::pair<Tensor, Tensor> grad_w_b(ConvArgs a, const Tensor& x, const Tensor& dy, bool want_w, bool want_b) {
  if (!want_w) return {Tensor(), want_b ? sum(dy, {0, 2, 3}) : Tensor()};
  const TensorOptions opts{.dtype = dy.dtype(), .device = dy.device()};
  Tensor dw = empty({a.k, a.c / a.groups, a.r, a.s}, opts);
  Tensor db = want_b ? empty({a.k}, opts) : Tensor();
  a.x = x.data_ptr(), a.dy = dy.data_ptr(), a.dw = dw.data_ptr(), a.db = want_b ? db.data_ptr() : nullptr;
  conv2d_backward_weight_kernels().get(dy.device(), dy.dtype())(a);
  return {dw, db};
}

// conv2d's gradients as recorded ops, so that create_graph differentiates them: both are bilinear, and with
// <dx(dy, w), a> = <dy, conv2d(a, w)> and <dw(x, dy), b> = <dy, conv2d(x, b)> their own gradients are conv2d and
// each other. The kernels are the first-order backward's.
Tensor input_grad(const ConvArgs& p, const Conv2dFuncOptions& o, const Tensor& dy, const Tensor& w);

Tensor weight_grad(const ConvArgs& p, const Conv2dFuncOptions& o, const Tensor& x, const Tensor& dy) {
  Tensor dw = grad_w_b(p, x.contiguous(), dy.contiguous(), true, false).first;
  autograd::record(dw, "conv2d_weight_backward", {x, dy}, [p, o, sx = autograd::SavedTensor(x),
                                                          sdy = autograd::SavedTensor(dy)](const Tensor& g,
                                                                                           const GradMask& needs) {
    return std::vector<Tensor>{needs[0] ? input_grad(p, o, sdy.unpack(), g) : Tensor(),
                               needs[1] ? conv2d(sx.unpack(), g, Tensor(), o) : Tensor()};
  }, autograd::Saves{}, autograd::DoubleBackward::Yes);
  return dw;
}

Tensor input_grad(const ConvArgs& p, const Conv2dFuncOptions& o, const Tensor& dy, const Tensor& w) {
  Tensor dx = grad_x(p, w.contiguous(), dy.contiguous());
  autograd::record(dx, "conv2d_input_backward", {dy, w}, [p, o, sdy = autograd::SavedTensor(dy),
                                                         sw = autograd::SavedTensor(w)](const Tensor& g,
                                                                                        const GradMask& needs) {
    return std::vector<Tensor>{needs[0] ? conv2d(g, sw.unpack(), Tensor(), o) : Tensor(),
                               needs[1] ? weight_grad(p, o, g, sdy.unpack()) : Tensor()};
  }, autograd::Saves{}, autograd::DoubleBackward::Yes);
  return dx;
}

// x, w and b (when defined) cast to their common dtype, differentiably (as matmul promotes).
DType common_dtype(const Tensor& x, const Tensor& w, const Tensor& b) {
  check_floating("conv2d", x);
  check_floating("conv2d", w);
  check_same_device("conv2d", x, w);
  DType dt = promote_types(x.dtype(), w.dtype());
  if (b.defined()) {
    check_floating("conv2d", b);
    check_same_device("conv2d", x, b);
    dt = promote_types(dt, b.dtype());
  }
  return dt;
}

// t in dt and contiguous (the kernels read dense NCHW memory), differentiably
Tensor cast_to(const Tensor& t, DType dt) { return !t.defined() ? t : (t.dtype() == dt ? t : t.to(dt)).contiguous(); }

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, Conv2dFuncOptions o) {
  if (amp::OpCast c{amp::OpId::Conv2d, {x_in, w_in, b_in}}) return c.result(conv2d(c[0], c[1], c[2], o));
  if (x_in.ndim() == 3) {  // unbatched (C,H,W), as torch: a batch of one
    const Shape s = x_in.shape();
    const Tensor y = conv2d(x_in.reshape({1, s[0], s[1], s[2]}), w_in, b_in, o);
    return y.reshape({y.shape()[1], y.shape()[2], y.shape()[3]});
  }
  const DType dt = common_dtype(x_in, w_in, b_in);
  const Tensor x = cast_to(x_in, dt), w = cast_to(w_in, dt), b = cast_to(b_in, dt);
  const ConvArgs p = resolve(x, w, b, o);
  Tensor y = empty({p.n, p.k, p.oh, p.ow}, {.dtype = dt, .device = x.device()});
  if (y.numel() > 0) {
    ConvArgs f = p;
    f.x = x.data_ptr(), f.wt = w.data_ptr(), f.b = b.defined() ? b.data_ptr() : nullptr, f.y = y.data_ptr();
    conv2d_forward_kernels().get(x.device(), dt)(f);
  }
  autograd::record(y, "conv2d", {x, w, b}, [p, o, sx = autograd::SavedTensor(x),
                                            sw = autograd::SavedTensor(w)](const Tensor& dy, const GradMask& needs) {
    if (autograd::create_graph_active())  // recorded ops: the gradients are differentiated again
      return std::vector<Tensor>{needs[0] ? input_grad(p, o, dy, sw.unpack()) : Tensor(),
                                 needs[1] ? weight_grad(p, o, sx.unpack(), dy) : Tensor(),
                                 needs[2] ? sum(dy, {0, 2, 3}) : Tensor()};
    auto [dw, db] = grad_w_b(p, sx.data(), dy, needs[1], needs[2]);  // dw and db in one pass
    return std::vector<Tensor>{needs[0] ? grad_x(p, sw.data(), dy) : Tensor(), dw, db};
  }, autograd::Saves::only({0, 1}), autograd::DoubleBackward::Yes);
  return y;
}

}  // namespace hg
