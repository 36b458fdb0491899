#include "core/parallel.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>

#include "core/adaptive_threads.h"
#include "core/error.h"

namespace hg {
namespace {

using detail::now_ns;

// The process's thread count: what set_num_threads (or OMP_NUM_THREADS) asked for.
struct State {
  std::atomic<int> requested{0};
  std::atomic<uint64_t> generation{1};  // bumped by set_num_threads: every thread re-applies its count
};

State& state() {
  static State s;
  static std::once_flag once;
  std::call_once(once, [] { s.requested = omp_get_max_threads(); });  // OMP_NUM_THREADS or the number of CPUs
  return s;
}

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
  const int want = detail::contended() ? 1 : s.requested.load(std::memory_order_relaxed);
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
