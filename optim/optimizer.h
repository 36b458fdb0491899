#pragma once
// Optimizer: parameter groups, per-parameter state created at a parameter's first step, zero_grad and
// a flat state_dict of named tensors (safetensors-ready). OptimizerOf<Derived, Options> holds the typed
// groups of one optimizer (SGD, Adam, AdamW); Optimizer is the view schedulers, clipping and the grad
// scaler use, whatever the optimizer. Two parts are the same for every optimizer: the parameters' store
// precision (masters, stochastic and Kahan rounding: optim/param_precision.h) and what lives in device
// memory (step counters, hyper-parameters: optim/device_mirror.h). An optimizer's step runs its update
// rule (ops/kernels/optim_rules.h) over every parameter with a gradient (optim/update.h). step() makes no
// tensor and calls no op after a parameter's first step: one kernel call per parameter.
#include <concepts>
#include <cstdint>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/chained_options.h"
#include "core/state_dict.h"
#include "core/tensor.h"
#include "optim/amp_step.h"
#include "optim/device_mirror.h"
#include "optim/param_precision.h"

namespace hg::optim {

// A flat map of named tensors. Keys (<i> counts the parameters of all groups in order, as torch's
// optimizer.state_dict() does):
//   group.<g>.<option>  0-d F64 (bools as 0/1)    group.<g>.params  1-d I64: the indices <i> of its parameters
//   state.<i>.<buffer>  the parameter's shape; F32 (F64 for an F64 parameter), on the parameter's device
//   state.<i>.step      0-d F64 (optimizers that count steps: Adam, AdamW)
//   state.<i>.master    the F32 master copy of an F16/BF16 parameter (master weights on)
//   state.<i>.compensation  the Kahan compensation of an F16/BF16 parameter (its dtype; ParamRounding::Kahan)
//   rounding.generator  1-d I64 {seed, offset}: the stochastic rounding's Philox stream (ParamRounding::Stochastic)
// A parameter that never took a step has no state.<i> entries.
using hg::StateDict;  // core/state_dict.h

struct UpdateArgs;  // ops/kernels/optim.h

// The default of an option that has none and must be given (torch's `required`: SGD's lr).
inline constexpr double kRequired = std::numeric_limits<double>::lowest();

template <class Options>
struct ParamGroup {
  std::vector<Tensor> params;
  Options options = {};  // every option of the group (a group does not inherit another's)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; a parameter without one is skipped (torch).
  // A gradient the grad scaler left scaled carries its factor (Tensor::grad_unscale), which the update
  // applies, so calling step() after scaler.unscale_(opt) is right too (torch's recipe without
  // scaler.step skips no step).
  void step();
  // The grad scaler's step (amp::GradScaler::step): on its device path `amp` carries the found_inf flag
  // the update kernels read (a set flag leaves every parameter, master and state untouched, and the step
  // is not counted).
  virtual void step(const AmpStep& amp) = 0;
  // Drops every parameter's gradient (torch's zero_grad(set_to_none=True)).
  void zero_grad();

  virtual size_t num_param_groups() const = 0;
  virtual const std::vector<Tensor>& group_params(size_t group) const = 0;
  virtual double lr(size_t group) const = 0;
  virtual void set_lr(size_t group, double lr) = 0;
  // The momentum schedulers cycle (torch's OneCycleLR with cycle_momentum): SGD's momentum, Adam's and
  // AdamW's beta1. set_momentum checks the value as the constructor would, and reaches the device as
  // set_lr does.
  virtual double momentum(size_t group) const = 0;
  virtual void set_momentum(size_t group, double momentum) = 0;
  std::vector<Tensor> parameters() const;  // of all groups, in order: parameter <i> of the state dict

