#include "core/adaptive_threads.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <unistd.h>

#include "core/error.h"
#include "core/parallel.h"

namespace hg {

int64_t detail::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

using detail::now_ns;

// The controller's process-wide state: its settings and the contention detector. While the machine is
// contended every region runs on one thread until hold_until.
struct State {
  std::atomic<bool> adaptive{true}, check_load{true};
  std::atomic<int64_t> stall_ns{0}, window_ns{0}, hold_ns{0}, max_hold_ns{0};
  std::atomic<int> stalls_needed{0};
  // the contention detector
  std::atomic<int64_t> window_start{0}, hold_until{0}, next_hold{0}, hold_end{0};
  std::atomic<int> stalls{0};
  std::atomic<int64_t> backoffs{0}, stall_count{0}, dismissed{0};
};

void apply_options(State& s, const AdaptiveThreadsOptions& o) {
  s.adaptive = o.enabled;
  s.check_load = o.check_load;
  s.stall_ns = static_cast<int64_t>(o.stall_ms * 1e6);
  s.window_ns = static_cast<int64_t>(o.window_ms * 1e6);
  s.hold_ns = static_cast<int64_t>(o.hold_ms * 1e6);
  s.max_hold_ns = static_cast<int64_t>(o.max_hold_ms * 1e6);
  s.stalls_needed = o.stalls;
  s.next_hold = s.hold_ns.load();
  s.hold_until = 0;
  s.stalls = 0;
}

State& state() {
  static State s;
  static std::once_flag once;
  std::call_once(once, [] {
    AdaptiveThreadsOptions o;
    const char* env = std::getenv("HG_ADAPTIVE_THREADS");
    if (env && (!std::strcmp(env, "0") || !std::strcmp(env, "off"))) o.enabled = false;
    apply_options(s, o);
  });
  return s;
}

bool contended_at(const State& s, int64_t t) { return s.adaptive && t < s.hold_until.load(std::memory_order_relaxed); }

}  // namespace

bool detail::contended() { return contended_at(state(), now_ns()); }

// A region waited for other threads `wait` ns beyond the calling thread's own `own` ns of work.
void detail::note_region(int64_t wait, int64_t own) {
  State& s = state();
  if (!s.adaptive.load(std::memory_order_relaxed)) return;
  const int64_t t = now_ns();
  if (wait <= s.stall_ns.load(std::memory_order_relaxed) || wait <= own) {
    // a quiet region well after the last hold ended: the machine is quiet again, start short
    if (s.hold_end.load(std::memory_order_relaxed) != 0 && t - s.hold_end.load(std::memory_order_relaxed) > 4 * s.hold_ns) {
      s.next_hold = s.hold_ns.load();
      s.hold_end = 0;
    }
    return;
  }
  s.stall_count.fetch_add(1, std::memory_order_relaxed);
  if (t - s.window_start.load(std::memory_order_relaxed) > s.window_ns.load(std::memory_order_relaxed)) {
    s.window_start = t;
    s.stalls = 0;
  }
  // right after a hold the machine is known to be busy: one stall is enough to hold again
  const bool probation = s.hold_end.load(std::memory_order_relaxed) != 0;
  if (s.stalls.fetch_add(1, std::memory_order_relaxed) + 1 < s.stalls_needed.load(std::memory_order_relaxed) &&
      !probation)
    return;
  // Slow regions on a machine with a free CPU for every runnable thread are not contention (idle
  // vCPUs slow to wake, one heavy range): keep every thread.
  if (s.check_load.load(std::memory_order_relaxed) && detail::machine_oversubscribed() == 0) {
    s.stalls = 0;
    s.dismissed.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const int64_t hold = s.next_hold.load(std::memory_order_relaxed);
  s.hold_until = t + hold;
  s.hold_end = t + hold;
  s.next_hold = std::min(2 * hold, s.max_hold_ns.load(std::memory_order_relaxed));
  s.stalls = 0;
  s.backoffs.fetch_add(1, std::memory_order_relaxed);
}

int detail::machine_oversubscribed() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (!f) return -1;
  // One line per CPU and a long "intr" line come first: read in pieces until procs_running.
  char line[256];
  long running = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "procs_running %ld", &running) == 1) break;
  std::fclose(f);
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (running < 0 || cpus < 1) return -1;
  return running > cpus ? 1 : 0;
}

void set_adaptive_threads(const AdaptiveThreadsOptions& o) {
  HG_CHECK(o.stall_ms > 0 && o.window_ms > 0 && o.hold_ms > 0 && o.max_hold_ms >= o.hold_ms && o.stalls >= 1,
           "set_adaptive_threads: stall_ms=", o.stall_ms, ", window_ms=", o.window_ms, ", hold_ms=", o.hold_ms,
           ", max_hold_ms=", o.max_hold_ms, ", stalls=", o.stalls,
           "; each must be > 0, stalls >= 1 and max_hold_ms >= hold_ms");
  apply_options(state(), o);
}

ThreadState thread_state() {
  const State& s = state();
  const bool contended = contended_at(s, now_ns());
  const int requested = get_num_threads();
  return {requested, contended ? 1 : requested, contended, s.stall_count.load(), s.backoffs.load(),
          s.dismissed.load()};
}

}  // namespace hg
