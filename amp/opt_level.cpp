#include "amp/opt_level.h"

#include <iostream>

#include "nn/layers.h"

namespace hg::amp {

namespace {

const char* level_name(OptLevel l) {
  static const char* names[] = {"O0", "O1", "O2", "O3"};
  return names[static_cast<int>(l)];
}

// The level's defaults (Apex frontend.py), before overrides.
Properties defaults(OptLevel level) {
  Properties p;
  p.level = level;
  switch (level) {
    case OptLevel::O0: break;
    case OptLevel::O1: p.dtype = DType::F16, p.autocast = true, p.dynamic_loss_scale = true; break;
    case OptLevel::O2:
      p.dtype = DType::F16, p.cast_model = true, p.keep_batchnorm_fp32 = true, p.master_weights = true;
      p.dynamic_loss_scale = true;
      break;
    case OptLevel::O3: p.dtype = DType::F16, p.cast_model = true; break;
  }
  if (p.dynamic_loss_scale) p.loss_scale = 65536.0;
  return p;
}

void apply(Properties& p, const Overrides& o) {
  if (o.dtype) {
    HG_CHECK(*o.dtype == DType::F16 || *o.dtype == DType::BF16, "amp::initialize: dtype override ", *o.dtype,
             " is not a low precision; use DType::F16 or DType::BF16");
    HG_CHECK(p.level != OptLevel::O0, "amp::initialize: O0 is pure F32 and takes no dtype override");
    p.dtype = *o.dtype;
  }
  if (o.keep_batchnorm_fp32) p.keep_batchnorm_fp32 = *o.keep_batchnorm_fp32;
  if (o.master_weights) p.master_weights = *o.master_weights;
  if (o.loss_scale) {
    HG_CHECK(*o.loss_scale > 0, "amp::initialize: loss_scale ", *o.loss_scale, " must be > 0");
    p.loss_scale = *o.loss_scale;
    p.dynamic_loss_scale = false;
  }
}

// Batch-norm layers back to F32 after the model was cast (their statistics need the range).
void batchnorm_to_f32(nn::Module& m) {
  for (const auto& [name, child] : m.named_children()) {
    if (dynamic_cast<nn::BatchNormBase*>(child.get())) child->to(DType::F32);
    else batchnorm_to_f32(*child);
  }
}

}  // namespace

GradScalerOptions Properties::scaler_options() const {
  GradScalerOptions s;
  s.enabled = level != OptLevel::O0 && (dynamic_loss_scale || loss_scale != 1.0);
  s.init_scale = loss_scale;
  s.dynamic = dynamic_loss_scale;
  return s;
}

Properties initialize(nn::Module& model, optim::Optimizer& opt, OptLevel level, Overrides o) {
  Properties p = defaults(level);
  apply(p, o);
  if (p.cast_model) {
    model.to(p.dtype);
    if (p.keep_batchnorm_fp32) batchnorm_to_f32(model);
  }
  opt.set_master_weights(p.master_weights ? optim::MasterWeights::Auto : optim::MasterWeights::Off);
  if (o.verbose) std::cout << p << std::flush;
  return p;
}

std::ostream& operator<<(std::ostream& os, const Properties& p) {
  const auto yes = [](bool b) { return b ? "True" : "False"; };
  os << "amp: opt_level " << level_name(p.level) << "\n"
     << "  dtype               : " << dtype_name(p.dtype) << "\n"
     << "  autocast            : " << yes(p.autocast) << "\n"
     << "  cast_model_type     : " << (p.cast_model ? dtype_name(p.dtype) : "None") << "\n"
     << "  keep_batchnorm_fp32 : " << yes(p.keep_batchnorm_fp32) << "\n"
     << "  master_weights      : " << yes(p.master_weights) << "\n"
     << "  loss_scale          : ";
  if (p.dynamic_loss_scale) os << "dynamic (initial " << p.loss_scale << ")";
  else os << p.loss_scale;
  return os << "\n";
}

}  // namespace hg::amp
