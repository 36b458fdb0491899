// Clipping runs through optim/update.h's tables (a norm kernel and an in-place transform), so it
// writes into the gradients' own buffers on any device.
#include "optim/clip.h"

#include <cmath>

#include "autograd/node.h"
#include "optim/update.h"

namespace hg::optim {
namespace {

// The sum of |g|^p (or max |g|) of one gradient, in double.
double grad_norm_term(const Tensor& g, double norm_type) {
  double acc = 0;
  GradNormArgs a{.n = g.numel(), .grad = g.data_ptr(), .norm_type = norm_type, .result = &acc};
  if (g.device().is_cpu()) {
    grad_norm_kernels().get(g.device(), g.dtype())(a);
    return acc;
  }
  Tensor r = zeros({1}, {.dtype = DType::F64, .device = g.device()});  // the kernel adds into device memory
  a.result = static_cast<double*>(r.data_ptr());
  grad_norm_kernels().get(g.device(), g.dtype())(a);
  return r.item<double>();
}

void transform_grads(const std::vector<Tensor>& grads, GradTransform op, double value) {
  for (const Tensor& g : grads) {
    const GradTransformArgs a{.n = g.numel(), .grad = g.data_ptr(), .op = op, .value = value};
    grad_transform_kernels().get(g.device(), g.dtype())(a);
  }
}

std::vector<Tensor> defined_grads(const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (g.defined()) grads.push_back(std::move(g));
  }
  return grads;
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  HG_CHECK(norm_type > 0, "clip_grad_norm_: norm_type=", norm_type, "; use a p > 0 (2 for the Euclidean norm) or "
           "infinity for the max norm");
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params);
  const bool inf = std::isinf(norm_type);
  double acc = 0;
  for (const Tensor& g : grads) {
    const double t = grad_norm_term(g, norm_type);
    acc = inf ? nan_max(acc, t) : acc + t;
  }
  const double total = inf ? acc : (norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type));
  const double coef = max_norm / (total + 1e-6);
  if (!(coef >= 1.0)) transform_grads(grads, GradTransform::Scale, coef);  // torch clamps coef to <= 1; NaN scales
  return total;
}

double clip_grad_norm_(Optimizer& opt, double max_norm, double norm_type) {
  HG_CHECK(norm_type > 0, "clip_grad_norm_: norm_type=", norm_type, "; use a p > 0 (2 for the Euclidean norm) or "
           "infinity for the max norm");
  NoGradGuard no_grad;
  const std::vector<Tensor> params = opt.parameters();
  const bool inf = std::isinf(norm_type);
  double acc = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    const double f = opt.has_grad_scale(i) ? std::fabs(opt.grad_scale(i)) : 1.0;  // |f g|^p = |f|^p |g|^p
    const double t = grad_norm_term(g, norm_type);
    acc = inf ? nan_max(acc, f * t) : acc + (f == 1.0 ? t : std::pow(f, norm_type) * t);
  }
  const double total = inf ? acc : (norm_type == 2.0 ? std::sqrt(acc) : std::pow(acc, 1.0 / norm_type));
  const double coef = max_norm / (total + 1e-6);
  if (coef >= 1.0) return total;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined()) continue;
    // still scaled: fold the clip into the pending factor (its host part on the device path)
    if (opt.has_grad_scale(i)) opt.mul_grad_scale(i, coef);
    else transform_grads({g}, GradTransform::Scale, coef);
  }
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  HG_CHECK(clip_value >= 0, "clip_grad_value_: clip_value=", clip_value, "; it must be >= 0");
  NoGradGuard no_grad;
  transform_grads(defined_grads(params), GradTransform::Clamp, clip_value);
}

}  // namespace hg::optim
