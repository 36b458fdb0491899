// core/parallel.h: ranges cover [0, n) exactly once; an exception thrown on any thread of an OpenMP
// region reaches the caller as itself (an hg::Error stays an hg::Error) instead of terminating.
#include <catch2/catch.hpp>

#include <atomic>
#include <new>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/parallel.h"

using namespace hg;

namespace {
// Runs the test body with n OpenMP threads and restores the previous count.
struct ThreadCount {
  int saved = get_num_threads();
  explicit ThreadCount(int n) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved); }
};
}  // namespace

TEST_CASE("parallel_for visits every index once, on any thread count", "[core][parallel]") {
  for (int threads : {1, 2, 3, 7}) {
    ThreadCount tc(threads);
    for (int64_t n : {0, 1, 2, 5, 1000}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      parallel_for(n, true, [&](int64_t i) { seen[static_cast<size_t>(i)]++; });
      for (int64_t i = 0; i < n; ++i) CHECK(seen[static_cast<size_t>(i)] == 1);
    }
  }
}

TEST_CASE("parallel_ranges hands each thread one contiguous range", "[core][parallel]") {
  ThreadCount tc(3);
  std::vector<int> owner(10, -1);
  std::atomic<int> calls{0};
  auto f = [&](int64_t b, int64_t e) {
    const int me = calls++;
    for (int64_t i = b; i < e; ++i) owner[static_cast<size_t>(i)] = me;
  };
  parallel_ranges(10, true, f);
  CHECK(calls == 3);
  int changes = 0;
  for (size_t i = 1; i < owner.size(); ++i) changes += owner[i] != owner[i - 1];
  CHECK(changes == 2);  // three runs of indices
  calls = 0;
  parallel_ranges(10, false, f);  // serial: one call with the whole range
  CHECK(calls == 1);
}

TEST_CASE("an exception thrown on a worker thread reaches the caller", "[core][parallel]") {
  ThreadCount tc(2);
  std::atomic<int64_t> done{0};
  auto throw_at = [&](int64_t bad) {
    parallel_for(100, true, [&](int64_t i) {
      HG_CHECK(i != bad, "test: index ", i, " is bad");
      ++done;
    });
  };
  // index 99 is in the last thread's range, index 0 in the calling thread's
  for (int64_t bad : {int64_t{99}, int64_t{0}}) {
    done = 0;
    CHECK_THROWS_WITH(throw_at(bad), Catch::Contains("index " + std::to_string(bad) + " is bad"));
    CHECK(done >= 50);  // the other thread's range ran to its end
  }
  CHECK_THROWS_AS(parallel_for(100, true, [](int64_t i) {
                    if (i == 70) throw std::bad_alloc();
                  }),
                  std::bad_alloc);
  // every thread throws: one exception arrives, the process lives on
  CHECK_THROWS_AS(parallel_for(100, true, [](int64_t) { throw Error("each thread fails"); }), Error);
  int64_t sum = 0;  // and the team still works afterwards
  std::vector<int64_t> v(100);
  parallel_for(100, true, [&](int64_t i) { v[static_cast<size_t>(i)] = i; });
  for (int64_t x : v) sum += x;
  CHECK(sum == 4950);
}
