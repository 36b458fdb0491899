// hg_gpu_tests: runs only where a CUDA device is present; otherwise exits 77, which CTest reports as
// Skipped (SKIP_RETURN_CODE 77 in tests/CMakeLists.txt). Either way its first line names the CUDA runtime,
// driver and libraries it runs with, for scripts/gpu-check.sh's summary.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "halfgrad.h"

int main(int argc, char** argv) {
  std::printf("cuda versions: %s\n", hg::cuda::version_info().c_str());
  if (!hg::cuda::is_available()) {
    std::printf("no CUDA device: skipping (%s)\n", hg::cuda::unavailable_reason().c_str());
    return 77;
  }
  std::printf("halfgrad GPU tests on %d CUDA device(s)\n", hg::cuda::device_count());
  return Catch::Session().run(argc, argv);
}
