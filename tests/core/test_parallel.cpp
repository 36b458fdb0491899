// core/parallel.h: ranges cover [0, n) exactly once; an exception thrown on any thread of an OpenMP
// region reaches the caller as itself (an hg::Error stays an hg::Error) instead of terminating.
// core/adaptive_threads.h: regions that wait for a descheduled thread make the process fall back to one
// thread for a while.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/adaptive_threads.h"
#include "core/error.h"
#include "core/parallel.h"

using namespace hg;

namespace {
// Runs the test body with n threads and no adaptive fallback (a busy test machine must not change the
// thread count under the test), then restores both.
struct ThreadCount {
  int saved = get_num_threads();
  explicit ThreadCount(int n, AdaptiveThreadsOptions o = {.enabled = false}) {
    set_adaptive_threads(o);
    set_num_threads(n);
  }
  ~ThreadCount() {
    set_num_threads(saved);
    set_adaptive_threads({});
  }
};

void sleep_ms(double ms) { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms)); }

// A two-thread region in which the other thread works `other_ms` and the calling thread `own_ms`.
void region(double other_ms, double own_ms) {
  parallel_for(2, true, [&](int64_t i) { sleep_ms(i == 0 ? own_ms : other_ms); });
}
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

// Feeds the detector one region in which the calling thread waited wait_ms beyond its own own_ms.
void note(double wait_ms, double own_ms = 0) {
  detail::note_region(static_cast<int64_t>(wait_ms * 1e6), static_cast<int64_t>(own_ms * 1e6));
}

TEST_CASE("stalled regions fall back to one thread, then try all threads again", "[core][parallel]") {
  ThreadCount tc(2, {.stall_ms = 2, .stalls = 3, .window_ms = 1000, .hold_ms = 150, .max_hold_ms = 600,
                     .check_load = false});
  REQUIRE(runtime_threads() == 2);
  const int64_t backoffs = thread_state().backoffs;
  note(1.5);        // shorter than stall_ms: no stall
  note(6, 7);       // the caller's own share was longer: imbalance, no stall
  note(6);
  note(6);          // two stalls are not yet enough
  CHECK_FALSE(thread_state().contended);
  note(6);
  ThreadState st = thread_state();
  CHECK(st.contended);
  CHECK(st.running == 1);
  CHECK(st.requested == 2);
  CHECK(st.backoffs == backoffs + 1);
  CHECK(runtime_threads() == 1);
  CHECK(get_num_threads() == 2);  // what the user asked for does not change
  sleep_ms(200);                  // the hold (150 ms) is over: all threads again
  CHECK_FALSE(thread_state().contended);
  CHECK(runtime_threads() == 2);
  note(6);  // right after a hold one stall is enough, and the next hold is twice as long
  CHECK(thread_state().contended);
  sleep_ms(200);
  CHECK(thread_state().contended);  // 300 ms this time
  sleep_ms(150);
  CHECK_FALSE(thread_state().contended);
  sleep_ms(650);  // a quiet spell of 4 holds (600 ms) after the hold: back to needing three stalls
  note(0);        // any region notices the quiet spell
  note(6);
  CHECK_FALSE(thread_state().contended);
}

TEST_CASE("a region that waits for a slow thread is measured as a stall", "[core][parallel]") {
  ThreadCount tc(2, {.stall_ms = 5, .stalls = 1, .window_ms = 1000, .hold_ms = 100, .max_hold_ms = 100,
                     .check_load = false});
  const int64_t stalls = thread_state().stalls;
  region(30, 0);  // the other thread sleeps 30 ms while the caller has nothing to do
  CHECK(thread_state().stalls == stalls + 1);
  CHECK(thread_state().contended);
  CHECK(runtime_threads() == 1);
  region(30, 0);  // one thread now: the caller runs both pieces itself, no region, no stall
  CHECK(thread_state().stalls == stalls + 1);
}

TEST_CASE("adaptive threads: options are checked and HG_ADAPTIVE_THREADS-style off keeps every thread", "[core][parallel]") {
  CHECK_THROWS_WITH(set_adaptive_threads({.hold_ms = 0}), Catch::Contains("hold_ms=0"));
  CHECK_THROWS_WITH(set_adaptive_threads({.hold_ms = 100, .max_hold_ms = 50}), Catch::Contains("max_hold_ms >= hold_ms"));
  CHECK_THROWS_WITH(set_num_threads(0), Catch::Contains("n=0"));
  ThreadCount tc(2, {.enabled = false, .stall_ms = 1, .stalls = 1});
  for (int i = 0; i < 3; ++i) note(10);
  CHECK_FALSE(thread_state().contended);
  CHECK(runtime_threads() == 2);
}

TEST_CASE("adaptive threads: stalls on a machine with a free CPU per runnable thread start no hold", "[core][parallel]") {
  const int state = detail::machine_oversubscribed();
  REQUIRE(state >= -1);
  REQUIRE(state <= 1);
  if (state == -1) WARN("/proc/stat cannot be read here: holds are decided by the timings alone");
  // More busy threads than CPUs: procs_running counts them all, the machine is oversubscribed.
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (long i = 0; i < cpus + 2; ++i)
    busy.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  sleep_ms(50);
  const int loaded = detail::machine_oversubscribed();
  {
    // the same stalls as above start a hold now that the load confirms them
    ThreadCount tc(2, {.stall_ms = 1, .stalls = 1, .window_ms = 1000, .hold_ms = 100, .max_hold_ms = 100});
    note(6);
    if (loaded == 1) CHECK(thread_state().contended);
  }
  stop = true;
  for (auto& t : busy) t.join();
  if (state != -1) CHECK(loaded == 1);
  // A machine that is not oversubscribed: found by asking until a moment with a free CPU (a busy CI
  // machine may have none for a while); then the stall is dismissed and every thread stays.
  if (state != -1) {
    int free_cpu = 0;
    for (int i = 0; i < 50 && !free_cpu; ++i) {
      if (detail::machine_oversubscribed() == 0) free_cpu = 1;
      else sleep_ms(20);
    }
    if (free_cpu) {
      ThreadCount tc(2, {.stall_ms = 1, .stalls = 1, .window_ms = 1000, .hold_ms = 100, .max_hold_ms = 100});
      const int64_t dismissed = thread_state().dismissed;
      note(6);
      // the load is read again inside: it may have changed in between, then a hold is right
      if (!thread_state().contended) CHECK(thread_state().dismissed == dismissed + 1);
      else CHECK(thread_state().backoffs >= 1);
    }
  }
}
