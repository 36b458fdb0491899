#!/usr/bin/env bash
# Builds halfgrad and runs every test. Set-up included: installs missing Debian packages first.
#   bash scripts/test.sh                                  # Release build in build/, CUDA compiled when nvcc exists
#   HG_SANITIZE=address,undefined bash scripts/test.sh     # the same suite under ASan+UBSan (build-sanitize/, CPU only)
#   HG_CUDA=EMULATE bash scripts/test.sh -L emulator       # the GPU suite on the emulated device (build-emulate/)
# Extra arguments go to ctest (e.g. -R gemm, -L gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
jobs="${HG_JOBS:-2}"
san="${HG_SANITIZE:-}"
if [ -n "$san" ]; then
  build=build-sanitize
  # CUDA code is compiled (and checked) by the normal build; the sanitizer build runs the CPU suite.
  cfg=(-DHG_SANITIZE="$san" -DHG_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
elif [ "${HG_CUDA:-}" = EMULATE ]; then
  # the CUDA backend built by g++ for the emulated device (cuda/emulator/): its kernels run on the CPU
  build=build-emulate
  cfg=(-DHG_CUDA=EMULATE)
else
  build=build
  cfg=(-DHG_CUDA="${HG_CUDA:-AUTO}")
fi
cmake -S . -B "$build" -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache "${cfg[@]}" >/dev/null
cmake --build "$build" -j"$jobs"
cd "$build"
ctest --output-on-failure -j"$jobs" "$@"
