#pragma once
// Dynamic loss scaling: torch.amp.GradScaler's algorithm and its misuse errors, plus Apex/Megatron's
// min/max scale, hysteresis and a static scale (torch/amp/grad_scaler.py; apex/amp/scaler.py; Megatron-LM's DynamicGradScaler).
//
//   hg::amp::GradScaler scaler;                       // init 2^16, x2 after 2000 clean steps, x0.5 on inf
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                             // optional: before clipping
//   hg::optim::clip_grad_norm_(params, 1.0);
//   auto r = scaler.step(opt);                        // skips the step when a gradient is inf/NaN
//   scaler.update();                                  // once per iteration, after every step
//   if (r.stepped()) sched.step();                    // (on a GPU: waits for the step to finish)
//
// Per optimizer the scaler walks READY -> UNSCALED -> STEPPED; update() puts every optimizer back to
// READY. unscale_ twice, step twice, or unscale_ after step throw hg::Error naming the misuse.
//
// An optimizer whose gradients are sharded over ranks (Optimizer::gradients_sharded(): ZeroRedundantOptimizer with
// reduce_scatter_gradients) sees only its shard's infs: unscale_ then reduces found_inf with MAX over the process
// group (torch's ShardedGradScaler), so every rank skips or steps together. Every rank must call it.
//
// F32/BF16/F64 gradients are unscaled in place (g * inv_scale, inv_scale = 1/scale in F32) with the
// finite check in the same pass; F16 gradients stay scaled, carrying their factor (Tensor::grad_unscale),
// and the update unscales them.
// Host path (a CPU loss) or device path (a CUDA loss, or StepSkip::Kernel: no host sync, capturable);
// both run the same math. How the scale travels, and why: docs/ARCHITECTURE.md, "The loss scale".
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>

#include "core/tensor.h"
#include "ops/scaler_math.h"
#include "optim/amp_step.h"
#include "optim/optimizer.h"

namespace hg::amp {

struct ScalerStateArgs;  // ops/kernels/scaler.h: the backend contract, which this header keeps out

// Where step() skips the update of an optimizer whose gradients hold an inf/NaN: Host reads found_inf
// back and does not call the optimizer; Kernel keeps the scaler's state on the loss's device and lets
// the update kernels skip (no sync); Auto: Kernel for a CUDA loss, Host for a CPU one.
enum class StepSkip : uint8_t { Auto, Host, Kernel };

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;
  bool enabled = true;  // false: scale() returns the loss, step() just steps, the rest does nothing
  // Extras (Apex, Megatron, DeepSpeed); the defaults are torch's behaviour.
  double min_scale = 0.0;  // the backed-off scale never goes below it (0: only F32's smallest normal, 2^-126)
  double max_scale = std::numeric_limits<double>::infinity();  // growth stops there
  int64_t hysteresis = 1;  // back off only after this many overflowing iterations in a row
  bool dynamic = true;     // false: a static scale (init_scale forever); inf/NaN steps are still skipped
  StepSkip step_skip = StepSkip::Auto;  // where an inf/NaN step is skipped (see above)
  // Stop, not train through: after this many updates in a row whose gradients held an inf/NaN, update()
  // throws an hg::Error naming the count, the scale and amp::inspect::NonFiniteOrigin (on the device
  // path, the first read after it: get_scale() or a StepResult's accessors; a sync-free loop is not
  // interrupted, and its parameters stay untouched as every step is skipped).
  // 0 trains on for ever, as torch does. 50 halvings take the default scale from 2^16 to 2^-34.
  int64_t max_skipped_in_a_row = 50;
};

// What step(opt) did. On the host path the values are known at once; on the device path they stay on
// the device (a 2-float snapshot taken by step()) until an accessor is first called, which waits for
// the GPU once (a sync) and keeps them, so a loop that never asks never waits.
class StepResult {
 public:
  StepResult(bool found_inf, double scale) : values_(Values{found_inf, scale}) {}
  // {found_inf, scale, skipped in a row} as F32 on the device; the accessors throw the scaler's stop
  // error (GradScalerOptions::max_skipped_in_a_row) when the skips before this step reached `stop_after`
  StepResult(Tensor snapshot, int64_t stop_after) : snapshot_(std::move(snapshot)), stop_after_(stop_after) {}

