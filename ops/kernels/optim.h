#pragma once
// The contract of the optimizer updates and of gradient clipping: what an update kernel is given
// (UpdateArgs), what an update rule is (below), the clipping math as HG_HD functors, the kernels'
// argument structs and their dispatch tables. The rules themselves, one struct per optimizer, are
// ops/kernels/optim_rules.h; each backend has one driver that runs any rule (cpu/optim.cpp,
// cuda/kernels/optim.cu), so a new optimizer adds a rule and no backend code (docs/ARCHITECTURE.md,
// "A new optimizer").
//
// Buffers: the parameter and its gradient have the parameter's dtype T; the optimizer state (momentum
// buffer, moments) has the compute type C: float for F32/F16/BF16 parameters, double for F64. A
// parameter stored in F16/BF16 may come with an F32 master copy: the update then reads and writes the
// master and rounds it into the parameter (docs/ARCHITECTURE.md, Principles 6); without one, the store
// rounds as ParamStore says. `unscale` (1 unless the grad scaler left an F16 gradient scaled:
// autograd/grad_unscale.h) multiplies the gradient in C before anything else, so unscaling costs no
// extra pass over memory.
//
// The grad scaler's device path (DeviceStep below) hands the kernels pointers instead of values: the
// driver reads found_inf and leaves everything untouched when it is set, the gradient's factor takes
// the device-resident 1/scale, the step number comes from a device-resident counter that only advances
// when the step was taken (torch's fused optimizers), and on a CUDA device the hyper-parameters are read
// from device memory. A rule derives its scalars from those StepInputs by the same HG_HD code on the
// host and on the device.
#include <math.h>

#include <cstdint>
#include <span>

#include "core/dispatch_table.h"
#include "core/macros.h"
#include "core/stochastic_round.h"
#include "ops/functors.h"

namespace hg::optim {

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
  const double* hyper = nullptr;      // the group's hyper-parameters (UpdateArgs::hyper's order; set_lr writes lr)
  const double* clip = nullptr;       // clip_grad_norm_'s factor for a gradient still scaled, else null
};

HG_HD bool amp_skips(const DeviceStep& a) { return a.found_inf != nullptr && *a.found_inf != 0.0f; }

// The gradient factor: the host's part (1, or clip_grad_norm_'s factor) times the device's 1/scale,
// multiplied in double as the host path does (optim/clip.cpp folds the clip into 1/scale in double),
// so both paths round the same product to the compute type.
HG_HD double unscale_factor(const DeviceStep& a, double host) {
  const double f = a.inv_scale != nullptr ? static_cast<double>(*a.inv_scale) * host : host;
  return a.clip != nullptr ? f * *a.clip : f;
}

// After the update (a separate one-thread launch on a GPU: the update's threads read *steps).
HG_HD void amp_count_step(const DeviceStep& a) {
  if (a.steps != nullptr && !amp_skips(a)) *a.steps += 1;
}

// ---- the parameter's store without a master copy ---------------------------------------------------

