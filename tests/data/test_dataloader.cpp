// data/'s datasets and loader: normalisation, TensorDataset, the seeded shuffle and the DataLoader (coverage
// per epoch, determinism, drop_last, prefetch on/off, early exit, worker exceptions). The file readers are
// tests/data/test_data.cpp.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <vector>

#include "core/tensor.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/idx.h"
#include "test_util.h"

using namespace hg;
using namespace hg::data;
using Catch::Contains;
using hg::test::error_of;

// ------------------------------------------------------------------------------------------------
// normalisation and datasets

TEST_CASE("normalize_: per channel, in place", "[data]") {
  std::vector<float> v(2 * 3 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) * 0.1f;
  Tensor x = from_vector(v, {2, 3, 2, 2});
  const std::vector<float> mean = {0.5f, 1.0f, -1.0f}, std = {2.0f, 0.5f, 4.0f};
  normalize_(x, mean, std);
  const std::vector<float> got = x.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t c = (i / 4) % 3;
    CHECK(got[i] == Approx((v[i] - mean[c]) / std[c]).epsilon(1e-6));
  }
  Tensor y = from_vector(v, {4, 1, 6});  // one value for every channel
  normalize_(y, {kFashionMnistMean}, {kFashionMnistStd});
  CHECK(y.to_vector<float>()[5] == Approx((v[5] - 0.2860) / 0.3530).epsilon(1e-6));

  CHECK_THAT(error_of([&] { normalize_(x, {0, 0}, {1, 1}); }), Contains("3 channels") && Contains("mean has 2"));
  CHECK_THAT(error_of([&] { normalize_(x, {0}, {1, 0, 1}); }), Contains("std 0 is not > 0"));
  Tensor h = from_vector(v, {2, 3, 4}, {.dtype = DType::F16});
  CHECK_THAT(error_of([&] { normalize_(h, {0}, {1}); }), Contains("F16"));
  Tensor flat = from_vector(v, {24});
  CHECK_THAT(error_of([&] { normalize_(flat, {0}, {1}); }), Contains("(N,C,...)"));
}

TEST_CASE("TensorDataset: size and first-dim checks", "[data]") {
  const TensorDataset ds{zeros({5, 2}), zeros({5}, {.dtype = DType::I64})};
  CHECK(ds.size() == 5);
  const TensorDataset bad{zeros({5, 2}), zeros({4}, {.dtype = DType::I64})};
  CHECK_THAT(error_of([&] { (void)bad.size(); }), Contains("5 samples") && Contains("targets have 4"));
  CHECK_THAT(error_of([&] { DataLoader loader(bad); }), Contains("DataLoader") && Contains("first dims must match"));
  const TensorDataset none{zeros({5, 2}), Tensor()};
  CHECK_THAT(error_of([&] { (void)none.size(); }), Contains("targets tensor is undefined"));
  const TensorDataset scalar{full({}, 1.0), zeros({1})};
  CHECK_THAT(error_of([&] { (void)scalar.size(); }), Contains("first (sample) dim"));
}

// ------------------------------------------------------------------------------------------------
// shuffle and DataLoader

TEST_CASE("shuffled_indices: a permutation, reproducible, new per epoch and seed, uniform", "[data]") {
  const std::vector<int64_t> p = shuffled_indices(1000, 42, 0);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), int64_t{0});
  CHECK(sorted == iota);
  CHECK(p != iota);
  CHECK(shuffled_indices(1000, 42, 0) == p);
  CHECK(shuffled_indices(1000, 42, 1) != p);
  CHECK(shuffled_indices(1000, 43, 0) != p);
  CHECK(shuffled_indices(1000, 42ull << 32, 0) != shuffled_indices(1000, 0, 0));  // both seed halves count
  CHECK(shuffled_indices(0, 1, 2).empty());
  CHECK(shuffled_indices(1, 1, 2) == std::vector<int64_t>{0});
  // Fisher-Yates gives each of the 24 orders of 4 items with probability 1/24: chi-square over
  // 24000 epochs (23 degrees of freedom; 60 is beyond p = 1e-4)
  std::map<std::vector<int64_t>, int> seen;
  const int epochs = 24000;
  for (int e = 0; e < epochs; ++e) ++seen[shuffled_indices(4, 7, static_cast<uint64_t>(e))];
  CHECK(seen.size() == 24);
  double chi2 = 0;
  for (const auto& [order, count] : seen) chi2 += std::pow(count - epochs / 24.0, 2) / (epochs / 24.0);
  CHECK(chi2 < 60);
}

