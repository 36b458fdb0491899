#include "core/parallel.h"

#include <omp.h>

#include <exception>
#include <mutex>

#include "core/error.h"

namespace hg {

int get_num_threads() { return omp_get_max_threads(); }

void set_num_threads(int n) {
  HG_CHECK(n >= 1, "set_num_threads: n=", n, " must be >= 1");
  omp_set_num_threads(n);
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

void parallel_ranges(int64_t n, bool parallel, RangeFn f) {
  if (n <= 0) return;
  if (!parallel || n < 2 || omp_get_max_threads() == 1) return f(0, n);
  FirstError error;
  // No worksharing construct: each thread takes its range and catches inside its own structured
  // block, which is the only way an exception may leave the region's code (OpenMP 5.2 §2.1).
#pragma omp parallel
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t begin = n * id / nt, end = n * (id + 1) / nt;
    try {
      if (begin < end) f(begin, end);
    } catch (...) {
      error.capture();
    }
  }
  error.rethrow();
}

}  // namespace hg
