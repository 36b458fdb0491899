#pragma once
// The CUDA kernel coverage table that hg_gpu_tests and hg_backend_ops print after their runs: for every
// dispatch table, how many of the dtype slots the CUDA backend registered were looked up in this
// process (the elementwise table: per op and dtype).
#include <cstdio>
#include <string>

#include "halfgrad.h"
#include "ops/dispatch.h"

namespace hg::test {

// Prints the table; returns the number of registered kernels that never ran.
inline int print_cuda_coverage() {
  int registered = 0, called = 0;
  std::printf("CUDA kernel coverage (dtype slots looked up / registered):\n");
  for (const KernelCoverage& row : kernel_coverage(DeviceType::CUDA)) {
    registered += row.registered;
    called += row.called;
    std::string gaps;
    for (DType t : row.missing) gaps += std::string(gaps.empty() ? "" : " ") + dtype_name(t);
    std::printf("  %-34s %d/%d%s%s\n", row.table.c_str(), row.called, row.registered, gaps.empty() ? "" : "  missing: ",
                gaps.c_str());
  }
  std::printf("CUDA kernel coverage: %d of %d kernels ran (%.1f%%)\n", called, registered,
              registered ? 100.0 * called / registered : 0.0);
  return registered - called;
}

}  // namespace hg::test