namespace {

// N samples: inputs (N,2,3) in dtype dt with row i holding i*6 .. i*6+5, targets = the sample index.
TensorDataset numbered(int64_t n, DType dt = DType::F32) {
  std::vector<double> v(static_cast<size_t>(n * 6));
  std::iota(v.begin(), v.end(), 0.0);
  std::vector<int64_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), int64_t{0});
  return {from_vector(v, {n, 2, 3}, {.dtype = dt}), from_vector(t, {n}, {.dtype = DType::I64})};
}

// The targets of every batch of one epoch, checking each input row belongs to its target.
std::vector<std::vector<int64_t>> run_epoch(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (auto& [x, y] : loader) {
    const std::vector<int64_t> ids = y.to_vector<int64_t>();
    const std::vector<double> rows = x.to_vector<double>();
    REQUIRE(x.shape() == Shape{static_cast<int64_t>(ids.size()), 2, 3});
    CHECK(x.dtype() == loader.dataset().inputs.dtype());
    for (size_t r = 0; r < ids.size(); ++r)
      for (size_t k = 0; k < 6; ++k) CHECK(rows[r * 6 + k] == static_cast<double>(ids[r] * 6) + static_cast<double>(k));
    out.push_back(ids);
  }
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

}  // namespace

TEST_CASE("DataLoader: every sample once per epoch, rows matching their targets", "[data]") {
  for (bool prefetch : {true, false}) {
    INFO("prefetch " << prefetch);
    DataLoader loader(numbered(103, DType::F16), {.batch_size = 10, .seed = 5, .prefetch = prefetch});
    CHECK(loader.size() == 11);
    CHECK(loader.num_samples() == 103);
    for (uint64_t e = 0; e < 2; ++e) {
      const auto batches = run_epoch(loader);
      REQUIRE(batches.size() == 11);
      for (size_t b = 0; b < 10; ++b) CHECK(batches[b].size() == 10);
      CHECK(batches.back().size() == 3);  // the partial batch is kept
      const std::vector<int64_t> all = flat(batches);
      CHECK(all == loader.order(e));
      std::vector<int64_t> sorted = all;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == numbered(103).targets.to_vector<int64_t>());
    }
    DataLoader dropping(numbered(103), {.batch_size = 10, .seed = 5, .drop_last = true, .prefetch = prefetch});
    CHECK(dropping.size() == 10);
    CHECK(dropping.num_samples() == 100);
    const auto batches = run_epoch(dropping);
    REQUIRE(batches.size() == 10);
    for (const auto& b : batches) CHECK(b.size() == 10);
    std::vector<int64_t> all = flat(batches);
    std::sort(all.begin(), all.end());
    CHECK(std::unique(all.begin(), all.end()) == all.end());
  }
}

TEST_CASE("DataLoader: the same seed gives the same order, each epoch a new one", "[data]") {
  DataLoader a(numbered(50), {.batch_size = 8, .seed = 11}), b(numbered(50), {.batch_size = 8, .seed = 11});
  CHECK(a.epoch() == 0);
  const auto a0 = flat(run_epoch(a)), a1 = flat(run_epoch(a));
  CHECK(a.epoch() == 2);
  CHECK(flat(run_epoch(b)) == a0);
  CHECK(flat(run_epoch(b)) == a1);
  CHECK(a0 != a1);
  DataLoader other(numbered(50), {.batch_size = 8, .seed = 12});
  CHECK(flat(run_epoch(other)) != a0);
  DataLoader resumed(numbered(50), {.batch_size = 8, .seed = 11});
  resumed.set_epoch(1);
  CHECK(flat(run_epoch(resumed)) == a1);
  DataLoader ordered(numbered(50), {.batch_size = 8, .shuffle = false});
  CHECK(flat(run_epoch(ordered)) == numbered(50).targets.to_vector<int64_t>());
}

TEST_CASE("DataLoader: prefetch on and off give identical batches", "[data]") {
  const auto rows = [](Batch& batch) { batch.inputs = alias_with_shape(batch.inputs, {batch.inputs.size(0), 6}); };
  DataLoader on(numbered(37), {.batch_size = 4, .seed = 3, .prefetch = true, .transform = rows});
  DataLoader off(numbered(37), {.batch_size = 4, .seed = 3, .prefetch = false, .transform = rows});
  for (int e = 0; e < 2; ++e) {
    std::vector<Batch> got_on, got_off;
    for (auto& batch : on) got_on.push_back(batch);
    for (auto& batch : off) got_off.push_back(batch);
    REQUIRE(got_on.size() == 10);
    REQUIRE(got_off.size() == got_on.size());
    for (size_t i = 0; i < got_on.size(); ++i) {
      CHECK(got_on[i].inputs.shape() == Shape{got_on[i].targets.size(0), 6});  // the transform ran
      CHECK(got_on[i].inputs.shape() == got_off[i].inputs.shape());
      CHECK(got_on[i].inputs.to_vector<double>() == got_off[i].inputs.to_vector<double>());
      CHECK(got_on[i].targets.to_vector<int64_t>() == got_off[i].targets.to_vector<int64_t>());
      CHECK_FALSE(got_on[i].inputs.same(got_off[i].inputs));
    }
  }
}

