#pragma once
// CPU threading. Every CPU kernel (and oneDNN) runs on one OpenMP runtime (GNU libgomp): never mix
// a pthread BLAS pool with it (docs/ARCHITECTURE.md, "Threads").
//
// parallel_for(n, parallel, f) calls f(i) for i in [0, n): on the OpenMP team, one contiguous range
// per thread, when `parallel` is true, n >= 2 and more than one thread is allowed; otherwise inline
// on the calling thread. Every CPU kernel loop goes through here (or parallel_ranges), because:
//  * an exception thrown by f on any thread (an hg::Error from a check, std::bad_alloc) is caught on
//    that thread and rethrown to the caller once the region is over (the first one; the other ranges
//    still run to their end). Unwinding out of an OpenMP region would call std::terminate.
//  * libgomp builds a team (a memalign + free) even for `#pragma omp parallel if(false)`, and on a
//    small model's step those allocations cost more than the ops: a serial call opens no region.
#include <cstdint>
#include <type_traits>
#include <utility>

namespace hg {

// The number of threads CPU work may use, for the whole process (like torch.set_num_threads): OpenMP
// regions halfgrad starts and oneDNN's primitives follow it. Default: OMP_NUM_THREADS, else the CPUs.
int get_num_threads();
void set_num_threads(int n);  // 1 <= n <= max_num_threads()
// The most set_num_threads takes: 8 x the CPUs OpenMP can use (at least 8). Far more threads than
// cores only slow a run down, and libgomp crashed or hung building teams of 20000-100000 threads.
int max_num_threads();

// Busy machines. OpenMP threads wait for each other at the end of every parallel region, spinning
// first (libgomp's default). When another process holds a core, the thread that still has work
// waits for its time slice while its partner spins, and a region of microseconds takes milliseconds:
// the Fashion-MNIST MLP ran 10-15x slower on 2 threads than on 1 next to one or two busy loops
// (docs/ARCHITECTURE.md, "Threads"). halfgrad measures every region it runs: when the calling thread
// waited for the others longer than stall_ms and longer than the longest share of the work (its own
// time, scaled when another thread's range holds one item more than its own), that is a
// stall; `stalls` stalls within window_ms make the process run on one thread for hold_ms, then try
// all threads again: one stall then starts the next hold, twice as long (up to max_hold_ms), and a
// quiet spell of 4 * hold_ms resets both. A stall that would start a hold counts only when the
// machine really is oversubscribed at that moment: more runnable threads than online CPUs
// (procs_running in /proc/stat; where it cannot be read, the timings decide alone). On a quiet
// 16-core VM, waking idle vCPUs made regions wait over a millisecond without any other process, and
// the timings alone held the process on one thread for most of a run (3-5x slower than 16 threads).
struct AdaptiveThreadsOptions {
  bool enabled = true;  // HG_ADAPTIVE_THREADS=0 (or off) in the environment turns it off
  double stall_ms = 1.0;
  int stalls = 3;
  double window_ms = 200;
  double hold_ms = 500;
  double max_hold_ms = 8000;
  bool check_load = true;  // confirm with /proc/stat before a hold (tests that feed timings turn it off)
};
void set_adaptive_threads(const AdaptiveThreadsOptions& o);

struct ThreadState {
  int requested = 0;        // get_num_threads()
  int running = 0;          // what regions use now: requested, or 1 while contended
  bool contended = false;
  int64_t stalls = 0;       // stalled regions seen so far
  int64_t backoffs = 0;     // times the process fell back to one thread
  int64_t dismissed = 0;    // holds not started: the stalls came while the machine was not oversubscribed
};
ThreadState thread_state();

// The thread count a region started now on this thread gets (requested, or 1 while contended); it
// also sets this thread's OpenMP thread count to it, so oneDNN's regions follow. Kernels call it
// before any OpenMP or oneDNN work.
int runtime_threads();

// This thread's OpenMP thread count set to n for a scope, then restored: oneDNN sizes a primitive's
// regions from it when the primitive is created and when it runs.
class ScopedOmpThreads {
 public:
  explicit ScopedOmpThreads(int n);
  ~ScopedOmpThreads();
  ScopedOmpThreads(const ScopedOmpThreads&) = delete;
  ScopedOmpThreads& operator=(const ScopedOmpThreads&) = delete;

 private:
  int saved_, n_;
};

namespace detail {
// One region's timings, as parallel_ranges measures them (exposed so that tests can drive the
// detector without depending on how busy the test machine is).
void note_region(int64_t wait_ns, int64_t own_ns);
// 1 when this machine now has more runnable threads than online CPUs (procs_running in /proc/stat
// against sysconf's online CPUs), 0 when not, -1 when /proc/stat cannot be read.
int machine_oversubscribed();
}  // namespace detail

// A non-owning reference to a callable f(begin, end): one indirect call per range, the loop inside
// stays inlined in the caller's code.
class RangeFn {
 public:
  template <class F, class = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(F& f) : obj_(static_cast<void*>(&f)), call_([](void* o, int64_t b, int64_t e) { (*static_cast<F*>(o))(b, e); }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  void* obj_;
  void (*call_)(void*, int64_t, int64_t);
};

// f(begin, end) on one contiguous range of [0, n) per thread, on min(n, threads) threads (ranges differ
// in size by at most one, the calling thread's is the first and never longer than another's), or f(0, n)
// inline when !parallel, n < 2 or one thread is allowed. Per-thread scratch belongs inside f.
void parallel_ranges(int64_t n, bool parallel, RangeFn f);

template <class F>
void parallel_for(int64_t n, bool parallel, F&& f) {
  if (!parallel || n < 2 || runtime_threads() == 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  auto ranges = [&f](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  };
  parallel_ranges(n, true, ranges);
}

// The number of pieces of `piece` elements that cover n (the last one may be short).
constexpr int64_t num_pieces(int64_t n, int64_t piece) { return (n + piece - 1) / piece; }

// The start of piece i of `pieces` nearly equal pieces of [0, len), rounded to a multiple of `align`
// (pieces must be longer than align); piece `pieces` starts at len. Kernels that cut work into pieces
// from the shape alone (not from the thread count) give the same bits on any number of threads.
constexpr int64_t piece_start(int64_t len, int64_t pieces, int64_t i, int64_t align = 1) {
  if (i >= pieces) return len;
  const int64_t s = (len * i / pieces + align / 2) / align * align;
  return s < len ? s : len;
}

}  // namespace hg
