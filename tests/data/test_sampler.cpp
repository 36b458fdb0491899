// data::DistributedSampler against torch.utils.data.distributed.DistributedSampler's definition: padding by
// repeating the start, drop_last cutting the tail, every num_replicas-th index from the rank on, one permutation
// shared by the ranks; and a DataLoader reading a rank's share.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <vector>

#include "core/tensor.h"
#include "data/dataloader.h"
#include "data/sampler.h"

using namespace hg;
using namespace hg::data;
using Catch::Contains;

namespace {
using V = std::vector<int64_t>;
V share(int64_t n, int64_t replicas, int64_t rank, bool drop_last, bool shuffle = false, uint64_t epoch = 0) {
  return DistributedSampler(n, {.num_replicas = replicas, .rank = rank, .shuffle = shuffle, .seed = 7,
                                .drop_last = drop_last})
      .indices(epoch);
}
}  // namespace

TEST_CASE("DistributedSampler: torch's shares without shuffling, padded or cut", "[data][sampler]") {
  // 10 samples over 4 ranks: padded to 12 with 0, 1; every 4th index from the rank on
  CHECK(share(10, 4, 0, false) == V{0, 4, 8});
  CHECK(share(10, 4, 1, false) == V{1, 5, 9});
  CHECK(share(10, 4, 2, false) == V{2, 6, 0});
  CHECK(share(10, 4, 3, false) == V{3, 7, 1});
  // drop_last: ceil((10 - 4) / 4) = 2 each, the tail 8, 9 read by no rank
  CHECK(share(10, 4, 0, true) == V{0, 4});
  CHECK(share(10, 4, 3, true) == V{3, 7});
  // more ranks than samples: the padding repeats the permutation as often as needed
  CHECK(share(2, 5, 4, false) == V{0});
  CHECK(share(2, 5, 3, false) == V{1});
  CHECK(share(3, 5, 0, true).empty());
  // an even split: drop_last changes nothing
  CHECK(share(12, 4, 1, true) == share(12, 4, 1, false));
  CHECK(DistributedSampler(10, {.num_replicas = 4, .rank = 0}).num_samples() == 3);
  CHECK(DistributedSampler(10, {.num_replicas = 4, .rank = 0, .drop_last = true}).total_size() == 8);
}

TEST_CASE("DistributedSampler: the ranks share one permutation per epoch and cover every sample", "[data][sampler]") {
  const int64_t n = 103, r = 4;
  for (uint64_t epoch : {0u, 1u}) {
    std::vector<V> shares;
    for (int64_t k = 0; k < r; ++k) shares.push_back(share(n, r, k, false, true, epoch));
    std::multiset<int64_t> all;
    for (const V& s : shares) {
      CHECK(static_cast<int64_t>(s.size()) == 26);  // ceil(103 / 4)
      all.insert(s.begin(), s.end());
    }
    for (int64_t i = 0; i < n; ++i) CHECK(all.count(i) >= 1);  // every sample read
    CHECK(static_cast<int64_t>(all.size()) == 104);           // one padded
    // interleaving the shares gives back the padded permutation: its first n entries are shuffled_indices
    V interleaved;
    for (int64_t i = 0; i < 26; ++i)
      for (int64_t k = 0; k < r; ++k) interleaved.push_back(shares[static_cast<size_t>(k)][static_cast<size_t>(i)]);
    const V perm = shuffled_indices(n, 7, epoch);
    CHECK(V(interleaved.begin(), interleaved.begin() + n) == perm);
    CHECK(interleaved[static_cast<size_t>(n)] == perm[0]);
  }
  CHECK(share(n, r, 1, false, true, 0) != share(n, r, 1, false, true, 1));  // a new order each epoch
}

TEST_CASE("DistributedSampler: a DataLoader reads the rank's share in the sampler's order", "[data][sampler]") {
  const int64_t n = 10;
  const Tensor x = arange(n, {.dtype = DType::F32}).reshape({n, 1});
  const Tensor y = arange(n, {.dtype = DType::I64});
  const DistributedSampler sampler(n, {.num_replicas = 3, .rank = 2, .seed = 3});
  DataLoader loader(TensorDataset{x, y}, {.batch_size = 2, .shuffle = false, .prefetch = false, .sampler = sampler});
  CHECK(loader.size() == 2);  // ceil(10 / 3) = 4 samples in batches of 2
  CHECK(loader.num_samples() == 4);
  for (uint64_t epoch : {0u, 1u}) {
    V got;
    for (auto& [xb, yb] : loader)
      for (int64_t v : yb.to_vector<int64_t>()) got.push_back(v);
    CHECK(got == sampler.indices(epoch));
  }
}

TEST_CASE("DistributedSampler: bad ranks, a missing process group and a shuffling loader are errors", "[data][sampler]") {
  CHECK_THROWS_WITH(DistributedSampler(10, {.num_replicas = 4, .rank = 4}), Contains("rank 4 is not in [0, 3]"));
  CHECK_THROWS_WITH(DistributedSampler(10, {.num_replicas = 0, .rank = 0}), Contains("num_replicas=0"));
  CHECK_THROWS_WITH(DistributedSampler(10), Contains("init_process_group") && Contains(".num_replicas"));
  const Tensor x = zeros({10, 1}), y = zeros({10}, {.dtype = DType::I64});
  const DistributedSampler s(10, {.num_replicas = 2, .rank = 0});
  CHECK_THROWS_WITH(DataLoader(TensorDataset{x, y}, {.sampler = s}), Contains(".shuffle = false"));
  const DistributedSampler other(12, {.num_replicas = 2, .rank = 0});
  CHECK_THROWS_WITH(DataLoader(TensorDataset{x, y}, {.shuffle = false, .sampler = other}),
                    Contains("made for 12 samples"));
}
