#include "core/parallel.h"

#include <omp.h>

#include "core/error.h"

namespace hg {
int get_num_threads() { return omp_get_max_threads(); }
void set_num_threads(int n) {
  HG_CHECK(n >= 1, "set_num_threads: n=", n, " must be >= 1");
  omp_set_num_threads(n);
}
}  // namespace hg
