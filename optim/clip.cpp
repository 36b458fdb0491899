// Clipping runs through optim/update.h's tables (a norm kernel, a kernel for the factor, an in-place
// transform), so it writes into the gradients' own buffers on any device. The norm and the factor stay
// on the gradients' device: nothing is read back until a caller asks for the norm as a double, so the
// *_tensor_ forms can be captured in a CUDA graph.
#include "optim/clip.h"

#include <cmath>

#include "autograd/node.h"
#include "optim/update.h"

namespace hg::optim {
namespace {

void check_norm_type(double norm_type) {
  HG_CHECK(norm_type > 0, "clip_grad_norm_: norm_type=", norm_type, "; use a p > 0 (2 for the Euclidean norm) or "
           "infinity for the max norm");
}

// F64 (3) on the gradients' device: the sum of every gradient's weighted |g|^p (or the max |g|), the
// total norm, and the factor clip_coef makes of it. scales[k] is gradient k's pending factor.
Tensor norm_and_factor(const std::vector<Tensor>& grads, const std::vector<Optimizer::PendingScale>& scales,
                       double norm_type, double max_norm) {
  const Device dev = grads.front().device();
  for (const Tensor& g : grads)
    HG_CHECK(g.device() == dev, "clip_grad_norm_: gradients on ", dev, " and on ", g.device(),
             "; clip the parameters of each device with their own call");
  Tensor buf = zeros({3}, {.dtype = DType::F64, .device = dev});
  auto* acc = static_cast<double*>(buf.data_ptr());
  for (size_t k = 0; k < grads.size(); ++k) {
    const Optimizer::PendingScale f = k < scales.size() ? scales[k] : Optimizer::PendingScale{};
    grad_norm_kernels().get(dev, grads[k].dtype())({.n = grads[k].numel(),
                                                     .grad = grads[k].data_ptr(),
                                                     .norm_type = norm_type,
                                                     .result = acc,
                                                     .device_scale = f.device,
                                                     .host_scale = f.host});
  }
  clip_coef_kernels().get(dev, DType::F64)({.acc = acc, .norm_type = norm_type, .max_norm = max_norm, .out = acc + 1});
  return buf;
}

// g *= the factor in buf: read on the host for a CPU gradient (which a factor of exactly 1 leaves alone),
// by the kernel on a device.
void scale_grad(const Tensor& g, const Tensor& buf) {
  const auto* coef = static_cast<const double*>(buf.data_ptr()) + 2;
  GradTransformArgs a{.n = g.numel(), .grad = g.data_ptr(), .op = GradTransform::Scale};
  if (g.device().is_cpu()) {
    if (*coef == 1.0) return;
    a.value = *coef;
  } else {
    a.device_value = coef;
  }
  grad_transform_kernels().get(g.device(), g.dtype())(a);
}

// The total norm, a 0-d F64 tensor on buf's device (a copy: buf is the clipping's own).
Tensor total_of(const Tensor& buf) { return buf.slice(0, 1, 2).reshape({}); }

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

Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  check_norm_type(norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> grads = defined_grads(params);
  if (grads.empty()) return zeros({}, {.dtype = DType::F64});
  const Tensor buf = norm_and_factor(grads, {}, norm_type, max_norm);
  for (const Tensor& g : grads) scale_grad(g, buf);
  return total_of(buf);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  return clip_grad_norm_tensor_(params, max_norm, norm_type).item<double>();
}

Tensor clip_grad_norm_tensor_(Optimizer& opt, double max_norm, double norm_type) {
  check_norm_type(norm_type);
  NoGradGuard no_grad;
  const std::vector<Tensor> params = opt.parameters();
  std::vector<Tensor> grads;
  std::vector<Optimizer::PendingScale> scales;
  std::vector<size_t> index;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    grads.push_back(std::move(g));
    scales.push_back(opt.pending_grad_scale(i));  // |f g|^p = |f|^p |g|^p: weighed by the norm kernel
    index.push_back(i);
  }
  if (grads.empty()) return zeros({}, {.dtype = DType::F64});
  const Tensor buf = norm_and_factor(grads, scales, norm_type, max_norm);
  const auto* coef = static_cast<const double*>(buf.data_ptr()) + 2;
  for (size_t k = 0; k < grads.size(); ++k) {
    if (!opt.has_grad_scale(index[k])) {
      scale_grad(grads[k], buf);
    } else if (grads[k].device().is_cpu()) {  // still scaled: fold the clip into the pending factor
      if (*coef != 1.0) opt.mul_grad_scale(index[k], *coef);
    } else {
      opt.set_device_clip(index[k], coef, buf);  // read by the update kernel
    }
  }
  return total_of(buf);
}

double clip_grad_norm_(Optimizer& opt, double max_norm, double norm_type) {
  return clip_grad_norm_tensor_(opt, max_norm, norm_type).item<double>();
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  HG_CHECK(clip_value >= 0, "clip_grad_value_: clip_value=", clip_value, "; it must be >= 0");
  NoGradGuard no_grad;
  for (const Tensor& g : defined_grads(params)) {
    grad_transform_kernels().get(g.device(), g.dtype())(
        {.n = g.numel(), .grad = g.data_ptr(), .op = GradTransform::Clamp, .value = clip_value});
  }
}

}  // namespace hg::optim
