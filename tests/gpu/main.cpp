// hg_gpu_tests: runs only where a CUDA device is present; otherwise exits 77, which CTest reports as
// Skipped (SKIP_RETURN_CODE 77 in tests/CMakeLists.txt). Either way its first line names the CUDA runtime,
// driver and libraries it runs with, for scripts/gpu-check.sh's summary.
//
// After the tests it prints the CUDA kernel coverage: for every dispatch table, how many of the dtype
// slots the backend registered were looked up by the tests (elementwise: per op and dtype). With
// HG_REQUIRE_KERNEL_COVERAGE=1 and no test filter, a registered kernel that never ran fails the run.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gpu/coverage.h"
#include "halfgrad.h"

int main(int argc, char** argv) {
  // Listing the tests needs no device (CTest's discovery runs this at build time on any machine).
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--list", 6) == 0) return Catch::Session().run(argc, argv);
  std::printf("cuda versions: %s\n", hg::cuda::version_info().c_str());
  if (!hg::cuda::is_available()) {
    std::printf("no CUDA device: skipping (%s)\n", hg::cuda::unavailable_reason().c_str());
    return 77;
  }
  std::printf("halfgrad GPU tests on %d CUDA device(s)\n", hg::cuda::device_count());
  const int rc = Catch::Session().run(argc, argv);
  const int never_ran = hg::test::print_cuda_coverage();
  const char* require = std::getenv("HG_REQUIRE_KERNEL_COVERAGE");
  if (rc == 0 && argc == 1 && require != nullptr && std::strcmp(require, "1") == 0 && never_ran > 0) {
    std::printf("FAILED: %d registered CUDA kernel(s) never ran (HG_REQUIRE_KERNEL_COVERAGE=1): write the GPU test "
                "that runs them\n", never_ran);
    return 1;
  }
  return rc;
}
