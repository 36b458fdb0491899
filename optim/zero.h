#pragma once
// optim::ZeroRedundantOptimizer: ZeRO stage 1, as torch.distributed.optim.ZeroRedundantOptimizer. Under data
// parallelism every rank holds the same parameters and, after DDP's all-reduce, the same gradients; an ordinary
// optimizer would also keep the same state on every rank (momentum, Adam's moments, the F32 masters of F16
// parameters). Here each rank keeps the state of its shard only (about 1/W of the parameters), updates those, and
// sends them to the other ranks (one broadcast per rank and dtype), so every rank ends the step with the whole
// updated model.
//
//   nn::DistributedDataParallel ddp(model);
//   optim::SGD like(model->parameters(), {.lr = 0.1, .momentum = 0.9});   // the optimizer to shard
//   optim::ZeroRedundantOptimizer opt(model->parameters(), like);           // each rank: a copy over its shard
//   ... loss.backward(); opt.step();                                        // or scaler.step(opt)
//
// The parameters are split as torch splits them: by size, largest first, each to the rank with the fewest elements
// so far. param_groups (group_params) hold every parameter, so zero_grad, schedulers, clipping and GradScaler see the
// whole model: after DDP's all-reduce every rank holds every gradient, the scaler's found_inf is the same on every
// rank, and no consensus is needed (a scheme that reduce-scatters the gradients would need one). The accessors of
// state (master, state_buffers, step_count, compensation) answer for this rank's shard and are empty for the
// others' parameters; local() is the optimizer of the shard, for the memory ledger. The state dict is per rank:
// each rank saves and loads its shard's (local().state_dict()); state_dict() itself is refused.
#include <functional>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

class ZeroRedundantOptimizer final : public Optimizer {
 public:
  // The optimizer of each rank's shard, made from the shard's parameters.
  using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor> shard)>;
  // Needs hg::dist::init_process_group(); every rank passes the same parameters in the same order.
  ZeroRedundantOptimizer(std::vector<Tensor> params, Factory make_shard_optimizer);
  // A copy of `like` (its options, master weights and rounding: Optimizer::clone_for) over each rank's shard.
  ZeroRedundantOptimizer(std::vector<Tensor> params, const Optimizer& like);

  using Optimizer::step;
  // The shard's update, then every rank's updated parameters broadcast from it.
  void step(const AmpStep& amp) override;

  size_t num_param_groups() const override { return 1; }
  const std::vector<Tensor>& group_params(size_t group) const override;
  double lr(size_t group) const override;
  void set_lr(size_t group, double lr) override;
  double momentum(size_t group) const override;
  void set_momentum(size_t group, double momentum) override;

  void set_master_weights(MasterWeights mode) override { local_->set_master_weights(mode); }
  MasterWeights master_weights() const override { return local_->master_weights(); }
  void set_param_rounding(ParamRounding rounding, uint64_t seed = 0) override;
  ParamRounding param_rounding() const override { return local_->param_rounding(); }
  Tensor compensation(size_t i) const override;
  Tensor master(size_t i) const override;
  const std::vector<Tensor>& state_buffers(size_t i) const override;
  StepCount step_count(size_t i) const override;

  StateDict state_dict() const override;           // refused: the state is split over the ranks
  void load_state_dict(const StateDict& sd) override;  // refused, as state_dict

  int owner(size_t i) const;                  // the rank that updates parameter i
  Optimizer& local() { return *local_; }      // the optimizer of this rank's shard
  const Optimizer& local() const { return *local_; }

 private:
  int rank_ = 0, world_ = 1;
  std::vector<Tensor> params_;
  std::vector<int> owner_;        // by parameter
  std::vector<int64_t> local_i_;  // by parameter: its index in local_ (-1: another rank's)
  std::unique_ptr<Optimizer> local_;
};

}  // namespace hg::optim
