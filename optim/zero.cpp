// optim::ZeroRedundantOptimizer (optim/zero.h): the partition, the shard's optimizer and the broadcast of the
// updated parameters.
#include "optim/zero.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "autograd/node.h"
#include "core/error.h"
#include "dist/dist.h"

namespace hg::optim {

ZeroRedundantOptimizer::ZeroRedundantOptimizer(std::vector<Tensor> params, const Optimizer& like)
    : ZeroRedundantOptimizer(std::move(params), [&like](std::vector<Tensor> shard) {
        return like.clone_for(std::move(shard));
      }) {}

ZeroRedundantOptimizer::ZeroRedundantOptimizer(std::vector<Tensor> params, Factory make_shard_optimizer)
    : params_(std::move(params)) {
  HG_CHECK(dist::is_initialized(), "ZeroRedundantOptimizer: the process group is not initialized; call "
           "hg::dist::init_process_group() first (every rank, launched with mpirun)");
  HG_CHECK(make_shard_optimizer != nullptr, "ZeroRedundantOptimizer: the optimizer factory is empty");
  rank_ = dist::get_rank();
  world_ = dist::get_world_size();
  HG_CHECK(static_cast<int64_t>(params_.size()) >= world_, "ZeroRedundantOptimizer: ", params_.size(),
           " parameter(s) for ", world_, " ranks; every rank needs at least one to update (use fewer ranks, or a "
           "plain optimizer)");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    HG_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "ZeroRedundantOptimizer: parameter ", i,
             " is not a leaf tensor that requires grad");
    HG_CHECK(p.is_cpu() && p.is_contiguous(), "ZeroRedundantOptimizer: parameter ", i, " must be a contiguous CPU "
             "tensor (the MPI backend broadcasts CPU tensors)");
  }
  // torch's partition: largest first (ties in order), each to the rank with the fewest elements so far
  std::vector<size_t> order(params_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return params_[a].numel() > params_[b].numel(); });
  std::vector<int64_t> load(static_cast<size_t>(world_), 0);
  owner_.assign(params_.size(), 0);
  for (size_t i : order) {
    const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    owner_[i] = r;
    load[static_cast<size_t>(r)] += params_[i].numel();
  }
  std::vector<Tensor> shard;
  local_i_.assign(params_.size(), -1);
  for (size_t i = 0; i < params_.size(); ++i)
    if (owner_[i] == rank_) {
      local_i_[i] = static_cast<int64_t>(shard.size());
      shard.push_back(params_[i]);
    }
  local_ = make_shard_optimizer(std::move(shard));
  HG_CHECK(local_ != nullptr, "ZeroRedundantOptimizer: the factory returned no optimizer");
}

void ZeroRedundantOptimizer::step(const AmpStep& amp) {
  local_->step(amp);
  // every rank's shard, one dtype at a time, broadcast from its owner into the others' copies
  NoGradGuard no_grad;
  for (int r = 0; r < world_; ++r) {
    std::map<DType, std::vector<size_t>> by_dtype;
    for (size_t i = 0; i < params_.size(); ++i)
      if (owner_[i] == r) by_dtype[params_[i].dtype()].push_back(i);
    for (const auto& [dt, idx] : by_dtype) {
      int64_t n = 0;
      for (size_t i : idx) n += params_[i].numel();
      const Tensor flat = empty({n}, {.dtype = dt});
      if (r == rank_) {
        int64_t at = 0;
        for (size_t i : idx) {
          flat.narrow(0, at, params_[i].numel()).copy_(params_[i].reshape({-1}));
          at += params_[i].numel();
        }
      }
      dist::broadcast(flat, r);
      if (r == rank_) continue;
      int64_t at = 0;
      for (size_t i : idx) {
        params_[i].copy_(flat.narrow(0, at, params_[i].numel()).view(params_[i].shape()));
        at += params_[i].numel();
      }
    }
  }
}

const std::vector<Tensor>& ZeroRedundantOptimizer::group_params(size_t group) const {
  HG_CHECK(group == 0, "ZeroRedundantOptimizer: group ", group, " does not exist; it has one group");
  return params_;
}

double ZeroRedundantOptimizer::lr(size_t group) const {
  (void)group_params(group);
  return local_->lr(0);
}
void ZeroRedundantOptimizer::set_lr(size_t group, double lr) {
  (void)group_params(group);
  local_->set_lr(0, lr);
}
double ZeroRedundantOptimizer::momentum(size_t group) const {
  (void)group_params(group);
  return local_->momentum(0);
}
void ZeroRedundantOptimizer::set_momentum(size_t group, double momentum) {
  (void)group_params(group);
  local_->set_momentum(0, momentum);
}

void ZeroRedundantOptimizer::set_param_rounding(ParamRounding rounding, uint64_t seed) {
  HG_CHECK(rounding != ParamRounding::Stochastic, "ZeroRedundantOptimizer.set_param_rounding: stochastic rounding "
           "draws from one Philox stream in parameter order, which a shard cannot continue; use Nearest or Kahan");
  local_->set_param_rounding(rounding, seed);
}

int ZeroRedundantOptimizer::owner(size_t i) const {
  HG_CHECK(i < params_.size(), "ZeroRedundantOptimizer.owner: parameter ", i, " does not exist; it has ",
           params_.size());
  return owner_[i];
}

Tensor ZeroRedundantOptimizer::compensation(size_t i) const {
  return owner(i) == rank_ ? local_->compensation(static_cast<size_t>(local_i_[i])) : Tensor();
}
Tensor ZeroRedundantOptimizer::master(size_t i) const {
  return owner(i) == rank_ ? local_->master(static_cast<size_t>(local_i_[i])) : Tensor();
}
const std::vector<Tensor>& ZeroRedundantOptimizer::state_buffers(size_t i) const {
  static const std::vector<Tensor> kNone;
  return owner(i) == rank_ ? local_->state_buffers(static_cast<size_t>(local_i_[i])) : kNone;
}
Optimizer::StepCount ZeroRedundantOptimizer::step_count(size_t i) const {
  return owner(i) == rank_ ? local_->step_count(static_cast<size_t>(local_i_[i])) : StepCount{};
}

StateDict ZeroRedundantOptimizer::state_dict() const {
  HG_FAIL("ZeroRedundantOptimizer.state_dict: each rank holds the state of its own shard only; save every rank's "
          "local().state_dict() (one file per rank) and load it into the same rank's local() on the same world size");
}
void ZeroRedundantOptimizer::load_state_dict(const StateDict& sd) {
  (void)sd;
  HG_FAIL("ZeroRedundantOptimizer.load_state_dict: each rank holds the state of its own shard only; load every "
          "rank's own file into its local() (world size and parameters as when it was saved)");
}

}  // namespace hg::optim
