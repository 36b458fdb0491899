#pragma once
// parallel_for(n, parallel, f): f(i) for i in [0, n), on the OpenMP team when `parallel` is true,
// there are at least two iterations and more than one thread; otherwise inline on this thread.
// Why not `#pragma omp parallel for if(cond)`: libgomp still builds a team (a memalign + free) for a
// region whose if-clause is false, and on a small model's step those allocations cost more than
// the ops themselves. Every CPU kernel loop goes through here.
#include <cstdint>

#include <omp.h>

namespace hg::cpu {

template <class F>
inline void parallel_for(int64_t n, bool parallel, F&& f) {
  if (!parallel || n < 2 || omp_get_max_threads() == 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) f(i);
}

// The number of pieces of `piece` elements that cover n (the last one may be short).
constexpr int64_t num_pieces(int64_t n, int64_t piece) { return (n + piece - 1) / piece; }

}  // namespace hg::cpu
