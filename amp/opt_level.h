#pragma once
// Apex's opt levels in one call (apex.amp.initialize; apex/amp/frontend.py's Properties), resolved into explicit
// properties that the training loop then follows:
//   O0  pure F32: no autocast, no loss scaling
//   O1  autocast (run forward and loss under amp::Autocast(dev, props.dtype)), F32 parameters,
//       dynamic loss scaling
//   O2  parameters cast to F16 except batch norm, FP32 master weights in the optimizer, dynamic scaling
//   O3  pure F16: every parameter F16, no masters, loss scale 1 (fast, and the baseline that shows
//       why masters and scaling matter)
//   amp::Properties p = amp::initialize(model, opt, amp::OptLevel::O2);
//   amp::GradScaler scaler(p.scaler_options());
#include <optional>
#include <ostream>

#include "amp/grad_scaler.h"
#include "core/dtype.h"
#include "nn/module.h"
#include "optim/optimizer.h"

namespace hg::amp {

enum class OptLevel : uint8_t { O0, O1, O2, O3 };

// Each set field replaces the level's default (Apex's keyword overrides).
struct Overrides {
  std::optional<bool> keep_batchnorm_fp32 = {};
  std::optional<bool> master_weights = {};
  std::optional<double> loss_scale = {};  // a static scale; unset keeps the level's (dynamic for O1/O2)
  std::optional<DType> dtype = {};   // F16 (default) or BF16
  bool verbose = true;               // print the resolved properties once
};

struct Properties {
  OptLevel level = OptLevel::O0;
  DType dtype = DType::F32;      // the low precision in use (F32 for O0)
  bool autocast = false;         // O1: the loop runs forward and loss under Autocast(dev, dtype)
  bool cast_model = false;       // O2/O3: parameters were converted to dtype
  bool keep_batchnorm_fp32 = false;
  bool master_weights = false;
  bool dynamic_loss_scale = false;
  double loss_scale = 1.0;       // the static scale, or the dynamic scaler's initial one
  GradScalerOptions scaler_options() const;
};

// Converts the model (O2/O3) and sets the optimizer's master-weight mode; returns what was chosen.
// Call it once, after building model and optimizer and before the first step.
Properties initialize(nn::Module& model, optim::Optimizer& opt, OptLevel level, Overrides o = {});

std::ostream& operator<<(std::ostream& os, const Properties& p);

}  // namespace hg::amp
