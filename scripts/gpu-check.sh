#!/usr/bin/env bash
# For the day a GPU is lent: builds halfgrad with the CUDA backend for the GPU that is present, runs
# the GPU tests (ctest -L gpu) and the benchmarks, and prints one summary table.
#
#   scripts/gpu-check.sh                 # build in ./build-gpu, run everything
#   BUILD_DIR=/tmp/b scripts/gpu-check.sh
#   HG_CUDA_ARCHS=90a scripts/gpu-check.sh          # override the detected architecture
#   HG_CMAKE_ARGS="-DHG_ONEDNN=OFF" scripts/gpu-check.sh   # extra configure arguments
#
# Logs (and the summary, as summary.txt) go to $OUT when it is set (the device machine's result
# folder), else to the build folder. Exit status: 0 when everything passed, 1 when something failed,
# 77 when there is no GPU.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
logs="${OUT:-$build}"
mkdir -p "$build" "$logs"
export PATH="/usr/local/cuda/bin:$PATH"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no GPU (nvidia-smi is missing or finds no device); nothing to do"
  exit 77
fi

# compute_cap is "9.0" on an H100/H200, "8.0" on an A100: CMake wants "90" / "80".
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d ' ')"
driver="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)"
archs="${HG_CUDA_ARCHS:-${cap/./}}"
echo "gpu-check: $gpu_name (compute capability $cap, driver $driver) -> HG_CUDA_ARCHS=$archs"

configure=(-S "$root" -B "$build" -DHG_CUDA=ON "-DHG_CUDA_ARCHS=$archs" -DCMAKE_BUILD_TYPE=Release
           -DHG_BUILD_TESTS=ON -DHG_BUILD_EXAMPLES=ON)
if command -v ninja >/dev/null 2>&1 && [ ! -f "$build/CMakeCache.txt" ]; then configure+=(-G Ninja); fi
if command -v ccache >/dev/null 2>&1; then
  configure+=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# shellcheck disable=SC2206  # HG_CMAKE_ARGS is split on spaces on purpose
[ -n "${HG_CMAKE_ARGS:-}" ] && configure+=(${HG_CMAKE_ARGS})

build_status="ok"
start=$(date +%s)
if ! cmake "${configure[@]}" >"$logs/configure.log" 2>&1; then
  build_status="configure FAILED (see configure.log)"
elif ! cmake --build "$build" -j "$(nproc)" >"$logs/build.log" 2>&1; then
  build_status="build FAILED (see build.log)"
fi
build_s=$(($(date +%s) - start))
if [ "$build_status" != "ok" ]; then
  echo "gpu-check: $build_status"
  tail -n 30 "$logs/configure.log" "$logs/build.log" 2>/dev/null || true
fi

# --- tests -------------------------------------------------------------------------------------
ctest_line="not run"
catch_line="not run"
if [ "$build_status" = "ok" ]; then
  ctest --test-dir "$build" -L gpu --output-on-failure >"$logs/ctest-gpu.log" 2>&1 || true
  ctest_line="$(grep -E 'tests passed|tests failed' "$logs/ctest-gpu.log" | tail -n 1 || true)"
  [ -n "$ctest_line" ] || ctest_line="no summary (see ctest-gpu.log)"
  if [ -x "$build/tests/hg_gpu_tests" ]; then
    "$build/tests/hg_gpu_tests" --durations yes >"$logs/hg_gpu_tests.log" 2>&1 || true
    # Catch2 v2 ends with "All tests passed (A assertions in T test cases)" or
    # "test cases: T | P passed | F failed" and "assertions: ..."
    catch_line="$(grep -E '^(All tests passed|test cases:|assertions:)' "$logs/hg_gpu_tests.log" | tr '\n' ' ' || true)"
    [ -n "$catch_line" ] || catch_line="no summary (see hg_gpu_tests.log)"
  fi
  # the CPU suite on this machine too: the oracle the GPU is compared with
  ctest --test-dir "$build" -LE gpu -j "$(nproc)" >"$logs/ctest-cpu.log" 2>&1 || true
  cpu_line="$(grep -E 'tests passed|tests failed' "$logs/ctest-cpu.log" | tail -n 1 || true)"
fi

# --- benchmarks --------------------------------------------------------------------------------
bench_lines=()
for b in bench_gemm bench_elementwise; do
  exe="$build/$b"
  if [ "$build_status" != "ok" ] || [ ! -x "$exe" ]; then
    bench_lines+=("$b: not built")
    continue
  fi
  if timeout 600 "$exe" >"$logs/$b.log" 2>&1; then
    while IFS= read -r line; do bench_lines+=("$b: $line"); done \
      < <(grep -v '^[[:space:]]*$' "$logs/$b.log" | tail -n 15)
  else
    bench_lines+=("$b: FAILED or timed out (see $b.log)")
  fi
done

# --- summary -----------------------------------------------------------------------------------
{
  printf '%s\n' "================ halfgrad gpu-check ================"
  printf '%-14s %s\n' "gpu" "$gpu_name (sm_${cap/./}, driver $driver)"
  printf '%-14s %s\n' "archs" "$archs"
  printf '%-14s %s\n' "build" "$build_status (${build_s} s)"
  printf '%-14s %s\n' "ctest -L gpu" "$ctest_line"
  printf '%-14s %s\n' "hg_gpu_tests" "$catch_line"
  printf '%-14s %s\n' "ctest (cpu)" "${cpu_line:-not run}"
  printf '%s\n' "---------------- benchmarks ----------------"
  for l in "${bench_lines[@]}"; do printf '%s\n' "$l"; done
  printf '%s\n' "===================================================="
} | tee "$logs/summary.txt"

if [ "$build_status" != "ok" ] || ! grep -q "100% tests passed" "$logs/ctest-gpu.log" 2>/dev/null; then
  exit 1
fi
exit 0
