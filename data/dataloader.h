#pragma once
// DataLoader: the batches of a TensorDataset in a seeded order, one epoch per range-for:
//
//   DataLoader loader(TensorDataset{train.images, train.labels}, {.batch_size = 128, .seed = 1});
//   for (int e = 0; e < epochs; ++e)
//     for (auto& [x, y] : loader) { ... }   // x (B,1,28,28) F32, y (B) I64; a new order each epoch
//
// The order of epoch e is a Fisher-Yates shuffle driven by Philox(seed, e): the same on every machine
// and standard library (std::shuffle and std::uniform_int_distribution are implementation-defined).
// Each begin() runs the next epoch; set_epoch(e) picks it, e.g. when resuming from a checkpoint.
// With prefetch a background thread gathers batch b+1 (copying rows into fresh contiguous CPU
// tensors) while the caller trains on batch b; leaving the loop early stops and joins it, and an
// exception thrown there is rethrown to the caller at the batch where it happened.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace hg::data {

struct Batch {
  Tensor inputs;   // (B, ...) like the dataset's inputs
  Tensor targets;  // (B, ...) like the dataset's targets
};

struct DataLoaderOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;  // drop the last batch when it is smaller than batch_size
  bool prefetch = true;    // gather the next batch on a background thread
  // Called on each batch after gathering, on the prefetch thread when prefetch is on (augmentation,
  // normalisation). An exception it throws reaches the caller at that batch.
  std::function<void(Batch&)> transform = nullptr;
  // The indices this loader reads (data/sampler.h: a data-parallel rank's share), in the sampler's order for
  // the loader's epoch; it shuffles itself, so `shuffle` must be false with it (as torch refuses both).
  std::optional<DistributedSampler> sampler = std::nullopt;
};

// The sample order of one epoch: a permutation of 0..n-1 from Fisher-Yates where the swap partner of
// position i is drawn from Philox block (counter = {i, epoch}, key = seed).
std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch);
// 0..n-1 in an epoch's order: shuffled_indices when shuffle is on, in order otherwise (the DataLoader's order
// without a sampler, and DistributedSampler's before it is padded and split).
std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, uint64_t epoch);

namespace detail {
class EpochRun;
}

class DataLoader {
 public:
  class Iterator;

  explicit DataLoader(TensorDataset dataset, DataLoaderOptions options = {});

  int64_t size() const;         // batches per epoch
  int64_t num_samples() const;  // samples per epoch (drop_last counted; with a sampler, of its share)
  // The epoch the next begin() runs (then it advances by one).
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  // The sample order of an epoch (0..N-1 in order when shuffle is off; the sampler's indices with one).
  std::vector<int64_t> order(uint64_t epoch) const;

  Iterator begin();  // starts the next epoch
  std::default_sentinel_t end() const { return {}; }

  const TensorDataset& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }

 private:
  int64_t epoch_samples() const;
  TensorDataset dataset_;
  DataLoaderOptions options_;
  uint64_t epoch_ = 0;
};

// An input iterator over one epoch. It owns that epoch's state (and prefetch thread), so it stays
// valid even when the loader is destroyed first; destroying it stops and joins the thread.
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using reference = Batch&;
  using pointer = Batch*;

  Iterator() = default;
  Batch& operator*() { return current_; }
  Batch* operator->() { return &current_; }
  Iterator& operator++();
  void operator++(int) { ++*this; }
  int64_t index() const { return index_; }  // batch number within the epoch
  friend bool operator==(const Iterator& it, std::default_sentinel_t) { return it.run_ == nullptr; }

 private:
  friend class DataLoader;
  explicit Iterator(std::shared_ptr<detail::EpochRun> run);
  std::shared_ptr<detail::EpochRun> run_;  // null at the end
  Batch current_;
  int64_t index_ = -1;
};

}  // namespace hg::data