  // Auto by default. Switching to Off drops the masters (the parameters keep their rounded values);
  // switching back makes new ones from the parameters at their next step.
  // (MasterWeights: optim/param_precision.h.)
  // Virtual, as the accessors below: optim::ZeroRedundantOptimizer answers them from the optimizer of its shard.
  virtual void set_master_weights(MasterWeights mode);
  virtual MasterWeights master_weights() const { return precision_.master_weights(); }
  // How an F16/BF16 parameter without a master copy takes its update (core/stochastic_round.h): Nearest (the
  // default, Apex O3: an update below half an ulp of the weight is lost), Stochastic (rounded up with
  // probability equal to the distance, so updates survive in expectation; Philox bits from a generator
  // seeded with `seed`, saved in the state dict) or Kahan (a compensation buffer in the parameter's dtype
  // carries what each rounding lost into the next step: 2 more bytes per parameter). Stochastic and Kahan
  // need set_master_weights(MasterWeights::Off) first; F32/F64 parameters are not affected. Switching away
  // from Kahan drops the compensation buffers.
  virtual void set_param_rounding(ParamRounding rounding, uint64_t seed = 0);
  virtual ParamRounding param_rounding() const { return precision_.param_rounding(); }
  // Parameter i's Kahan compensation (the live tensor); undefined unless it took a Kahan store.
  virtual Tensor compensation(size_t i) const;
  // Parameter i's F32 master copy (shares storage: a view, not a snapshot); undefined for F32/F64
  // parameters, with masters Off, or before the parameter's first step.
  virtual Tensor master(size_t i) const;
  // Parameter i's optimizer buffers (momentum; Adam's moments) -- the live tensors, not copies, for
  // inspectors (amp/inspect's MemoryLedger); empty before its first step. step_count(i) is its step
  // counter: steps() is the device counter (I64, one element) where the scaler's device path made one,
  // else undefined and `host` counts.
  virtual const std::vector<Tensor>& state_buffers(size_t i) const;
  struct StepCount {
    int64_t host = 0;
    Tensor device;
  };
  virtual StepCount step_count(size_t i) const;
  // True when each rank of a process group holds the gradients of part of the parameters only
  // (optim::ZeroRedundantOptimizer with reduce_scatter_gradients): amp::GradScaler then agrees on found_inf over
  // the ranks (MAX) before any rank steps, and clip_grad_norm_(opt, ...) adds up the norm over the ranks.
  virtual bool gradients_sharded() const { return false; }

  // A new optimizer of the same kind over `params`: the options of this one's single group, its master-weight mode
  // and rounding, no state (optim::ZeroRedundantOptimizer builds each rank's optimizer of its shard with it). An
  // hg::Error for an optimizer with several groups, or one that cannot make copies.
  virtual std::unique_ptr<Optimizer> clone_for(std::vector<Tensor> params) const;

  // A snapshot: the state is copied, so later steps do not change a saved dict.
  virtual StateDict state_dict() const = 0;
  // For the same parameters in the same groups and order: restores options and state exactly, so
  // the steps that follow are bit for bit those of the optimizer that saved. All or nothing: a
  // missing, unexpected or wrongly shaped entry throws hg::Error naming it and changes nothing.
  virtual void load_state_dict(const StateDict& sd) = 0;

 protected:
  Optimizer() = default;
  // An optimizer's buffer names, in static storage: step() counts the buffers without allocating.
  using StateNames = std::span<const char* const>;

 private:
  template <class Derived, class Options>
  friend class OptimizerOf;  // the one user of what follows

  struct ParamState {
    int64_t step = 0;             // steps counted on the host (optimizers that count steps)
    std::vector<Tensor> buffers;  // the optimizer's named buffers; empty until the first step
  };

