#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>

#include <unistd.h>

#include "core/error.h"

namespace hg {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Process-wide thread state. `requested` is what set_num_threads (or OMP_NUM_THREADS) asked for; while
// the machine is contended every region runs on one thread until hold_until.
struct State {
  std::atomic<int> requested{0};
  std::atomic<uint64_t> generation{1};  // bumped by set_num_threads: every thread re-applies its count
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
    s.requested = omp_get_max_threads();  // OMP_NUM_THREADS or the number of CPUs
    AdaptiveThreadsOptions o;
    const char* env = std::getenv("HG_ADAPTIVE_THREADS");
    if (env && (!std::strcmp(env, "0") || !std::strcmp(env, "off"))) o.enabled = false;
    apply_options(s, o);
  });
  return s;
}

bool contended_at(const State& s, int64_t t) { return s.adaptive && t < s.hold_until.load(std::memory_order_relaxed); }

}  // namespace

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

namespace {

// The first exception thrown inside a parallel region, kept until the region is over.
class FirstError {
 public:
  void capture() {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first_) first_ = std::current_exception();
  }
  void rethrow() const {
    if (first_) std::rethrow_exception(first_);
  }

 private:
  std::mutex mu_;
  std::exception_ptr first_;
};

}  // namespace

int get_num_threads() { return state().requested.load(std::memory_order_relaxed); }

int max_num_threads() { return std::max(8, 8 * omp_get_num_procs()); }

void set_num_threads(int n) {
  HG_CHECK(n >= 1 && n <= max_num_threads(), "set_num_threads: n=", n, " must be in [1, ", max_num_threads(),
           "] (at most 8 x the ", omp_get_num_procs(), " CPUs of this machine); threads beyond the CPUs only wait");
  State& s = state();
  s.requested = n;
  s.generation.fetch_add(1);
  runtime_threads();  // this thread at once; others at their next parallel call
}

int runtime_threads() {
  const State& s = state();
  const int want = contended_at(s, now_ns()) ? 1 : s.requested.load(std::memory_order_relaxed);
  thread_local int applied = 0;
  thread_local uint64_t generation = 0;
  const uint64_t g = s.generation.load(std::memory_order_relaxed);
  if (want != applied || g != generation) {
    omp_set_num_threads(want);  // oneDNN and every `omp parallel` started on this thread follow it
    applied = want;
    generation = g;
  }
  return omp_get_max_threads();
}

ScopedOmpThreads::ScopedOmpThreads(int n) : saved_(omp_get_max_threads()), n_(n) {
  if (n_ != saved_) omp_set_num_threads(n_);
}
ScopedOmpThreads::~ScopedOmpThreads() {
  if (n_ != saved_) omp_set_num_threads(saved_);
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
  return {s.requested.load(), contended ? 1 : s.requested.load(), contended, s.stall_count.load(), s.backoffs.load(),
          s.dismissed.load()};
}

void parallel_ranges(int64_t n, bool parallel, RangeFn f) {
  if (n <= 0) return;
  if (!parallel || n < 2) return f(0, n);
  const int threads = runtime_threads();
  if (threads == 1) return f(0, n);
  // Never more threads than ranges: a thread with an empty range would only wait, and the caller's own
  // range is what the stall detector measures the others by (on 16 threads, a GEMM of 8 tiles left the
  // caller empty-handed, and every such region looked like a stall: the process fell back to one thread).
  const int team = static_cast<int>(std::min<int64_t>(n, threads));
  FirstError error;
  int64_t own = 0, mine = 1, longest = 1;
  const int64_t start = now_ns();
  // No worksharing construct: each thread takes its range and catches inside its own structured
  // block, which is the only way an exception may leave the region's code (OpenMP 5.2 §2.1).
#pragma omp parallel num_threads(team)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t begin = n * id / nt, end = n * (id + 1) / nt;
    const int64_t t0 = id == 0 ? now_ns() : 0;
    try {
      if (begin < end) f(begin, end);
    } catch (...) {
      error.capture();
    }
    if (id == 0) {
      own = now_ns() - t0;
      mine = std::max<int64_t>(end - begin, 1);
      longest = (n + nt - 1) / nt;
    }
  }
  // The caller's range holds n/nt items rounded down, the longest one more when nt does not divide n:
  // the region should last about own * longest / mine; what it took beyond that was spent waiting.
  const int64_t expected = own * longest / mine;
  detail::note_region(now_ns() - start - expected, expected);
  error.rethrow();
}

}  // namespace hg
