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
// whole model. The accessors of state (master, state_buffers, step_count, compensation) answer for this rank's shard
// and are empty for the others' parameters; local() is the optimizer of the shard, for the memory ledger.
//
// Where the gradients come from (ZeroOptions::reduce_scatter_gradients):
//   false (torch's ZeroRedundantOptimizer): the model is wrapped in nn::DistributedDataParallel, whose all-reduce
//     gives every rank every averaged gradient; the scaler's found_inf is the same on every rank.
//   true (ZeRO with sharded gradients, no DDP): the parameters are broadcast from rank 0 here, and at the end of each
//     backward one reduce-scatter gives each rank the average of its own shard's gradients (the others' are dropped,
//     saving their memory). found_inf then differs between ranks: amp::GradScaler agrees on it (MAX over the ranks,
//     as torch's ShardedGradScaler) before any rank steps, and clip_grad_norm_(opt, ...) sums the norm over the ranks.
//     Gradient accumulation needs nothing more: each backward reduces what it added. Module buffers (BatchNorm's
//     running statistics) are not synchronized.
//
// Checkpoints (torch's protocol): every rank calls consolidate_state_dict(to); rank `to`'s state_dict() is then
// the state dict a plain optimizer over all the parameters would have (the same keys, indices and bits), so it
// loads into a plain optimizer, and a plain optimizer's loads here. load_state_dict(full) on every rank keeps this
// rank's shard of it, whatever the world size that saved it (re-sharding).
#include <functional>
#include <memory>
#include <vector>

#include "optim/optimizer.h"

namespace hg::optim {

struct ZeroOptions {
  // Reduce-scatter the gradients at the end of each backward instead of taking DDP's all-reduced ones (above).
  bool reduce_scatter_gradients = false;
};

class ZeroRedundantOptimizer final : public Optimizer {
 public:
  // The optimizer of each rank's shard, made from the shard's parameters.
  using Factory = std::function<std::unique_ptr<Optimizer>(std::vector<Tensor> shard)>;
  // Needs hg::dist::init_process_group(); every rank passes the same parameters in the same order.
  ZeroRedundantOptimizer(std::vector<Tensor> params, Factory make_shard_optimizer, ZeroOptions options = {});
  // A copy of `like` (its options, master weights and rounding: Optimizer::clone_for) over each rank's shard.
  ZeroRedundantOptimizer(std::vector<Tensor> params, const Optimizer& like, ZeroOptions options = {});
  ~ZeroRedundantOptimizer() override;

  using Optimizer::step;
  // The shard's update, then every rank's updated parameters all-gathered (one all-gather per dtype).
  void step(const AmpStep& amp) override;
  bool gradients_sharded() const override { return options_.reduce_scatter_gradients && world_ > 1; }

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

  // Collective (every rank calls it): gathers every rank's shard of the state on rank `to`.
  void consolidate_state_dict(int to = 0);
  // On rank `to` after consolidate_state_dict(to), with no step since: the whole state, as a plain optimizer's.
  // An hg::Error elsewhere, naming the fix.
  StateDict state_dict() const override;
  // Every rank passes the same whole state dict (a plain optimizer's, or a consolidated one from any world size);
  // each keeps its shard's entries. All or nothing, as every optimizer's.
  void load_state_dict(const StateDict& sd) override;

  int owner(size_t i) const;                  // the rank that updates parameter i
  Optimizer& local() { return *local_; }      // the optimizer of this rank's shard
  const Optimizer& local() const { return *local_; }

 private:
  // The parameters of one dtype laid out for the collectives: rank r's owned ones (in index order) at r * per_rank,
  // each rank's part padded to per_rank elements (reduce-scatter and all-gather take equal parts).
  struct Slab {
    DType dtype;
    int64_t per_rank = 0;
    std::vector<std::vector<size_t>> members;  // by rank: parameter indices
  };
  std::vector<Slab> slabs() const;
  void reduce_scatter_grads();

  ZeroOptions options_;
  int rank_ = 0, world_ = 1;
  std::vector<Tensor> params_;
  std::vector<HookHandle> hooks_;  // reduce_scatter_gradients: the backward's end reduces the gradients
  bool reduce_queued_ = false;
  std::vector<char> fresh_;     // by parameter: this backward reached it (its hook ran)
  std::vector<Tensor> held_;    // by parameter: its gradient before this backward, set aside by the hook
  int64_t steps_ = 0;                 // step() calls, to refuse a stale consolidated state
  int consolidated_to_ = -1;          // the rank the last consolidate_state_dict gathered on
  int64_t consolidated_at_ = -1;      // steps_ then
  StateDict consolidated_;            // on that rank: every rank's shard under its global indices
  std::vector<int> owner_;        // by parameter
  std::vector<int64_t> local_i_;  // by parameter: its index in local_ (-1: another rank's)
  std::unique_ptr<Optimizer> local_;
};

}  // namespace hg::optim
