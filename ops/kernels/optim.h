#pragma once
// The per-element math of the optimizer updates and of gradient clipping, written once as HG_HD
// functors (docs/ARCHITECTURE.md, Principles 3) and called by the CPU loops (cpu/optim.cpp) and the CUDA kernels
// (cuda/kernels/optim.cu); then the kernels' argument structs and their dispatch tables.
//
// The formulas are torch 1.13's non-fused single-tensor ones (torch/optim/sgd.py, adam.py, adamw.py)
// in their operation order. Every scalar (1 - beta1, lr / bias_correction1, ...) is derived in double
// on the host, as torch does with Python floats, and rounded once to the compute type C: float for
// F32/F16/BF16 parameters, double for F64. Each operation then rounds in C.
//
// Buffers: the parameter and its gradient have the parameter's dtype T; the optimizer state (momentum
// buffer, moments) has dtype C. A parameter stored in F16/BF16 may come with an F32 master copy: the
// update then reads and writes the master and rounds it into the parameter (docs/ARCHITECTURE.md, Principles 6).
// `unscale` (1 unless the grad scaler left an F16 gradient scaled: autograd/grad_unscale.h) multiplies the
// gradient in C before anything else, so unscaling costs no extra pass over memory.
//
// The grad scaler's device path (DeviceStep below) hands the kernels pointers instead of values: the
// kernel reads found_inf and leaves everything untouched when it is set, multiplies the gradient by a
// device-resident inv_scale (1/scale), and derives Adam's bias corrections from a device-resident step
// counter that only advances when the step was taken (torch's fused optimizers). The scalars are then
// derived on the device by the same HG_HD functions the host uses (sgd_scalars_for, adam_scalars_for).
#include <math.h>

#include <cstdint>

#include "core/dispatch_table.h"
#include "core/macros.h"
#include "core/stochastic_round.h"
#include "ops/functors.h"

namespace hg::optim {

// ---- SGD (torch.optim.SGD) --------------------------------------------------------------------

struct SgdScalars {
  double lr = 0;
  double momentum = 0;  // 0: no momentum buffer
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the buffer was just created: torch sets it to the gradient, undamped
  double unscale = 1;       // the gradient is multiplied by it first: the host part of its GradUnscale
};

template <class C>
struct SgdUpdate {
  C neg_lr, momentum, keep, weight_decay, unscale;  // keep = 1 - dampening
  bool use_momentum, nesterov, first_step;

  HG_HD explicit SgdUpdate(const SgdScalars& s)
      : neg_lr(static_cast<C>(-s.lr)), momentum(static_cast<C>(s.momentum)), keep(static_cast<C>(1.0 - s.dampening)),
        weight_decay(static_cast<C>(s.weight_decay)), unscale(static_cast<C>(s.unscale)),
        use_momentum(s.momentum != 0), nesterov(s.nesterov), first_step(s.first_step) {}

