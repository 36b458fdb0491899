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

// The thread count a region started now on this thread gets (requested, or 1 while the adaptive-threads
// controller, core/adaptive_threads.h, holds the process on one thread); it also sets this thread's
// OpenMP thread count to it, so oneDNN's regions follow. Kernels call it before any OpenMP or oneDNN work.
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
