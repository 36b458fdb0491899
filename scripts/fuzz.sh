#!/usr/bin/env bash
# Coverage-guided fuzzing of the file readers with libFuzzer: a clang build of the library (instrumented)
# with AddressSanitizer + UBSan in ./build-fuzz, then CTest's libfuzzer_* for SECONDS each (side by side).
#   bash scripts/fuzz.sh [SECONDS]        # default 60
# Needs clang (apt-get install clang); exits 77 without it. CI runs the seeded mutation driver (fuzz_*)
# in its GCC builds and calls this with a short budget when clang is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
if ! command -v clang++ >/dev/null 2>&1; then
  echo "fuzz: clang++ not found: libFuzzer not run (the fuzz_* tests of the GCC builds still fuzz the readers)"
  exit 77
fi
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DHG_CUDA=OFF -DHG_LIBFUZZER=ON -DHG_SANITIZE=address,undefined \
  -DHG_BUILD_EXAMPLES=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DHG_FUZZ_SECONDS="$seconds" \
  -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >/dev/null
# Only the libFuzzer targets: the seeded mutation driver (fuzz_*) already runs in the GCC builds, the
# sanitizer one included. The two readers are fuzzed side by side.
cmake --build build-fuzz -j"${HG_JOBS:-2}" --target hg_libfuzzer
ctest --test-dir build-fuzz -R '^libfuzzer_' -j"${HG_JOBS:-2}" --output-on-failure
