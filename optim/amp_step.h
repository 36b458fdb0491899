#pragma once
// The loss scale's way from amp::GradScaler to the update kernels, in one value (docs/ARCHITECTURE.md,
// "The loss scale, from scale() to the update").
//
// An F16 gradient is not unscaled in place by GradScaler::unscale_: in F16, g * (1/scale) would flush the
// small values scaling exists to keep (torch refuses to unscale F16 gradients for that reason). It stays
// scaled and carries a GradUnscale: the factor the update kernel multiplies it by, in F32, as it reads it.
// The scaler keeps these factors (PendingUnscales, by parameter) and hands them to Optimizer::step in an
// AmpStep. Clipping finds them by parameter (find_pending_unscale), so clip_grad_norm_ over any list of
// parameters -- model.parameters() included -- measures and clips the unscaled gradients.
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace hg::optim {

// The factor one gradient still carries: the unscaled gradient is its values times
// host * (*inv_scale or 1) * (*clip or 1), formed in double and rounded once to the compute type.
struct GradUnscale {
  double host = 1.0;                 // the scaler's 1/scale on its host path, times host clip factors
  const float* inv_scale = nullptr;  // the scaler's 1/scale in device memory (its device path)
  const double* clip = nullptr;      // clip_grad_norm_'s factor in device memory
  Tensor clip_memory = {};           // owns what clip points into, until the update is enqueued
  bool pending() const { return host != 1.0 || inv_scale != nullptr || clip != nullptr; }
};

// What GradScaler::step hands to Optimizer::step: pointers into memory of the parameters' device, read
// by the update kernels (so nothing crosses to the host and a captured step reads them at replay).
struct AmpStep {
  const float* found_inf = nullptr;  // nonzero: every update leaves parameter, master and state untouched
  std::vector<GradUnscale> unscale = {};  // by parameter index <i> (Optimizer::parameters()); missing: nothing pending
};

// The gradients one GradScaler left scaled, by parameter, until its step() hands them over. An entry
// belongs to the gradient it was made for: once the parameter's gradient is replaced or dropped
// (zero_grad), the entry no longer applies.
class PendingUnscales {
 public:
  // A new, empty set, visible to find_pending_unscale while it lives.
  static std::shared_ptr<PendingUnscales> make();
  ~PendingUnscales();
  PendingUnscales(const PendingUnscales&) = delete;
  PendingUnscales& operator=(const PendingUnscales&) = delete;

  void set(const Tensor& param, GradUnscale f);
  // The factor of param's current gradient, or null.
  GradUnscale* find(const Tensor& param);
  // The AmpStep for these parameters (in their order), and their entries dropped.
  AmpStep take(const std::vector<Tensor>& params, const float* found_inf);
  void drop(const std::vector<Tensor>& params);
  void clear();

 private:
  PendingUnscales() = default;
  struct Entry {
    std::weak_ptr<TensorImpl> param, grad;
    GradUnscale f;
  };
  std::unordered_map<const TensorImpl*, Entry> map_;
};

// The factor param's current gradient carries in any live PendingUnscales, or null (the common case
// costs one atomic read).
GradUnscale* find_pending_unscale(const Tensor& param);
// Whether any live PendingUnscales holds an entry (one atomic read).
bool any_pending_unscale();
// The AmpStep of these parameters (in their order) from every live PendingUnscales, taking nothing.
AmpStep pending_amp_step(const std::vector<Tensor>& params);

}  // namespace hg::optim
