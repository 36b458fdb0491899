// batch_norm and layer_norm, composed from differentiable reductions and elementwise ops in F32 (F64
// for F64), so autograd derives the standard backward (training: through the batch mean and variance;
// eval: the affine map with the running statistics as constants) and every backend runs them. The
// output is cast back to x's dtype; weight/bias may be F32 with F16/BF16 x.
#include "ops/norm.h"

#include "amp/autocast.h"
#include "autograd/node.h"
#include "core/allocator.h"
#include "ops/elementwise.h"
#include "ops/reduce.h"

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

// (x - mean) / sqrt(var + eps) over dims, with the biased variance (torch normalises with it); returns
// the batch mean and biased variance (keepdim) too.
struct Normalized {
  Tensor y, mean, var;
};
Normalized normalize(const Tensor& xc, const std::vector<int64_t>& dims, double eps) {
  const Tensor mu = mean(xc, dims, {.keepdim = true});
  const Tensor d = sub(xc, mu);
  const Tensor var = mean(mul(d, d), dims, {.keepdim = true});
  return {mul(d, rsqrt(add(var, eps))), mu, var};
}

Tensor affine(Tensor y, const Tensor& weight, const Tensor& bias, const Shape& shape) {
  if (weight.defined()) y = mul(y, weight.to(y.dtype()).reshape(shape));
  if (bias.defined()) y = add(y, bias.to(y.dtype()).reshape(shape));
  return y;
}

// running = (1 - momentum) running + momentum batch, in place and outside autograd (torch's
// running-stat update); the batch variance enters unbiased.
void update_running(const Tensor& running, const Tensor& batch, double momentum) {
  NoGradGuard no_grad;
  const Tensor r = running.detach();
  const Tensor next = add(mul(r.to(batch.dtype()), 1.0 - momentum), mul(batch.reshape(r.shape()), momentum));
  const Tensor cast = next.to(r.dtype());
  copy_bytes(r.data_ptr(), r.device(), cast.data_ptr(), cast.device(), r.nbytes());
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, BatchNormOptions o) {
  // The running statistics are updated in place: they are never cast (a cast copy would take the update).
  if (amp::OpCast c{amp::Op::BatchNorm, {x, weight, bias}})
    return c.result(batch_norm(c[0], running_mean, running_var, c[1], c[2], o));
  check_floating("batch_norm", x);
  HG_CHECK(x.ndim() >= 2, "batch_norm: x has shape ", x.shape(), "; it must be (N,C) or (N,C,*)");
  const int64_t c = x.shape()[1];
  for (auto [name, p] : {std::pair{"running_mean", &running_mean}, std::pair{"running_var", &running_var},
                         std::pair{"weight", &weight}, std::pair{"bias", &bias}})
    check_param("batch_norm", name, *p, Shape{c}, x);
  std::vector<int64_t> dims{0}, cshape(static_cast<size_t>(x.ndim()), 1);
  for (int64_t d = 2; d < x.ndim(); ++d) dims.push_back(d);
  cshape[1] = c;
  const Tensor xc = x.to(compute_dtype(x.dtype()));
  Tensor y;
  if (o.training) {
    const int64_t n = c > 0 ? x.numel() / c : 0;
    HG_CHECK(n > 1, "batch_norm: expected more than 1 value per channel when training, got x of shape ", x.shape(),
             "; use a batch of more than one element or eval mode");
    const Normalized nz = normalize(xc, dims, o.eps);
    y = nz.y;
    if (running_mean.defined()) update_running(running_mean, nz.mean.detach(), o.momentum);
    if (running_var.defined())
      update_running(running_var, mul(nz.var.detach(), double(n) / double(n - 1)), o.momentum);
  } else {
    HG_CHECK(running_mean.defined() && running_var.defined(),
             "batch_norm: eval mode normalises with the running statistics, but running_mean or running_var is "
             "undefined; pass them or use training mode");
    const Tensor mu = running_mean.detach().to(xc.dtype()).reshape(Shape(cshape));
    const Tensor var = running_var.detach().to(xc.dtype()).reshape(Shape(cshape));
    y = mul(sub(xc, mu), rsqrt(add(var, o.eps)));
  }
  return affine(y, weight, bias, Shape(cshape)).to(x.dtype());
}

Tensor layer_norm(const Tensor& x, const std::vector<int64_t>& normalized_shape, const Tensor& weight,
                  const Tensor& bias, LayerNormOptions o) {
  if (amp::OpCast c{amp::Op::LayerNorm, {x, weight, bias}})
    return c.result(layer_norm(c[0], normalized_shape, c[1], c[2], o));
  check_floating("layer_norm", x);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  const Shape ns(normalized_shape);
  bool match = k >= 1 && k <= x.ndim();
  for (int64_t i = 0; match && i < k; ++i) match = x.shape()[x.ndim() - k + i] == ns[i];
  HG_CHECK(match, "layer_norm: normalized_shape ", ns, " is not the trailing shape of x ", x.shape(),
           "; pass the last dims of x (e.g. {", x.ndim() ? x.shape()[x.ndim() - 1] : 0, "})");
  check_param("layer_norm", "weight", weight, ns, x);
  check_param("layer_norm", "bias", bias, ns, x);
  std::vector<int64_t> dims;
  for (int64_t d = x.ndim() - k; d < x.ndim(); ++d) dims.push_back(d);
  const Normalized nz = normalize(x.to(compute_dtype(x.dtype())), dims, o.eps);
  return affine(nz.y, weight, bias, ns).to(x.dtype());
}

}  // namespace hg