  // p and buf are updated in place; buf is unused without momentum. The flags as template arguments
  // let a CPU loop pick its variant once (cpu/optim.cpp): with them read per element GCC kept
  // the loop scalar.
  template <bool kMomentum, bool kFirst, bool kNesterov>
  HG_HD void apply(C& p, C g, C& buf) const {
    if (unscale != C(1)) g = g * unscale;  // torch's unscale: val * inv_scale, in the compute type
    if (weight_decay != C(0)) g = g + weight_decay * p;  // torch skips it at 0 (0 * inf would be NaN)
    if constexpr (kMomentum) {
      buf = kFirst ? g : buf * momentum + keep * g;
      g = kNesterov ? g + momentum * buf : buf;
    }
    p = p + neg_lr * g;
  }
  HG_HD void operator()(C& p, C g, C& buf) const {
    if (!use_momentum) apply<false, false, false>(p, g, buf);
    else if (first_step) nesterov ? apply<true, true, true>(p, g, buf) : apply<true, true, false>(p, g, buf);
    else nesterov ? apply<true, false, true>(p, g, buf) : apply<true, false, false>(p, g, buf);
  }
};

// ---- Adam / AdamW (torch.optim.Adam, torch.optim.AdamW) ------------------------------------------

// The hyper-parameters of one group.
struct AdamHyper {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool decoupled = false;  // AdamW: p *= 1 - lr * weight_decay; Adam: grad += weight_decay * p
  bool amsgrad = false;
};

// The scalars of one step of one parameter, derived in double.
struct AdamScalars {
  double beta1 = 0.9, one_minus_beta1 = 0.1, beta2 = 0.999, one_minus_beta2 = 1e-3;
  double neg_step_size = 0;          // -lr / (1 - beta1^step)
  double bias_correction2_sqrt = 1;  // sqrt(1 - beta2^step)
  double eps = 1e-8;
  double l2 = 0;     // Adam's weight decay, added to the gradient
  double decay = 1;  // AdamW's factor 1 - lr * weight_decay on the parameter
  bool amsgrad = false;
  double unscale = 1;  // the gradient is multiplied by it first: the host part of its GradUnscale
};

// step counts from 1 (torch increments state['step'] before using it). HG_HD: the device path derives
// them in the kernel from its device-resident step counter.
HG_HD AdamScalars adam_scalars(const AdamHyper& h, int64_t step) {
  const double t = static_cast<double>(step);
  const double bias_correction1 = 1.0 - ::pow(h.beta1, t);
  const double bias_correction2 = 1.0 - ::pow(h.beta2, t);
  return AdamScalars{.beta1 = h.beta1,
          .one_minus_beta1 = 1.0 - h.beta1,
          .beta2 = h.beta2,
          .one_minus_beta2 = 1.0 - h.beta2,
          .neg_step_size = -(h.lr / bias_correction1),
          .bias_correction2_sqrt = ::sqrt(bias_correction2),
          .eps = h.eps,
          .l2 = h.decoupled ? 0.0 : h.weight_decay,
          .decay = h.decoupled ? 1.0 - h.lr * h.weight_decay : 1.0,
          .amsgrad = h.amsgrad};
}

// Two stages around one square root, so a CPU loop can take the roots of a block with vector
// instructions (a libm sqrtf call keeps a loop scalar); operator() is both stages.
template <class C>
struct AdamUpdate {
  C beta1, one_minus_beta1, beta2, one_minus_beta2, neg_step_size, bc2_sqrt, eps, l2, decay, unscale;
  bool amsgrad;

  HG_HD explicit AdamUpdate(const AdamScalars& s)
      : beta1(static_cast<C>(s.beta1)), one_minus_beta1(static_cast<C>(s.one_minus_beta1)),
        beta2(static_cast<C>(s.beta2)), one_minus_beta2(static_cast<C>(s.one_minus_beta2)),
        neg_step_size(static_cast<C>(s.neg_step_size)), bc2_sqrt(static_cast<C>(s.bias_correction2_sqrt)),
        eps(static_cast<C>(s.eps)), l2(static_cast<C>(s.l2)), decay(static_cast<C>(s.decay)),
        unscale(static_cast<C>(s.unscale)), amsgrad(s.amsgrad) {}

