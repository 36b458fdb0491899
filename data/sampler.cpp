// See data/sampler.h.
#include "data/sampler.h"

#include "core/error.h"
#include "data/dataloader.h"
#include "dist/dist.h"

namespace hg::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  HG_CHECK(dataset_size >= 0, "DistributedSampler: dataset_size=", dataset_size, " must be >= 0");
  if (options_.num_replicas < 0 || options_.rank < 0) {
    HG_CHECK(dist::is_initialized(), "DistributedSampler: rank and num_replicas are taken from hg::dist, which is not "
             "initialized; call hg::dist::init_process_group() first or pass .rank and .num_replicas");
    if (options_.num_replicas < 0) options_.num_replicas = dist::get_world_size();
    if (options_.rank < 0) options_.rank = dist::get_rank();
  }
  HG_CHECK(options_.num_replicas >= 1, "DistributedSampler: num_replicas=", options_.num_replicas, " must be >= 1");
  HG_CHECK(options_.rank < options_.num_replicas, "DistributedSampler: rank ", options_.rank,
           " is not in [0, ", options_.num_replicas - 1, "]");
  const int64_t n = dataset_size_, r = options_.num_replicas;
  // torch: with drop_last and an uneven split, ceil((N - R) / R) per rank (the tail dropped), else ceil(N / R)
  num_samples_ = options_.drop_last && n % r != 0 ? (n >= r ? (n - 1) / r : 0) : (n + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices(uint64_t epoch) const {
  const int64_t n = dataset_size_, total = total_size();
  std::vector<int64_t> order = epoch_order(n, options_.shuffle, options_.seed, epoch);
  if (static_cast<int64_t>(order.size()) > total) {
    order.resize(static_cast<size_t>(total));  // drop_last: the tail no rank would read evenly
  } else {
    for (int64_t i = 0; static_cast<int64_t>(order.size()) < total; ++i)  // pad by repeating the start
      order.push_back(order[static_cast<size_t>(i % n)]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = options_.rank; i < total; i += options_.num_replicas) mine.push_back(order[static_cast<size_t>(i)]);
  return mine;
}

}  // namespace hg::data