TEST_CASE("DataLoader: leaving the loop early and destroying the loader are clean", "[data]") {
  const TensorDataset ds = numbered(64);
  const int64_t before = memory::allocated(Device::cpu());
  std::atomic<int> calls{0};
  for (int rep = 0; rep < 50; ++rep) {
    DataLoader loader(ds, {.batch_size = 4, .seed = static_cast<uint64_t>(rep),
                           .transform = [&](Batch&) { ++calls; }});
    for (auto& [x, y] : loader) {
      CHECK(x.size(0) == 4);
      break;
    }
  }
  // each early exit built batch 0, at most the prefetched batch 1 and the one in progress: not all 16
  CHECK(calls.load() <= 50 * 3);
  CHECK(memory::allocated(Device::cpu()) == before);  // no batch outlives its loop
  // an iterator outlives its loader and still runs the epoch to the end
  auto loader = std::make_unique<DataLoader>(ds, DataLoaderOptions{.batch_size = 5, .seed = 1});
  const std::vector<int64_t> order = loader->order(0);
  auto it = loader->begin();
  loader.reset();
  std::vector<int64_t> seen;
  for (; it != std::default_sentinel; ++it) {
    CHECK(it->inputs.size(0) == it->targets.size(0));
    for (int64_t id : it->targets.to_vector<int64_t>()) seen.push_back(id);
  }
  CHECK(seen == order);
  CHECK_THAT(error_of([&] { ++it; }), Contains("past the end"));
}

TEST_CASE("DataLoader: an exception in the worker reaches the caller at its batch", "[data]") {
  for (bool prefetch : {true, false}) {
    INFO("prefetch " << prefetch);
    int made = 0;
    DataLoader loader(numbered(40), {.batch_size = 4, .prefetch = prefetch, .transform = [&made](Batch&) {
                                       if (made == 3) HG_FAIL("transform: failed on batch ", made);
                                       ++made;
                                     }});
    int seen = 0;
    CHECK_THAT(error_of([&] {
                 for (auto& [x, y] : loader) {
                   (void)x;
                   (void)y;
                   ++seen;
                 }
               }),
               Contains("failed on batch 3"));
    CHECK(seen == 3);  // the batches before the failing one were all delivered
  }
}

TEST_CASE("DataLoader: bad options and an empty dataset", "[data]") {
  CHECK_THAT(error_of([] { DataLoader loader(numbered(5), {.batch_size = 0}); }), Contains("batch_size=0"));
  DataLoader empty_loader(numbered(0), {.batch_size = 4});
  CHECK(empty_loader.size() == 0);
  int bodies = 0;
  for (auto& batch : empty_loader) {
    (void)batch;
    ++bodies;
  }
  CHECK(bodies == 0);
  DataLoader small(numbered(3), {.batch_size = 8, .drop_last = true});
  CHECK(small.size() == 0);
  CHECK(run_epoch(small).empty());
  DataLoader one(numbered(3), {.batch_size = 8});
  CHECK(one.size() == 1);
  CHECK(run_epoch(one).front().size() == 3);
}

TEST_CASE("the shuffle stream is independent of the tensor RNG under the same seed", "[data]") {
  // hg::rand after manual_seed(seed) reads Philox blocks {i, 0, 0} keyed by the seed. A Fisher-Yates
  // driven by those same blocks would tie the data order to the model's initial weights.
  constexpr int64_t n = 1000;
  constexpr uint64_t seed = 7;
  std::vector<int64_t> aliased(n);
  std::iota(aliased.begin(), aliased.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    uint32_t w[4];
    Philox4x32::words(seed, 0, static_cast<uint64_t>(i), w);
    const uint64_t r = static_cast<uint64_t>(w[0]) << 32 | w[1];
    const auto j = static_cast<int64_t>((static_cast<unsigned __int128>(r) * static_cast<uint64_t>(i + 1)) >> 64);
    std::swap(aliased[static_cast<size_t>(i)], aliased[static_cast<size_t>(j)]);
  }
  const std::vector<int64_t> p = data::shuffled_indices(n, seed, 0);
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) same += p[static_cast<size_t>(i)] == aliased[static_cast<size_t>(i)];
  CHECK(same < n / 20);  // independent permutations agree in about one position
}