// Where the update of a low-precision parameter without a master goes (optim/optimizer.h's ParamRounding):
// element i of a Stochastic store draws word i % 4 of Philox block i / 4 of the draw rng (core/rng.h's
// PhiloxDraw); a Kahan store reads and writes `compensation` (n values of the parameter's dtype).
struct ParamStore {
  ParamRounding rounding = ParamRounding::Nearest;
  PhiloxDraw rng = {};
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

// ---- what an update kernel is given, and what an update rule is -----------------------------------

inline constexpr int kMaxUpdateBuffers = 4;  // state buffers of one parameter (Adam with amsgrad: 3)
inline constexpr int kMaxHyper = 8;          // hyper-parameters of one group

// n elements; param and grad have the table's dtype T, the buffers the compute type C, in the order of
// the optimizer's state names (optim/optimizer.h); master, when not null, is the F32 master copy of an
// F16/BF16 param.
struct UpdateArgs {
  int64_t n = 0;
  void* param = nullptr;
  const void* grad = nullptr;
  void* buffers[kMaxUpdateBuffers] = {};
  int num_buffers = 0;
  float* master = nullptr;
  ParamStore store = {};  // a low-precision param without master: how the update is rounded into it
  // The group's hyper-parameters in its rule's order (ops/kernels/optim_rules.h), options that are flags
  // as 0/1; amp.hyper, when set, is read instead (the same values, in device memory).
  double hyper[kMaxHyper] = {};
  int64_t step = 0;         // the steps counted on the host, this one included (optimizers that count steps)
  bool first_step = false;  // the buffers were just made (SGD's momentum buffer starts as the gradient)
  double unscale = 1;       // the host's part of the gradient's factor (its GradUnscale)
  DeviceStep amp = {};
};

// What a rule derives its scalars from, wherever they live (host values, or device memory on the
// device path).
struct StepInputs {
  const double* hyper = nullptr;  // the group's hyper-parameters
  int64_t step = 1;               // this step's number, from 1 (torch increments state['step'] before using it)
  bool first_step = false;        // no step taken yet: the buffers hold their initial zeros
  double unscale = 1;             // the gradient's whole factor
  int num_buffers = 0;
};

// With a device step counter the step's number and first-step flag are the counter's (a skipped step
// does not advance them), else the host's.
HG_HD StepInputs step_inputs(const UpdateArgs& a) {
  return StepInputs{.hyper = a.amp.hyper != nullptr ? a.amp.hyper : a.hyper,
                    .step = a.amp.steps != nullptr ? *a.amp.steps + 1 : a.step,
                    .first_step = a.amp.steps != nullptr ? *a.amp.steps == 0 : a.first_step,
                    .unscale = unscale_factor(a.amp, a.unscale),
                    .num_buffers = a.num_buffers};
}

// An update rule (ops/kernels/optim_rules.h) is a struct with
//   static constexpr const char* kName;  // its table's name: the op in errors and in kernel coverage
//   static constexpr int kBuffers;       // the most state buffers it takes (<= kMaxUpdateBuffers)
//   static constexpr int kHyper;         // how many hyper-parameters (<= kMaxHyper)
//   static constexpr int kVariants;      // how many forms its element update has (below)
//   static int buffers_for(const double* hyper);  // how many buffers these options need
//   template <class C> struct Update {   // C: the compute type
//     HG_HD explicit Update(const StepInputs& in);  // its scalars, derived in double, rounded to C once
//     HG_HD int variant() const;  // which form, in [0, kVariants): branches fixed for the whole tensor
//     template <int V> HG_HD void apply(C& p, C g, C* const* buf, int64_t i) const;  // element i
//   };
// apply updates p (the parameter, its master or a widened copy) from the gradient g, reading and writing
// element i of its buffers buf[0..num_buffers). The forms are template arguments so that a CPU loop runs
// one branch-free body per tensor (with per-element flags GCC keeps a loop scalar).
template <int V> struct Variant { static constexpr int value = V; };

// f(Variant<v>{}) for the runtime form v in [0, N).
template <int N, int V = 0, class F>
HG_HD void with_variant(int v, F&& f) {
  if constexpr (V + 1 < N) {
    if (v != V) return with_variant<N, V + 1>(v, f);
  }
  f(Variant<V>{});
}

// The argument checks every backend's update driver makes (host code, before any launch).
template <class Rule>
void check_update_args(DType t, const UpdateArgs& a) {
  static_assert(Rule::kBuffers <= kMaxUpdateBuffers && Rule::kHyper <= kMaxHyper);
  HG_CHECK(a.master == nullptr || is_low_precision(t), Rule::kName, ": a master copy was given for a ", t,
           " parameter; only F16/BF16 parameters take an F32 master");
  // an empty parameter has no buffers at all
  const int need = Rule::buffers_for(a.hyper);
  HG_CHECK(a.n == 0 || a.num_buffers == need, Rule::kName, ": the options need ", need,
           " state buffer(s) but the update was given ", a.num_buffers);
}

// Updates every parameter of `batch`: all of the table's dtype and on one device (one step's parameters of
// that dtype, in index order). A GPU runs the whole batch in one launch (torch's fused optimizers, Apex's
// multi_tensor_apply), the step counters advanced in it too.
using UpdateKernel = void (*)(std::span<const UpdateArgs> batch);

// One table per rule, indexed by the parameter's device and dtype, named Rule::kName: a rule's table line
// in ops/kernels/optim_rules.h declares its specialization,
//   template <> HG_KERNEL_TABLE(UpdateKernel, update_kernels<SgdRule>, SgdRule::kName);
// and every backend fills the tables of every rule in UpdateRules.
template <class Rule>
DispatchTable<UpdateKernel>& update_kernels();

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

// Batches: gradients of the table's dtype on one device, in one launch on a GPU. A norm batch shares its
// result (the CPU adds the gradients' sums in batch order); each transform has its own op and value.
using GradNormKernel = void (*)(std::span<const GradNormArgs> batch);
using GradTransformKernel = void (*)(std::span<const GradTransformArgs> batch);
using ClipCoefKernel = void (*)(const ClipCoefArgs& a);

// Indexed by the parameter's (gradient's) device and dtype; the CPU entries are filled at first use
// (cpu/optim.cpp), the CUDA ones by cuda/kernels/optim.cu's register_optim().
HG_KERNEL_TABLE(GradNormKernel, grad_norm_kernels, "clip_grad_norm_");
HG_KERNEL_TABLE(GradTransformKernel, grad_transform_kernels, "clip_grad");
HG_KERNEL_TABLE(ClipCoefKernel, clip_coef_kernels, "clip_grad_norm_ (factor)");  // slot F64 (the accumulator's dtype)

// The dtype of the optimizer state of a parameter of dtype t: F64 for F64, F32 otherwise.
constexpr DType state_dtype(DType t) { return t == DType::F64 ? DType::F64 : DType::F32; }

}  // namespace hg::optim
