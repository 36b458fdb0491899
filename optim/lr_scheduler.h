#pragma once
// Learning-rate schedules (torch.optim.lr_scheduler), in closed form: the lr of step t is a function
// of t and the groups' base lrs, so a schedule restored from its state dict continues exactly.
// Making a scheduler records the groups' current lrs as base lrs and sets step 0's lr; each step()
// (after optimizer.step(), as in torch) advances one step and sets every group's lr.
//   hg::optim::SGD opt(params, {.lr = 0.1});
//   hg::optim::CosineAnnealingLR sched(opt, {.T_max = 100});
//   for (...) { ...; opt.step(); sched.step(); }
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  const std::vector<double>& get_last_lr() const { return last_lr_; }  // one per group
  int64_t last_epoch() const { return last_epoch_; }                    // steps taken; 0 after construction
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  // "last_epoch" and "base_lrs.<g>" (0-d F64; a wrapped schedule's under "after."). Loading sets the
  // groups' lrs to the restored step's.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& sd);

 protected:
  explicit LRScheduler(Optimizer& opt);
  // The lr of group g at step t >= 0.
  virtual double lr_at(int64_t t, size_t g) const = 0;
  // The momentum of group g at step t (SGD's momentum, Adam's beta1), for schedules that cycle it;
  // negative: the schedule leaves momentum alone.
  virtual double momentum_at(int64_t, size_t) const { return -1.0; }
  virtual const char* name() const = 0;
  // Sets step 0's lrs: the last call of every derived constructor (the base constructor cannot
  // reach the derived lr_at).
  void start();
  virtual void save(StateDict& sd, const std::string& prefix) const;
  virtual void load(const StateDict& sd, const std::string& prefix, std::set<std::string>& used);
  static double lr_of(const LRScheduler& s, int64_t t, size_t g) { return s.lr_at(t, g); }
  static Optimizer& optimizer_of(const LRScheduler& s) { return s.opt_; }
  static void save_of(const LRScheduler& s, StateDict& sd, const std::string& prefix) { s.save(sd, prefix); }
  static void load_of(LRScheduler& s, const StateDict& sd, const std::string& prefix, std::set<std::string>& used) {
    s.load(sd, prefix, used);
  }

  Optimizer& opt_;
  std::vector<double> base_lrs_;

 private:
  void apply(int64_t t);
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

// lr = base_lr * gamma^(t / step_size) (integer division): torch.optim.lr_scheduler.StepLR.
struct StepLROptions {
  int64_t step_size = 0;  // required, > 0
  double gamma = 0.1;
};
class StepLR final : public LRScheduler {
 public:
  StepLR(Optimizer& opt, StepLROptions o);

 private:
  double lr_at(int64_t t, size_t g) const override;
  const char* name() const override { return "StepLR"; }
  StepLROptions o_;
};

// lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2: CosineAnnealingLR's closed form.
struct CosineAnnealingLROptions {
  int64_t T_max = 0;  // required, > 0
  double eta_min = 0;
};
class CosineAnnealingLR final : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, CosineAnnealingLROptions o);

 private:
  double lr_at(int64_t t, size_t g) const override;
  const char* name() const override { return "CosineAnnealingLR"; }
  CosineAnnealingLROptions o_;
};

// For t < warmup_steps: lr = target * (start_factor + (1 - start_factor) * t / warmup_steps) (torch's
// LinearLR); then the schedule `after`, started at step t - warmup_steps (torch's SequentialLR with one
// milestone), or the base lr without one. target is after's step-0 lr (else the base lr). `after` must
// be made on the same optimizer just before; the warmup drives it: step only the warmup.
struct LinearWarmupOptions {
  int64_t warmup_steps = 0;  // required, > 0
  double start_factor = 1.0 / 3;  // in (0, 1]
};
class LinearWarmup final : public LRScheduler {
 public:
  LinearWarmup(Optimizer& opt, LinearWarmupOptions o, std::unique_ptr<LRScheduler> after = nullptr);

 private:
  double lr_at(int64_t t, size_t g) const override;
  const char* name() const override { return "LinearWarmup"; }
  void save(StateDict& sd, const std::string& prefix) const override;
  void load(const StateDict& sd, const std::string& prefix, std::set<std::string>& used) override;
  LinearWarmupOptions o_;
  std::unique_ptr<LRScheduler> after_;
};

// torch.optim.lr_scheduler.OneCycleLR (two phases): from max_lr / div_factor up to max_lr over the
// first pct_start * total_steps steps, then down to max_lr / div_factor / final_div_factor at step
// total_steps - 1 (and held there at step total_steps, which torch allows and extrapolates). Sets
// the groups' lr itself (base lrs are not used). With cycle_momentum (torch's default) the momentum
// (SGD's momentum, Adam's and AdamW's beta1) runs the other way, from max_momentum down to base_momentum
// and back up, with the same annealing: an SGD made without momentum trains with it, as in torch.
enum class Anneal : uint8_t { Cos, Linear };
struct OneCycleLROptions {
  double max_lr = kRequired;  // required
  int64_t total_steps = 0;    // required, > 0
  double pct_start = 0.3;
  Anneal anneal_strategy = Anneal::Cos;
  double div_factor = 25;
  double final_div_factor = 1e4;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};
class OneCycleLR final : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, OneCycleLROptions o);

 private:
  double lr_at(int64_t t, size_t g) const override;
  double momentum_at(int64_t t, size_t g) const override;
  const char* name() const override { return "OneCycleLR"; }
  // The value annealed from `first` through `peak` (at the end of the first phase) to `last` at step t.
  double anneal(int64_t t, double first, double peak, double last) const;
  OneCycleLROptions o_;
};

}  // namespace hg::optim
