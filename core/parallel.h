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

int get_num_threads();
void set_num_threads(int n);  // n >= 1

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

// f(begin, end) on one contiguous range of [0, n) per thread (ranges differ in size by at most one),
// or f(0, n) inline when !parallel, n < 2 or one thread is allowed. Per-thread scratch belongs inside f.
void parallel_ranges(int64_t n, bool parallel, RangeFn f);

template <class F>
void parallel_for(int64_t n, bool parallel, F&& f) {
  if (!parallel || n < 2 || get_num_threads() == 1) {
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

}  // namespace hg
