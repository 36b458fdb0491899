// Clipping runs through ops/kernels/optim.h's tables (a norm kernel, a kernel for the factor, an in-place
// transform), so it writes into the gradients' own buffers on any device. The norm and the factor stay
// on the gradients' device: nothing is read back until a caller asks for the norm as a double, so the
// *_tensor_ forms can be captured in a CUDA graph.
#include "optim/clip.h"

#include <cmath>
#include <vector>

#include "autograd/node.h"
#include "dist/dist.h"
#include "ops/kernels/optim.h"

namespace hg::optim {
namespace {

void check_norm_type(double norm_type) {
  HG_CHECK(norm_type > 0, "clip_grad_norm_: norm_type=", norm_type, "; use a p > 0 (2 for the Euclidean norm) or "
           "infinity for the max norm");
}

// F64 (3) on the gradients' device: the sum of every gradient's weighted |g|^p (or the max |g|), the
// total norm, and the factor clip_coef makes of it. unscale[k] is the factor gradient k still carries.
// across_ranks: the gradients are this rank's part of a process group's (ZeRO's sharded gradients), the sum (or
// max) is taken over the ranks before the norm; a rank without gradients adds 0.
Tensor norm_and_factor(const std::vector<Tensor>& grads, const std::vector<GradUnscale>& unscale, double norm_type,
                       double max_norm, bool across_ranks) {
  const Device dev = grads.empty() ? Device::cpu() : grads.front().device();
  for (const Tensor& g : grads)
    HG_CHECK(g.device() == dev, "clip_grad_norm_: gradients on ", dev, " and on ", g.device(),
             "; clip the parameters of each device with their own call");
  Tensor buf = zeros({3}, {.dtype = DType::F64, .device = dev});
  auto* acc = static_cast<double*>(buf.data_ptr());
  // one kernel call per run of gradients of one dtype (one launch on a GPU); runs, not groups, so that the
  // CPU adds the gradients' sums in their order whatever their dtypes
  BatchedCalls<GradNormArgs> calls;
  for (size_t k = 0; k < grads.size(); ++k) {
    const GradUnscale& f = unscale[k];
    HG_CHECK(f.clip == nullptr, "clip_grad_norm_: this gradient, still scaled by the grad scaler, "
             "was already clipped on the device in this step; clip once between scaler.unscale_ and scaler.step");
    // |f g|^p = |f|^p |g|^p: the norm kernel weighs a still-scaled gradient by its factor
    calls.add(dev, grads[k].dtype(),
              {.n = grads[k].numel(),
               .grad = grads[k].data_ptr(),
               .norm_type = norm_type,
               .result = acc,
               .inv_scale = f.inv_scale,
               .host = f.host});
  }
  calls.run_consecutive(grad_norm_kernels());
  if (across_ranks)
    dist::all_reduce(buf.narrow(0, 0, 1), std::isinf(norm_type) ? dist::ReduceOp::Max : dist::ReduceOp::Sum);
  clip_coef_kernels().get(dev, DType::F64)({.acc = acc, .norm_type = norm_type, .max_norm = max_norm, .out = acc + 1});
  return buf;
}

// g *= the factor in buf: read on the host for a CPU gradient (which a factor of exactly 1 leaves alone),
// by the kernel on a device (collected in `calls`). A gradient the grad scaler left scaled keeps its values:
// the factor joins its GradUnscale, which the update applies.
void scale_grad(const Tensor& param, const Tensor& g, GradUnscale unscale, const Tensor& buf,
                BatchedCalls<GradTransformArgs>& calls) {
  const auto* coef = static_cast<const double*>(buf.data_ptr()) + 2;
  if (unscale.pending()) {
    if (!g.device().is_cpu()) {
      unscale.clip = coef;  // read by the update kernel
      unscale.clip_memory = buf;
    } else {
      unscale.host *= *coef;  // in double, as the device path forms host * inv_scale * clip
    }
    param.set_grad_unscale(unscale);
    return;
  }
  GradTransformArgs a{.n = g.numel(), .grad = g.data_ptr(), .op = GradTransform::Scale};
  if (g.device().is_cpu()) {
    if (*coef == 1.0) return;
    a.value = *coef;
  } else {
    a.device_value = coef;
  }
  calls.add(g.device(), g.dtype(), a);
}

// The total norm, a 0-d F64 tensor on buf's device (a copy: buf is the clipping's own).
Tensor total_of(const Tensor& buf) { return buf.slice(0, 1, 2).reshape({}); }

// The parameters with a defined gradient, their gradients and the factor each still carries.
struct Grads {
  std::vector<Tensor> params, grads;
  std::vector<GradUnscale> unscale;
};
Grads defined_grads(const std::vector<Tensor>& params) {
  Grads out;
  for (const Tensor& p : params) {
    if (!p.defined()) continue;
    Tensor g = p.grad();
    if (!g.defined()) continue;
    out.params.push_back(p);
    out.grads.push_back(std::move(g));
    out.unscale.push_back(p.grad_unscale());
  }
  return out;
}

Tensor clip(const std::vector<Tensor>& params, double max_norm, double norm_type, bool across_ranks) {
  check_norm_type(norm_type);
  NoGradGuard no_grad;
  Grads g = defined_grads(params);
  if (g.grads.empty() && !across_ranks) return zeros({}, {.dtype = DType::F64});
  const Tensor buf = norm_and_factor(g.grads, g.unscale, norm_type, max_norm, across_ranks);
  BatchedCalls<GradTransformArgs> calls;  // one launch per dtype on a GPU
  for (size_t k = 0; k < g.grads.size(); ++k) scale_grad(g.params[k], g.grads[k], g.unscale[k], buf, calls);
  calls.run(grad_transform_kernels());
  return total_of(buf);
}

}  // namespace

Tensor clip_grad_norm_tensor_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  return clip(params, max_norm, norm_type, false);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  return clip_grad_norm_tensor_(params, max_norm, norm_type).item<double>();
}

Tensor clip_grad_norm_tensor_(const Optimizer& opt, double max_norm, double norm_type) {
  return clip(opt.parameters(), max_norm, norm_type, opt.gradients_sharded());
}

double clip_grad_norm_(const Optimizer& opt, double max_norm, double norm_type) {
  return clip_grad_norm_tensor_(opt, max_norm, norm_type).item<double>();
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  HG_CHECK(clip_value >= 0, "clip_grad_value_: clip_value=", clip_value, "; it must be >= 0");
  NoGradGuard no_grad;
  const Grads g = defined_grads(params);
  BatchedCalls<GradTransformArgs> calls;  // one launch per device and dtype on a GPU
  for (size_t k = 0; k < g.grads.size(); ++k) {
    const Tensor& grad = g.grads[k];
    double bound = clip_value;
    if (const GradUnscale& f = g.unscale[k]; f.pending()) {
      // clamp(s g, -c, c) = s clamp(g, -c/s, c/s) for the factor s > 0: the bound moves, the values stay scaled
      HG_CHECK(f.inv_scale == nullptr && f.clip == nullptr, "clip_grad_value_: a gradient on ", grad.device(),
               " is still scaled by the grad scaler's device path (an F16 gradient after scaler.unscale_), and its "
               "factor lives on the device; clip by norm (clip_grad_norm_), or clip before mixed precision");
      bound = clip_value / f.host;
    }
    calls.add(grad.device(), grad.dtype(),
              {.n = grad.numel(), .grad = grad.data_ptr(), .op = GradTransform::Clamp, .value = bound});
  }
  calls.run(grad_transform_kernels());
}

}  // namespace hg::optim