  // Stage 1: AdamW's decay of p, Adam's L2 term, the moments m and v (and the running max vmax of v
  // with amsgrad; unused otherwise). Returns the second moment whose root the denominator takes.
  HG_HD C moments(C& p, C g, C& m, C& v, C& vmax) const {
    if (unscale != C(1)) g = g * unscale;  // torch's unscale: val * inv_scale, in the compute type
    if (decay != C(1)) p = p * decay;   // torch: param.mul_(1 - lr * weight_decay)
    if (l2 != C(0)) g = g + l2 * p;     // torch: grad.add(param, alpha=weight_decay)
    m = m * beta1 + one_minus_beta1 * g;        // exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1)
    v = v * beta2 + (one_minus_beta2 * g) * g;  // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    if (!amsgrad) return v;
    vmax = (v > vmax || v != v) ? v : vmax;  // torch.maximum: NaN propagates
    return vmax;
  }
  // Stage 2: the new p from m and root = sqrt(the moment stage 1 returned).
  HG_HD C param(C p, C m, C root) const {
    const C denom = root / bc2_sqrt + eps;  // (sqrt(v) / bias_correction2_sqrt).add_(eps)
    return p + (neg_step_size * m) / denom;  // param.addcdiv_(exp_avg, denom, value=-step_size)
  }
  HG_HD void operator()(C& p, C g, C& m, C& v, C& vmax) const {
    const C s = moments(p, g, m, v, vmax);
    p = param(p, m, fn::m_sqrt(s));
  }
};

// ---- gradient clipping (torch.nn.utils.clip_grad_norm_, clip_grad_value_) -----------------------

// |g|^p, accumulated in double; the inf-norm takes max |g| instead.
struct NormTerm {
  double p;
  HG_HD double operator()(double g) const {
    const double a = ::fabs(g);
    if (p == 2.0) return a * a;
    if (p == 1.0) return a;
    return ::pow(a, p);
  }
};
// max that lets a NaN win, so a NaN gradient makes the inf-norm NaN (as torch).
HG_HD double nan_max(double a, double b) { return (b > a || b != b) ? b : a; }

enum class GradTransform : uint8_t { Scale, Clamp };
template <class C>
struct GradTransformFn {
  GradTransform op;
  C value;  // the factor, or the clip value c of clamp(g, -c, c)
  HG_HD C operator()(C g) const {
    if (op == GradTransform::Scale) return g * value;
    // torch.clamp: NaN stays NaN
    return g < -value ? -value : (g > value ? value : g);
  }
};

// ---- what an update kernel reads from device memory ------------------------------------------------

// Pointers into memory of the parameter's device (host memory for a CPU parameter), made by
// Optimizer::step from its AmpStep (optim/amp_step.h), each gradient's factor (autograd/grad_unscale.h)
// and its own device state; all null on the host
// path, where the kernels behave exactly as without them.
// On a CUDA device hyper and steps are always there (and clip after clip_grad_norm_), so that the
// values a captured step reads are read when a graph replays it, not when it was captured.
struct DeviceStep {
  const float* found_inf = nullptr;   // nonzero: leave parameter, master and state untouched (a skipped step)
  const float* inv_scale = nullptr;   // the scaler's 1/scale of a gradient it left scaled (F16)
  int64_t* steps = nullptr;           // the updates this parameter took; advanced only by a step not skipped
  const double* hyper = nullptr;      // the group's hyper-parameters (below; set_lr writes lr)
  const double* clip = nullptr;       // clip_grad_norm_'s factor for a gradient still scaled, else null
};

// The order of a group's hyper-parameters in device memory (DeviceStep::hyper).
enum SgdHyperIndex { kSgdLr, kSgdMomentum, kSgdDampening, kSgdWeightDecay, kSgdHyperCount };
enum AdamHyperIndex { kAdamLr, kAdamBeta1, kAdamBeta2, kAdamEps, kAdamWeightDecay, kAdamHyperCount };

HG_HD bool amp_skips(const DeviceStep& a) { return a.found_inf != nullptr && *a.found_inf != 0.0f; }

// The gradient factor: the host's part (1, or clip_grad_norm_'s factor) times the device's 1/scale,
// multiplied in double as the host path does (optim/clip.cpp folds the clip into 1/scale in double),
// so both paths round the same product to the compute type.
HG_HD double unscale_factor(const DeviceStep& a, double host) {
  const double f = a.inv_scale != nullptr ? static_cast<double>(*a.inv_scale) * host : host;
  return a.clip != nullptr ? f * *a.clip : f;
}

// Whether the kernel derives its scalars from device values (else it takes the host's).
HG_HD bool amp_on_device(const DeviceStep& a) {
  return a.inv_scale != nullptr || a.steps != nullptr || a.hyper != nullptr || a.clip != nullptr;
}

// After the update (a separate one-thread launch on a GPU: the update's threads read *steps).
HG_HD void amp_count_step(const DeviceStep& a) {
  if (a.steps != nullptr && !amp_skips(a)) *a.steps += 1;
}

// SGD's scalars with the device's factor and hyper-parameters; with a step counter, the first step is
// the first one taken (the momentum buffer starts as the gradient even when earlier steps were
// skipped). Momentum needs its buffer: a parameter whose state was made without one keeps none.
HG_HD SgdScalars sgd_scalars_for(SgdScalars s, const DeviceStep& a, bool has_buffer) {
  s.unscale = unscale_factor(a, s.unscale);
  if (a.hyper != nullptr) {
    s.lr = a.hyper[kSgdLr];
    s.momentum = has_buffer ? a.hyper[kSgdMomentum] : 0.0;
    s.dampening = a.hyper[kSgdDampening];
    s.weight_decay = a.hyper[kSgdWeightDecay];
  }
  if (a.steps != nullptr) s.first_step = *a.steps == 0;
  return s;
}

// Adam's scalars: from the host (s, step counted on the host) or, with a device step counter, derived
// here from it by adam_scalars, so a skipped step does not advance the bias corrections.
HG_HD AdamScalars adam_scalars_for(const AdamScalars& host, const AdamHyper& h, const DeviceStep& a) {
  AdamHyper hd = h;
  if (a.hyper != nullptr) {
    hd.lr = a.hyper[kAdamLr];
    hd.beta1 = a.hyper[kAdamBeta1];
    hd.beta2 = a.hyper[kAdamBeta2];
    hd.eps = a.hyper[kAdamEps];
    hd.weight_decay = a.hyper[kAdamWeightDecay];
  }
  AdamScalars s = a.steps != nullptr ? adam_scalars(hd, *a.steps + 1) : host;
  s.unscale = unscale_factor(a, host.unscale);
  return s;
}

// ---- the parameter's store without a master copy ---------------------------------------------------

// Where the update of a low-precision parameter without a master goes (optim/optimizer.h's ParamRounding):
// element i of a Stochastic store draws word i % 4 of Philox block offset + i / 4 under `seed`; a Kahan
// store reads and writes `compensation` (n values of the parameter's dtype).
struct ParamStore {
  ParamRounding rounding = ParamRounding::Nearest;
  uint64_t seed = 0, offset = 0;
  void* compensation = nullptr;
};

// Kahan-compensated store of the updated value v into p (Kahan 1965, as "Revisiting BFloat16 Training"
// applies it to weight updates): the update is u = v - old; y = u - c; t = round(old + y) is the new
// parameter and c = round((t - old) - y) what the rounding lost (with its sign), subtracted next time.
// In F32 arithmetic, rounded to T on store.
template <class T>
HG_HD void kahan_store(T& p, T& c, float v) {
  const float old = to_float(p);
  const float y = (v - old) - to_float(c);
  const T t = from_float<T>(old + y);
  c = from_float<T>((to_float(t) - old) - y);
  p = t;
}

// p[i] (no master) = v rounded as `st` says; r is element i's random word (Stochastic).
template <class T>
HG_HD void store_param_rounded(T* p, int64_t i, float v, const ParamStore& st, uint32_t r) {
  if (st.rounding == ParamRounding::Stochastic) p[i] = stochastic_round<T>(v, r);
  else if (st.rounding == ParamRounding::Kahan) kahan_store(p[i], static_cast<T*>(st.compensation)[i], v);
  else p[i] = from_float<T>(v);
}

// ---- kernel arguments and tables ------------------------------------------------------------------

// n elements; param and grad have the table's dtype T, momentum_buffer the compute type C (null
// without momentum); master, when not null, is the F32 master copy of an F16/BF16 param.
struct SgdArgs {
  int64_t n = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  void* momentum_buffer = nullptr;
  float* master = nullptr;
  ParamStore store = {};  // a low-precision param without master: how the update is rounded into it
  SgdScalars s = {};
  DeviceStep amp = {};  // the kernel uses sgd_scalars_for(s, amp, momentum_buffer != null)
};

// max_exp_avg_sq is null unless amsgrad.
struct AdamArgs {
  int64_t n = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  void* exp_avg = nullptr;
  void* exp_avg_sq = nullptr;
  void* max_exp_avg_sq = nullptr;
  float* master = nullptr;
  ParamStore store = {};  // a low-precision param without master: how the update is rounded into it
  AdamScalars s = {};  // host-derived; with amp.steps only s.unscale and s.amsgrad are used
  AdamHyper h = {};    // for scalars derived from amp.steps
  DeviceStep amp = {};  // the kernel uses adam_scalars_for(s, h, amp)
};

// *result (memory on the grad's device, set by the caller) is combined with the sum of |f g|^p, or with
// max |f g| when norm_type is inf, f = (*inv_scale or 1) * host: a gradient still scaled by the grad
// scaler counts with its pending factor (its GradUnscale; norm_weight). The CPU sums in a fixed order; a GPU's
// order is unspecified.
struct GradNormArgs {
  int64_t n = 0;
  const void* grad = nullptr;
  double norm_type = 2.0;
  double* result = nullptr;
  const float* inv_scale = nullptr;
  double host = 1.0;
};

// The weight of a gradient's sum of |g|^p (or max |g|) for the factor f: |f|^p (or |f|).
HG_HD double norm_weight(const GradNormArgs& a) {
  const double f = ::fabs(a.inv_scale != nullptr ? static_cast<double>(*a.inv_scale) * a.host : a.host);
  if (a.norm_type == 2.0) return f * f;
  if (a.norm_type == 1.0 || a.norm_type == static_cast<double>(INFINITY)) return f;
  return ::pow(f, a.norm_type);
}

// g = transform(g) in place, with `value` or, when not null, *device_value (read when the kernel runs).
struct GradTransformArgs {
  int64_t n = 0;
  void* grad = nullptr;
  GradTransform op = GradTransform::Scale;
  double value = 1.0;
  const double* device_value = nullptr;
};

// clip_grad_norm_'s last step, where the norms are: from acc (the sum of |g|^p of all gradients, or
// their max |g|) out[0] = the total norm, out[1] = the factor the gradients are multiplied by: 1 when
// max_norm / (total + 1e-6) >= 1, else that (NaN for a NaN norm, 0 for an inf one, as torch).
struct ClipCoefArgs {
  const double* acc = nullptr;
  double norm_type = 2.0;
  double max_norm = 1.0;
  double* out = nullptr;
};
HG_HD void clip_coef(const ClipCoefArgs& a) {
  const double acc = *a.acc;
  const double total = a.norm_type == static_cast<double>(INFINITY) ? acc
                       : a.norm_type == 2.0                        ? ::sqrt(acc)
                                                                   : ::pow(acc, 1.0 / a.norm_type);
  const double coef = a.max_norm / (total + 1e-6);
  a.out[0] = total;
  a.out[1] = coef >= 1.0 ? 1.0 : coef;
}

// The argument checks every backend's update kernel makes (host code, before any launch).
inline void check_update_args(const char* op, DType t, const float* master) {
  HG_CHECK(master == nullptr || is_low_precision(t), op, ": a master copy was given for a ", t,
           " parameter; only F16/BF16 parameters take an F32 master");
}
inline void check_update_args(DType t, const SgdArgs& a) { check_update_args("SGD.step", t, a.master); }
inline void check_update_args(DType t, const AdamArgs& a) {
  check_update_args("Adam.step", t, a.master);
  // an empty parameter has no buffers at all
  HG_CHECK(a.n == 0 || a.s.amsgrad == (a.max_exp_avg_sq != nullptr),
           "Adam.step: amsgrad needs max_exp_avg_sq and only amsgrad takes it (amsgrad=", a.s.amsgrad, ")");
}

using SgdKernel = void (*)(const SgdArgs& a);
using AdamKernel = void (*)(const AdamArgs& a);
using GradNormKernel = void (*)(const GradNormArgs& a);
using GradTransformKernel = void (*)(const GradTransformArgs& a);
using ClipCoefKernel = void (*)(const ClipCoefArgs& a);

// Indexed by the parameter's (gradient's) device and dtype; the CPU entries are filled at first use
// (cpu/optim.cpp), the CUDA ones by cuda/kernels/optim.cu's register_optim().
HG_KERNEL_TABLE(SgdKernel, sgd_kernels, "SGD.step");
HG_KERNEL_TABLE(AdamKernel, adam_kernels, "Adam.step");
HG_KERNEL_TABLE(GradNormKernel, grad_norm_kernels, "clip_grad_norm_");
HG_KERNEL_TABLE(GradTransformKernel, grad_transform_kernels, "clip_grad");
HG_KERNEL_TABLE(ClipCoefKernel, clip_coef_kernels, "clip_grad_norm_ (factor)");  // slot F64 (the accumulator's dtype)

// The dtype of the optimizer state of a parameter of dtype t: F64 for F64, F32 otherwise.
constexpr DType state_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace hg::optim
