#include "optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace hg::optim {
namespace {

double read_scalar(const char* sched, const StateDict& sd, const std::string& key, std::set<std::string>& used) {
  auto it = sd.find(key);
  HG_CHECK(it != sd.end() && it->second.defined(), sched, ".load_state_dict: missing entry '", key,
           "'; the state dict was saved by another scheduler or for another optimizer");
  HG_CHECK(it->second.ndim() == 0 && it->second.dtype() == DType::F64, sched, ".load_state_dict: entry '", key,
           "' has shape ", it->second.shape(), " and dtype ", it->second.dtype(), "; it must be a 0-d F64 tensor");
  used.insert(key);
  return it->second.item<double>();
}

}  // namespace

// ---- LRScheduler --------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& opt) : opt_(opt) {
  for (size_t g = 0; g < opt.num_param_groups(); ++g) base_lrs_.push_back(opt.lr(g));
}

void LRScheduler::start() { apply(0); }

// Computes every group's lr first, so a failing lr_at (OneCycleLR past its end) changes nothing.
void LRScheduler::apply(int64_t t) {
  HG_CHECK(opt_.num_param_groups() == base_lrs_.size(), name(), ": the optimizer has ", opt_.num_param_groups(),
           " parameter groups but had ", base_lrs_.size(), " when the scheduler was made; make a new scheduler");
  std::vector<double> lrs(base_lrs_.size()), momenta(base_lrs_.size());
  for (size_t g = 0; g < lrs.size(); ++g) {
    lrs[g] = lr_at(t, g);
    momenta[g] = momentum_at(t, g);
  }
  for (size_t g = 0; g < lrs.size(); ++g) {
    opt_.set_lr(g, lrs[g]);
    if (momenta[g] >= 0) opt_.set_momentum(g, momenta[g]);
  }
  last_epoch_ = t;
  last_lr_ = std::move(lrs);
}

void LRScheduler::step() { apply(last_epoch_ + 1); }

void LRScheduler::save(StateDict& sd, const std::string& prefix) const {
  sd[prefix + "last_epoch"] = full(Shape{}, static_cast<double>(last_epoch_), {.dtype = DType::F64});
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    sd[prefix + "base_lrs." + std::to_string(g)] = full(Shape{}, base_lrs_[g], {.dtype = DType::F64});
}

void LRScheduler::load(const StateDict& sd, const std::string& prefix, std::set<std::string>& used) {
  const double t = read_scalar(name(), sd, prefix + "last_epoch", used);
  HG_CHECK(t >= 0 && t == std::floor(t), name(), ".load_state_dict: last_epoch=", t, "; it must be a whole number >= 0");
  for (size_t g = 0; g < base_lrs_.size(); ++g)
    base_lrs_[g] = read_scalar(name(), sd, prefix + "base_lrs." + std::to_string(g), used);
  last_epoch_ = static_cast<int64_t>(t);
}

StateDict LRScheduler::state_dict() const {
  StateDict sd;
  save(sd, "");
  return sd;
}

void LRScheduler::load_state_dict(const StateDict& sd) {
  const StateDict before = state_dict();  // all or nothing: restored (wrapped schedules too) on failure
  std::set<std::string> used;
  try {
    load(sd, "", used);
    for (const auto& [key, t] : sd)
      HG_CHECK(used.count(key), name(), ".load_state_dict: unexpected entry '", key,
               "'; the state dict was saved by another scheduler or for another optimizer");
    apply(last_epoch_);
  } catch (...) {
    std::set<std::string> ignored;
    load(before, "", ignored);
    throw;
  }
}

// ---- StepLR ---------------------------------------------------------------------------------------

StepLR::StepLR(Optimizer& opt, StepLROptions o) : LRScheduler(opt), o_(o) {
  HG_CHECK(o.step_size > 0, "StepLR: step_size=", o.step_size, "; give the number of steps between decays (> 0)");
  start();
}

double StepLR::lr_at(int64_t t, size_t g) const {
  return base_lrs_[g] * std::pow(o_.gamma, static_cast<double>(t / o_.step_size));
}

// ---- CosineAnnealingLR ------------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, CosineAnnealingLROptions o) : LRScheduler(opt), o_(o) {
  HG_CHECK(o.T_max > 0, "CosineAnnealingLR: T_max=", o.T_max, "; give the number of steps of the half cosine (> 0)");
  start();
}

double CosineAnnealingLR::lr_at(int64_t t, size_t g) const {
  const double pi = std::numbers::pi;
  return o_.eta_min + (base_lrs_[g] - o_.eta_min) * (1 + std::cos(pi * static_cast<double>(t) / static_cast<double>(o_.T_max))) / 2;
}

// ---- LinearWarmup -------------------------------------------------------------------------------