  // Checks the new group's parameters (defined, floating, leaf, in no other group) and gives them the
  // next indices <i>.
  void add_params(const char* opt, const std::vector<Tensor>& params);
  // The update kernel's arguments for parameter i (group g, gradient `grad`): its first num_buffers
  // buffers (made as zeros at its first step), master, store, the group's hyper-parameters and the
  // device step; the host counts the step when `counts_steps` and no device counter does.
  UpdateArgs prepare_update(const char* opt, size_t i, size_t g, const Tensor& p, const Tensor& grad,
                               const AmpStep& amp, size_t num_buffers, bool counts_steps,
                               std::span<const double> hyper);
  // Parameter i's buffers, created as zeros at its first step; true when they were just created.
  bool ensure_state(const char* opt, size_t i, const Tensor& p, size_t num_buffers);
  static void check_grad(const char* opt, size_t i, const Tensor& p, const Tensor& g) {
    if (g.dtype() != p.dtype() || g.numel() != p.numel() || !(g.device() == p.device())) [[unlikely]]
      bad_grad(opt, i, p, g);
  }
  [[noreturn]] static void bad_grad(const char* opt, size_t i, const Tensor& p, const Tensor& g);

  // state_dict helpers; names[g] are the buffer names of group g's parameters.
  static std::string group_key(size_t g, const char* option);
  static Tensor scalar(double v);
  static double read_option(const char* opt, const StateDict& sd, const std::string& key,
                            std::set<std::string>& used);
  void save_state(StateDict& sd, const std::vector<StateNames>& names, bool with_step) const;
  // Reads and checks rounding.generator and every group.<g>.params and state.<i>.* entry, rejects any
  // entry not in `used`, and only then replaces the state (all or nothing).
  void load_state(const char* opt, const StateDict& sd, const std::vector<StateNames>& names, bool with_step,
                  std::set<std::string>& used);
  std::vector<ParamState> read_state(const char* opt, const StateDict& sd, const std::vector<StateNames>& names,
                                     bool with_step, ParamPrecision::Loaded& precision,
                                     std::set<std::string>& used) const;

  std::vector<ParamState> state_;    // by parameter index <i>
  std::vector<size_t> group_begin_;  // index <i> of each group's first parameter
  ParamPrecision precision_;         // masters, rounding of the store, by <i>
  DeviceMirror mirror_;              // device step counters by <i>, hyper-parameters by group
};

// The typed groups of one optimizer. Derived provides (privately, befriending this class):
//   static constexpr const char* kName;  static constexpr bool kCountsSteps;
//   static void check_options(const Options&);   // throws hg::Error naming the bad option
//   static Optimizer::StateNames state_names(const Options&);  // its buffers, a span of static names
//   static std::array<double, N> hyper(const Options&);  // in its rule's *HyperIndex order (flags as 0/1)
//   void step(const AmpStep& amp) override { run_updates<ItsRule>(amp); }  // in its .cpp (optim/update.h)
// and a free visit_options(Options&, f) calling f(name, field) for each option (found by ADL).
template <class Derived, class Options>
class OptimizerOf : public Optimizer {
 public:
  using Group = ParamGroup<Options>;

  explicit OptimizerOf(std::vector<Tensor> params, Options options = {}) {
    HG_CHECK(!params.empty(), Derived::kName, ": got an empty parameter list; pass the model's parameters");
    add_param_group({std::move(params), options});
  }
  // libtorch's SGD(params, 0.01): the learning rate alone, every other option at its default (a number only:
  // {} still means the options)
  template <class L>
    requires std::is_arithmetic_v<L>
  OptimizerOf(std::vector<Tensor> params, L lr) : OptimizerOf(std::move(params), with_lr(static_cast<double>(lr))) {}
  static Options with_lr(double lr) {
    Options o;
    o.lr = lr;
    return o;
  }
  // libtorch's chained options, e.g. Adam(params, AdamOptions(1e-3).weight_decay(1e-4)) (core/chained_options.h)
  template <class O>
    requires std::derived_from<O, ChainedOptions<Options>>
  OptimizerOf(std::vector<Tensor> params, const O& options) : OptimizerOf(std::move(params), options.args()) {}
  explicit OptimizerOf(std::vector<Group> groups) {
    HG_CHECK(!groups.empty(), Derived::kName, ": got no parameter groups; pass at least one");
    for (Group& g : groups) add_param_group(std::move(g));
  }

