#pragma once
// Dynamic loss scaling: torch.amp.GradScaler's algorithm and its misuse errors, plus Apex/Megatron's
// min/max scale, hysteresis and a static scale (reference/amp-anchors.md §1.4, §1.6, §2.3).
//
//   hg::amp::GradScaler scaler;                       // init 2^16, x2 after 2000 clean steps, x0.5 on inf
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                             // optional: before clipping
//   hg::optim::clip_grad_norm_(params, 1.0);
//   auto r = scaler.step(opt);                        // skips the step when a gradient is inf/NaN
//   scaler.update();                                  // once per iteration, after every step
//   if (r.stepped) sched.step();
//
// Per optimizer the scaler walks READY -> UNSCALED -> STEPPED; update() puts every optimizer back to
// READY. unscale_ twice, step twice, or unscale_ after step throw hg::Error naming the misuse.
//
// Gradients are unscaled as torch does, in place, g * (1/scale) computed in F32 (F64 for F64 grads)
// with the finite check in the same pass -- except F16 gradients. Unscaling those in F16 would flush
// the small values scaling exists to keep (torch refuses: "Attempting to unscale FP16 gradients").
// Their gradient must keep the parameter's dtype, so the scaler checks them as they are and hands
// 1/scale to the optimizer (Optimizer::set_grad_scale); the next step's update kernel multiplies the
// widened gradient by it in F32 -- exactly what an F32 unscale would give -- in the same pass as the
// update of the F32 master. Consequence: after unscale_, an F16 parameter's .grad() is still scaled
// (F32/BF16/F64 gradients are unscaled). To clip, call optim::clip_grad_norm_(opt, max_norm), which
// counts the pending factors and folds its clip factor into them; the vector-of-parameters version
// and clip_grad_value_ would see the scaled F16 values.
//
// The scale, growth tracker and hysteresis counter are host values (the scale an F32, as torch's):
// step() needs found_inf on the host anyway to decide whether to call the optimizer (torch's one sync
// per step on the non-fused path). On a GPU the unscale kernel (cuda/kernels/amp.cu) writes one
// found_inf flag per device, read once per unscale_. Not yet: torch's fused path where the optimizer
// kernel reads a device-resident scale and found_inf and skips on the device without any sync.
#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <unordered_map>

#include "amp/scaler_math.h"
#include "core/tensor.h"
#include "optim/optimizer.h"

namespace hg::amp {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() returns the loss, step() just steps, the rest does nothing
  // Extras (Apex, Megatron, DeepSpeed); the defaults are torch's behaviour.
  double min_scale = 0.0;  // the backed-off scale never goes below it (0: no floor)
  double max_scale = std::numeric_limits<double>::infinity();  // growth stops there
  int64_t hysteresis = 1;  // back off only after this many overflowing iterations in a row
  bool dynamic = true;     // false: a static scale (init_scale forever); inf/NaN steps are still skipped
};

struct StepResult {
  bool stepped = false;    // the optimizer's step ran
  bool found_inf = false;  // some gradient of this optimizer was inf or NaN (the step was skipped)
  double scale = 1.0;      // the scale these gradients were scaled by (before update())
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale, in F32 (F64 stays F64); differentiable. Disabled: the loss itself.
  Tensor scale(const Tensor& loss) const;
  // Unscales (see above) the gradients of opt's parameters and records whether any was inf/NaN.
  void unscale_(optim::Optimizer& opt);
  // unscale_ unless done, then opt.step() unless a gradient was inf/NaN.
  StepResult step(optim::Optimizer& opt);
  // The new scale from every optimizer's found_inf since the last update; all optimizers back to READY.
  void update();
  // Sets the scale (> 0, finite) instead; growth tracker and hysteresis are kept (torch).
  void update(double new_scale);

  double get_scale() const { return enabled() ? static_cast<double>(state_.scale) : 1.0; }
  int64_t growth_tracker() const { return state_.growth_tracker; }
  int64_t hysteresis_left() const { return state_.hysteresis_left; }
  bool is_enabled() const { return enabled(); }
  const GradScalerOptions& options() const { return options_; }

  // Named 0-d F64 tensors: scale, growth_tracker, hysteresis_tracker and the options growth_factor,
  // backoff_factor, growth_interval, hysteresis, min_scale, max_scale, dynamic. Empty when disabled
  // (torch). Save it after update().
  optim::StateDict state_dict() const;
  // All or nothing; throws on an empty dict (saved by a disabled scaler) or a missing/bad entry.
  // A disabled scaler ignores it (torch).
  void load_state_dict(const optim::StateDict& sd);

 private:
  enum class Stage : uint8_t { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    bool found_inf = false;
  };

  bool enabled() const { return options_.enabled; }
  ScaleUpdateParams update_params() const;
  void warn_if_below_one();

  GradScalerOptions options_;
  ScaleState state_;
  std::unordered_map<const optim::Optimizer*, OptimizerState> per_optimizer_;
  bool warned_below_one_ = false;
};

}  // namespace hg::amp