LinearWarmup::LinearWarmup(Optimizer& opt, LinearWarmupOptions o, std::unique_ptr<LRScheduler> after)
    : LRScheduler(opt), o_(o), after_(std::move(after)) {
  HG_CHECK(o.warmup_steps > 0, "LinearWarmup: warmup_steps=", o.warmup_steps, "; it must be > 0");
  HG_CHECK(o.start_factor > 0 && o.start_factor <= 1, "LinearWarmup: start_factor=", o.start_factor,
           "; it must be in (0, 1]");
  if (after_) {
    HG_CHECK(&optimizer_of(*after_) == &opt, "LinearWarmup: the schedule after the warmup was made for another "
             "optimizer; make both on the same one");
    base_lrs_ = after_->base_lrs();  // `after` already set the groups' lr to its step 0's
  }
  start();
}

double LinearWarmup::lr_at(int64_t t, size_t g) const {
  if (t >= o_.warmup_steps) return after_ ? lr_of(*after_, t - o_.warmup_steps, g) : base_lrs_[g];
  const double target = after_ ? lr_of(*after_, 0, g) : base_lrs_[g];
  const double f = o_.start_factor + (1 - o_.start_factor) * static_cast<double>(t) / static_cast<double>(o_.warmup_steps);
  return target * f;
}

void LinearWarmup::save(StateDict& sd, const std::string& prefix) const {
  LRScheduler::save(sd, prefix);
  if (after_) save_of(*after_, sd, prefix + "after.");
}

void LinearWarmup::load(const StateDict& sd, const std::string& prefix, std::set<std::string>& used) {
  if (after_) load_of(*after_, sd, prefix + "after.", used);
  LRScheduler::load(sd, prefix, used);
}

// ---- OneCycleLR -----------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& opt, OneCycleLROptions o) : LRScheduler(opt), o_(o) {
  HG_CHECK(o.max_lr != kRequired && o.max_lr >= 0, "OneCycleLR: max_lr is required (>= 0); pass it, e.g. "
           "OneCycleLR(opt, {.max_lr = 0.1, .total_steps = 1000})");
  HG_CHECK(o.total_steps > 0, "OneCycleLR: total_steps=", o.total_steps, "; it must be > 0");
  HG_CHECK(o.pct_start >= 0 && o.pct_start <= 1, "OneCycleLR: pct_start=", o.pct_start, "; it must be in [0, 1]");
  HG_CHECK(o.div_factor > 0 && o.final_div_factor > 0, "OneCycleLR: div_factor=", o.div_factor,
           " and final_div_factor=", o.final_div_factor, " must be > 0");
  const double up_end = o.pct_start * static_cast<double>(o.total_steps) - 1;
  HG_CHECK(up_end > 0 && static_cast<double>(o.total_steps - 1) > up_end, "OneCycleLR: pct_start=", o.pct_start,
           " of total_steps=", o.total_steps, " leaves a phase without steps; use more steps or another pct_start");
  HG_CHECK(!o.cycle_momentum || (o.base_momentum >= 0 && o.base_momentum <= o.max_momentum && o.max_momentum < 1),
           "OneCycleLR: base_momentum=", o.base_momentum, " and max_momentum=", o.max_momentum,
           "; they must satisfy 0 <= base_momentum <= max_momentum < 1 (or set cycle_momentum = false)");
  start();
}

// torch's phases: up over steps [0, up_end], down over [up_end, total_steps - 1] (pct_start * total_steps - 1
// may be fractional); annealing from a to b at fraction x: cos: b + (a - b) / 2 * (cos(pi x) + 1),
// linear: (b - a) * x + a. Steps up to total_steps are allowed, as in torch.
double OneCycleLR::lr_at(int64_t t, size_t) const {
  HG_CHECK(t <= o_.total_steps, "OneCycleLR: tried to step ", t, " times; total_steps is ", o_.total_steps,
           "; make the schedule with more total_steps");
  const double initial = o_.max_lr / o_.div_factor;
  return anneal(t, initial, o_.max_lr, initial / o_.final_div_factor);
}

// torch: max_momentum -> base_momentum over the first phase, back to max_momentum over the second.
double OneCycleLR::momentum_at(int64_t t, size_t) const {
  if (!o_.cycle_momentum) return -1.0;
  return anneal(t, o_.max_momentum, o_.base_momentum, o_.max_momentum);
}

double OneCycleLR::anneal(int64_t t, double first, double peak, double last_value) const {
  const double up_end = o_.pct_start * static_cast<double>(o_.total_steps) - 1;
  const double last = static_cast<double>(o_.total_steps - 1), x = static_cast<double>(t);
  const bool up = x <= up_end;
  const double a = up ? first : peak, b = up ? peak : last_value;
  // torch extrapolates past the last step (t = total_steps, the lr set by a loop's final sched.step(),
  // never used), which goes negative with linear annealing; hold the last value there instead.
  const double pct = up ? x / up_end : std::min((x - up_end) / (last - up_end), 1.0);
  if (o_.anneal_strategy == Anneal::Linear) return (b - a) * pct + a;
  return b + (a - b) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
}

}  // namespace hg::optim