  void add_param_group(Group g) {
    Derived::check_options(g.options);
    add_params(Derived::kName, g.params);
    groups_.push_back(std::move(g));
  }
  // Options may be changed between steps (schedulers set lr); parameters may not.
  std::span<Group> param_groups() { return groups_; }
  std::span<const Group> param_groups() const { return groups_; }

  size_t num_param_groups() const override { return groups_.size(); }
  const std::vector<Tensor>& group_params(size_t g) const override { return group(g).params; }
  double lr(size_t g) const override { return group(g).options.lr; }
  void set_lr(size_t g, double lr) override {
    (void)group(g);  // checks g
    HG_CHECK(lr >= 0, Derived::kName, ": lr=", lr, " for group ", g, "; a learning rate must be >= 0");
    groups_[g].options.lr = lr;
    mirror_.upload_hyper(g, Derived::hyper(groups_[g].options));
  }
  double momentum(size_t g) const override {
    const Options& o = group(g).options;
    if constexpr (requires { o.betas; }) return o.betas[0];
    else return o.momentum;
  }
  void set_momentum(size_t g, double m) override {
    Options o = group(g).options;
    if constexpr (requires { o.betas; }) o.betas[0] = m;
    else o.momentum = m;
    Derived::check_options(o);  // throws naming the bad value; the group keeps its options
    groups_[g].options = o;
    mirror_.upload_hyper(g, Derived::hyper(o));
  }

  std::unique_ptr<Optimizer> clone_for(std::vector<Tensor> params) const override {
    HG_CHECK(groups_.size() == 1, Derived::kName, ".clone_for: the optimizer has ", groups_.size(), " parameter "
             "groups; a copy takes the options of one group");
    HG_CHECK(param_rounding() != ParamRounding::Stochastic, Derived::kName, ".clone_for: stochastic rounding draws "
             "from one Philox stream in parameter order, which a copy over other parameters cannot continue; use "
             "Nearest or Kahan rounding");
    auto copy = std::make_unique<Derived>(std::move(params), groups_[0].options);
    copy->set_master_weights(master_weights());
    if (param_rounding() == ParamRounding::Kahan) copy->set_param_rounding(ParamRounding::Kahan);
    return copy;
  }

  StateDict state_dict() const override {
    StateDict sd;
    std::vector<StateNames> names;
    for (size_t g = 0; g < groups_.size(); ++g) {
      visit_options(groups_[g].options,
                    [&](const char* name, const auto& v) { sd[group_key(g, name)] = scalar(static_cast<double>(v)); });
      names.push_back(Derived::state_names(groups_[g].options));
    }
    save_state(sd, names, Derived::kCountsSteps);
    return sd;
  }

  void load_state_dict(const StateDict& sd) override {
    std::set<std::string> used;
    std::vector<Options> options;
    std::vector<StateNames> names;
    for (size_t g = 0; g < groups_.size(); ++g) {
      Options o = groups_[g].options;
      visit_options(o, [&](const char* name, auto& v) {
        v = static_cast<std::remove_reference_t<decltype(v)>>(read_option(Derived::kName, sd, group_key(g, name), used));
      });
      Derived::check_options(o);
      names.push_back(Derived::state_names(o));
      options.push_back(o);
    }
    load_state(Derived::kName, sd, names, Derived::kCountsSteps, used);  // throws before it changes anything
    for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = options[g];
  }

 protected:
  OptimizerOf() = default;
  // Runs Rule's update kernel (ops/kernels/optim_rules.h) for each parameter that has a gradient, in index
  // order (optim/update.h, which defines this).
  template <class Rule>
  void run_updates(const AmpStep& amp);
  const Group& group(size_t g) const {
    HG_CHECK(g < groups_.size(), Derived::kName, ": group ", g, " does not exist; the optimizer has ",
             groups_.size(), " group(s)");
    return groups_[g];
  }

  std::vector<Group> groups_;
};

}  // namespace hg::optim
