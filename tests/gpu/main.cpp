// hg_gpu_tests: runs only where a CUDA device is present; otherwise exits 77, which CTest reports as
// Skipped (SKIP_RETURN_CODE 77 in tests/CMakeLists.txt).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "halfgrad.h"

int main(int argc, char** argv) {
  if (!hg::cuda::is_available()) {
    std::printf("no CUDA device: skipping\n");
    return 77;
  }
  std::printf("halfgrad GPU tests on %d CUDA device(s)\n", hg::cuda::device_count());
  return Catch::Session().run(argc, argv);
}
