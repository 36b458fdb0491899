#!/usr/bin/env bash
# Builds halfgrad and runs every test. Set-up included: installs missing Debian packages first.
#   bash scripts/test.sh                                  # Release build in build/, CUDA compiled when nvcc exists
#   HG_SANITIZE=address,undefined bash scripts/test.sh     # the same suite under ASan+UBSan (build-sanitize/, CPU only)
#   HG_CUDA=EMULATE bash scripts/test.sh -L emulator       # the GPU suite on the emulated device (build-emulate/)
# Extra arguments go to ctest (e.g. -R gemm, -L gpu). HG_BUILD_TARGETS="t1 t2" builds only those targets
# (CI's emulator stage builds emulator_suite, what the emulator-labelled tests run); HG_JOBS sets -j.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
jobs="${HG_JOBS:-2}"
san="${HG_SANITIZE:-}"
if [ -n "$san" ]; then
  build=build-sanitize
  # CUDA code is compiled (and checked) by the normal build; the sanitizer build runs the CPU suite.
  # -O1 with line tables (-g1), as ASan recommends: the stack traces name file and line, and the build
  # compiles 2-3x faster than at -O2 -g (the largest share of a cold CI run)
  cfg=(-DHG_SANITIZE="$san" -DHG_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
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
targets=()
for t in ${HG_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j"$jobs" "${targets[@]}"
cd "$build"
ctest --output-on-failure -j"$jobs" "$@"
