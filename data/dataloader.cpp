#include "data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <thread>
#include <utility>

#include "core/rng.h"

namespace hg::data {

std::vector<int64_t> shuffled_indices(int64_t n, uint64_t seed, uint64_t epoch) {
  HG_CHECK(n >= 0, "shuffled_indices: n=", n, " must be >= 0");
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  const auto lo = [](uint64_t v) { return static_cast<uint32_t>(v); };
  const auto hi = [](uint64_t v) { return static_cast<uint32_t>(v >> 32); };
  // Counter words 2-3 carry the epoch plus a stream tag. hg::rand/randn use Philox blocks
  // {offset, 0, 0} under the same seed, so without the tag epoch 0's swaps would reuse exactly the
  // random numbers that initialised the model after manual_seed(seed): the data order was then
  // correlated with the first layer's weights, and the Fashion-MNIST CNN lost ~0.8 accuracy points.
  constexpr uint32_t kShuffleStream = 0x53485546;  // "SHUF"
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t u = static_cast<uint64_t>(i);
    uint32_t c[4] = {lo(u), hi(u), lo(epoch), hi(epoch) ^ kShuffleStream};
    Philox4x32::block(c, lo(seed), hi(seed));
    const uint64_t r = static_cast<uint64_t>(c[0]) << 32 | c[1];
    // Lemire's multiply-shift maps r to [0, i]; its bias, below (i+1)/2^64, is far out of reach of any test
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * (u + 1)) >> 64);
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

namespace detail {

// One epoch: its order, the batch gathering and, with prefetch, the worker thread and its one-slot queue.
class EpochRun {
 public:
  EpochRun(const TensorDataset& ds, const DataLoaderOptions& opts, std::vector<int64_t> order, int64_t batches)
      : ds_(ds), opts_(opts), order_(std::move(order)), batches_(batches) {
    if (opts_.prefetch && batches_ > 0) worker_ = std::thread([this] { work(); });  // last: members are ready
  }
  ~EpochRun() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // The next batch into out; false after the last. Rethrows what gathering or the transform threw.
  bool next(Batch& out) {
    if (taken_ == batches_) return false;
    if (!opts_.prefetch) {
      out = make(taken_);
      ++taken_;
      return true;
    }
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return slot_.has_value() || error_ != nullptr; });
    if (!slot_) std::rethrow_exception(error_);  // the batches before the failing one were all delivered
    out = std::move(*slot_);
    slot_.reset();
    ++taken_;
    lock.unlock();
    cv_.notify_all();
    return true;
  }

 private:
  // Batch b: rows order_[b*B .. b*B+count) copied into fresh contiguous tensors, then the transform.
  Batch make(int64_t b) const {
    const int64_t start = b * opts_.batch_size;
    const int64_t count = std::min(opts_.batch_size, static_cast<int64_t>(order_.size()) - start);
    Batch batch{gather(ds_.inputs, start, count), gather(ds_.targets, start, count)};
    if (opts_.transform) opts_.transform(batch);
    return batch;
  }
  Tensor gather(const Tensor& src, int64_t start, int64_t count) const {
    Shape shape = src.shape();
    const size_t row = src.size(0) == 0 ? 0 : src.nbytes() / static_cast<size_t>(src.size(0));
    shape[0] = count;
    Tensor out = empty(shape, {.dtype = src.dtype()});
    const auto* from = static_cast<const char*>(src.data_ptr());
    auto* to = static_cast<char*>(out.data_ptr());
    for (int64_t r = 0; r < count && row > 0; ++r)
      std::memcpy(to + static_cast<size_t>(r) * row, from + static_cast<size_t>(order_[start + r]) * row, row);
    return out;
  }
  void work() {
    for (int64_t b = 0; b < batches_; ++b) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stop_) return;  // the caller left the loop: build nothing more
      }
      std::optional<Batch> batch;
      try {
        batch = make(b);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = std::current_exception();
        cv_.notify_all();
        return;
      }
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !slot_.has_value() || stop_; });
      if (stop_) return;
      slot_ = std::move(batch);
      cv_.notify_all();
    }
  }

  const TensorDataset ds_;  // handles: the run keeps the data alive even if the loader goes first
  const DataLoaderOptions opts_;
  const std::vector<int64_t> order_;
  const int64_t batches_;
  int64_t taken_ = 0;  // batches handed to the caller (caller thread only)

  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Batch> slot_;    // the prefetched batch, guarded by mu_
  std::exception_ptr error_;     // what the worker threw, guarded by mu_
  bool stop_ = false;            // the caller is gone, guarded by mu_
  std::thread worker_;
};

}  // namespace detail

DataLoader::DataLoader(TensorDataset dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(std::move(options)) {
  dataset_.check("DataLoader");
  // batches are gathered as whole rows of dense memory: a view (a slice of a larger set) is copied once here
  dataset_.inputs = dataset_.inputs.contiguous();
  dataset_.targets = dataset_.targets.contiguous();
  HG_CHECK(options_.batch_size >= 1, "DataLoader: batch_size=", options_.batch_size, " must be >= 1");
  if (options_.sampler) {
    HG_CHECK(!options_.shuffle, "DataLoader: shuffle and a sampler were both given; the sampler shuffles "
             "(DistributedSamplerOptions::shuffle): pass .shuffle = false with .sampler");
    HG_CHECK(options_.sampler->dataset_size() == dataset_.inputs.size(0), "DataLoader: the sampler was made for ",
             options_.sampler->dataset_size(), " samples but the dataset has ", dataset_.inputs.size(0),
             "; make it with DistributedSampler(dataset.size(), ...)");
  }
}

// the samples an epoch reads: the dataset's, or the sampler's share of it
int64_t DataLoader::epoch_samples() const {
  return options_.sampler ? options_.sampler->num_samples() : dataset_.inputs.size(0);
}

int64_t DataLoader::size() const {
  const int64_t n = epoch_samples(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

int64_t DataLoader::num_samples() const {
  return options_.drop_last ? size() * options_.batch_size : epoch_samples();
}

std::vector<int64_t> epoch_order(int64_t n, bool shuffle, uint64_t seed, uint64_t epoch) {
  if (shuffle) return shuffled_indices(n, seed, epoch);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t{0});
  return p;
}

std::vector<int64_t> DataLoader::order(uint64_t epoch) const {
  if (options_.sampler) return options_.sampler->indices(epoch);
  return epoch_order(dataset_.inputs.size(0), options_.shuffle, options_.seed, epoch);
}

DataLoader::Iterator DataLoader::begin() {
  auto run = std::make_shared<detail::EpochRun>(dataset_, options_, order(epoch_), size());
  ++epoch_;
  Iterator it(std::move(run));
  ++it;  // fetch batch 0
  return it;
}

DataLoader::Iterator::Iterator(std::shared_ptr<detail::EpochRun> run) : run_(std::move(run)) {}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  HG_CHECK(run_ != nullptr, "DataLoader::Iterator: incremented past the end of the epoch");
  if (run_->next(current_)) {
    ++index_;
  } else {
    run_.reset();  // joins the worker (it has finished)
    current_ = {};
  }
  return *this;
}

}  // namespace hg::data