  bool stepped() const { return !found_inf(); }       // the update was applied
  bool found_inf() const { return read().found_inf; }  // some gradient of this optimizer was inf or NaN
  double scale() const { return read().scale; }       // the scale these gradients were scaled by (before update())
  // Reads every result of `results` not read yet with one download per device (their snapshots gathered
  // there first), where reading them one by one waits once each: a loop that keeps its steps' results and
  // reads them every N steps then waits for the device once per N steps (examples/train_common.h).
  static void read_all(std::span<const StepResult> results);

 private:
  struct Values {
    bool found_inf = false;
    double scale = 1.0;
  };
  const Values& read() const;
  void take(const float* snapshot) const;
  Tensor snapshot_;
  int64_t stop_after_ = 0;
  mutable std::optional<Values> values_;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale, in F32 (F64 stays F64); differentiable. Disabled: the loss itself. The first call
  // chooses the path (above) from the loss's device. An F16 or BF16 loss is widened first, as Apex's
  // amp.scale_loss does (torch's scale() keeps the loss's dtype, so an F16 loss above 1 times 65536 is inf
  // there and the step is skipped for it).
  Tensor scale(const Tensor& loss);
  // Unscales (see above) the gradients of opt's parameters and records whether any was inf/NaN.
  void unscale_(optim::Optimizer& opt);
  // unscale_ unless done, then opt.step() unless a gradient was inf/NaN.
  StepResult step(optim::Optimizer& opt);
  // The new scale from every optimizer's found_inf since the last update; all optimizers back to READY.
  void update();
  // Sets the scale (a normal F32 number) instead; growth tracker and hysteresis are kept (torch).
  void update(double new_scale);

  // On the device path these read the device (a sync), as torch's get_scale() does.
  double get_scale() const;
  int64_t growth_tracker() const { return current().growth_tracker; }
  int64_t hysteresis_left() const { return current().hysteresis_left; }
  // Updates in a row whose gradients held an inf/NaN (0 after a clean one).
  int64_t skipped_in_a_row() const { return current().skipped_in_a_row; }
  bool is_enabled() const { return enabled(); }
  // The scaler keeps its state on a device and lets the optimizers skip there (decided at the first
  // scale() or unscale_).
  bool on_device() const { return dev_.scale.defined(); }
  const GradScalerOptions& options() const { return options_; }

  // Named 0-d F64 tensors: torch's five (scale, growth_factor, backoff_factor, growth_interval,
  // _growth_tracker) and halfgrad's own (hysteresis, hysteresis_tracker, skipped_tracker, min_scale, max_scale,
  // dynamic, max_skipped_in_a_row). Empty when disabled (torch). Save it after update().
  optim::StateDict state_dict() const;
  // All or nothing; throws on an empty dict (saved by a disabled scaler), a missing torch entry or a bad one
  // (each must hold one number: a [1]-shaped scale or I64 counts read the same). halfgrad's own entries are
  // optional: a dict of torch's five keeps this scaler's hysteresis, bounds and dynamic flag. "growth_tracker"
  // (an older halfgrad's key) reads as "_growth_tracker". A disabled scaler ignores it (torch).
  void load_state_dict(const optim::StateDict& sd);

 private:
  enum class Stage : uint8_t { Ready, Unscaled, Stepped };
  struct OptimizerState {
    Stage stage = Stage::Ready;
    bool found_inf = false;
    bool checked = false;  // unscale_ saw at least one gradient (torch: "No inf checks were recorded" otherwise)
  };

  // The device path's state (what ops/kernels/scaler.h's ScalerStateArgs point into), on `device`.
  struct DeviceState {
    Device device;
    Tensor scale, trackers, inv_scale, found_inf;  // found_inf: one flag per slot
    std::unordered_map<const optim::Optimizer*, int64_t> slots;
  };

  bool enabled() const { return options_.enabled; }
  ScaleUpdateParams update_params() const;
  void warn_if_below_one(float scale) const;
  void choose_path(Device d);
  void upload_state();
  ScaleState current() const;
  int64_t slot_for(const optim::Optimizer& opt);
  void run(ScalerStateArgs a) const;
  void unscale_on_device(optim::Optimizer& opt, OptimizerState& st);

  GradScalerOptions options_;
  ScaleState state_;  // the host path's state; on the device path, what upload_state() puts there
  DeviceState dev_;   // undefined tensors on the host path
  bool path_chosen_ = false;
  std::unordered_map<const optim::Optimizer*, OptimizerState> per_optimizer_;
  mutable bool warned_below_one_ = false;
};

}  // namespace hg::amp
