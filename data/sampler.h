#pragma once
// DistributedSampler: the share of a dataset one rank of a data-parallel job reads each epoch, with
// torch.utils.data.distributed.DistributedSampler's semantics. Every rank draws the same permutation of
// 0..N-1 (shuffled_indices(N, seed, epoch), as the DataLoader's own shuffle), pads it to a multiple of the
// replicas by repeating its start (or, with drop_last, cuts it to one), and takes every num_replicas-th index
// from its rank on: the ranks' shares are disjoint and together cover every sample.
//
//   data::DistributedSampler sampler(train.size(), {.seed = 1});   // rank and replicas from hg::dist
//   data::DataLoader loader(train, {.batch_size = 64, .shuffle = false, .sampler = sampler});
//
// Passed to a DataLoader it is driven by the loader's epoch (set_epoch on the loader), so a new epoch gets
// a new order without torch's separate sampler.set_epoch call.
#include <cstdint>
#include <vector>

namespace hg::data {

struct DistributedSamplerOptions {
  int64_t num_replicas = -1;  // -1: hg::dist::get_world_size()
  int64_t rank = -1;          // -1: hg::dist::get_rank()
  bool shuffle = true;
  uint64_t seed = 0;          // the same on every rank
  bool drop_last = false;     // cut the tail so that every rank reads the same number of distinct samples
};

class DistributedSampler {
 public:
  // dataset_size samples; throws hg::Error for a rank outside [0, num_replicas) or rank/replicas left at -1
  // before hg::dist::init_process_group.
  explicit DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});

  int64_t num_samples() const { return num_samples_; }  // this rank's indices per epoch
  int64_t total_size() const { return num_samples_ * options_.num_replicas; }
  int64_t dataset_size() const { return dataset_size_; }
  const DistributedSamplerOptions& options() const { return options_; }  // rank and replicas resolved

  std::vector<int64_t> indices(uint64_t epoch) const;  // this rank's sample indices of that epoch

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t num_samples_ = 0;
};

}  // namespace hg::data
