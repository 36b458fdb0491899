#!/usr/bin/env bash
# For the day a GPU is lent: builds halfgrad with the CUDA backend for the GPU that is present, runs
# the GPU tests (ctest -L gpu) and the benchmarks, and prints one summary table.
#
#   scripts/gpu-check.sh                 # install what is missing (scripts/setup.sh), build in ./build-gpu, run everything
#   BUILD_DIR=/tmp/b scripts/gpu-check.sh
#   HG_CUDA_ARCHS=90a scripts/gpu-check.sh          # override the detected architecture
#   HG_CMAKE_ARGS="-DHG_ONEDNN=OFF" scripts/gpu-check.sh   # extra configure arguments
#   QUICK=1 scripts/gpu-check.sh         # no CPU suite, no CPU benchmarks (bench_gemm, bench_elementwise), no compare_pytorch
#   HG_PREBUILT=1 BUILD_DIR=... scripts/gpu-check.sh  # a build made on another machine at the same path
#                                        # (a GPU machine without the build's dependencies): no configure,
#                                        # no build, no CPU suite; the GPU tests and benchmarks run
#
# `ctest -L gpu` runs the whole GPU suite (with the kernel coverage), the backend-ops harness
# (hg_backend_ops: every CUDA kernel against the CPU over shape variants), each GPU test case as its own entry
# with a timeout (gpu_case: ..., so a hang or a fault names its test) and the MLP's CPU-vs-GPU training.
# Besides the tests: compute-sanitizer (memcheck over the whole GPU suite, racecheck, synccheck and
# initcheck over the kernels with shared memory and shuffles), the device's cuDNN properties as JSON (devprop.json, to
# replace tests/cuda/fixtures/), the CUDA kernel coverage table, the Fashion-MNIST MLP and CNN trained
# with --device cuda in every precision mode (--compare: FP32, FP16 O1/O2/O3, BF16 O1; the data from
# HG_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist), each mode's accuracy held to the same run's on
# the CPU (HG_ACCURACY_TOLERANCE, default 0.03), fp8_training --device cuda --quick (the FP8
# recipes' accuracy and the share of FP8 GEMMs run natively), amp_recipe --full --device cuda, and
# bench_gemm_cuda (TFLOP/s of F32, TF32, F16, BF16 and FP8 GEMMs against the GPU's published dense peak), bench_fp8
# --device cuda (the FP8 linear layer's step against BF16) and
# bench_reduce_cuda (GB/s of sums against a device copy's), bench_train --device cuda eager (with and without linear's GEMM epilogues) and --graph (ms,
# launches and syncs per step of tiny, mlp, mlp_fp16, cnn), and benchmarks/compare_pytorch --device cuda
# when PyTorch sees the GPU.
#
# Logs (and the summary, as summary.txt) go to $OUT when it is set (the device machine's result
# folder), else to the build folder. Exit status: 0 only when the GPU tests really ran on the GPU (test
# cases and assertions counted in hg_gpu_tests' output, every registered kernel run), all passed, every
# program (training, benchmarks) succeeded, FP8 GEMMs ran natively on sm_89+, and nothing was skipped; 1
# otherwise, skipped GPU tests (no usable device, a driver too old for the CUDA runtime), a missing
# compute-sanitizer or dataset, and a machine without a GPU included.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$root/build-gpu}"
logs="${OUT:-$build}"
mkdir -p "$build" "$logs"
export PATH="/usr/local/cuda/bin:$PATH"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: FAILED: no GPU (nvidia-smi is missing or finds no device); the GPU tests cannot run"
  exit 1
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
# What the build needs (Debian packages, the Fashion-MNIST dataset): scripts/setup.sh, unless the build was
# made elsewhere (a machine that reaches no archive then goes on with what it has).
if [ -z "${HG_PREBUILT:-}" ]; then
  bash "$root/scripts/setup.sh" || echo "gpu-check: scripts/setup.sh failed; going on with what is installed"
fi
start=$(date +%s)
if [ -n "${HG_PREBUILT:-}" ]; then
  if [ ! -x "$build/tests/hg_gpu_tests" ]; then
    build_status="prebuilt build FAILED: $build/tests/hg_gpu_tests is missing (HG_PREBUILT wants a CUDA build there)"
  else
    echo "gpu-check: HG_PREBUILT: using the build in $build as it is (built on $(cat "$build/.built-on" 2>/dev/null || echo 'another machine'))"
    ldd "$build/tests/hg_gpu_tests" "$build"/libhalfgrad_cuda.so.* 2>&1 | grep 'not found' && build_status="prebuilt build FAILED: libraries not found (see above)"
  fi
elif ! cmake "${configure[@]}" >"$logs/configure.log" 2>&1; then
  build_status="configure FAILED (see configure.log)"
elif ! cmake --build "$build" -j "$(nproc)" >"$logs/build.log" 2>&1; then
  build_status="build FAILED (see build.log)"
fi
build_s=$(($(date +%s) - start))
if [ "$build_status" != "ok" ]; then
  echo "gpu-check: $build_status"
  tail -n 30 "$logs/configure.log" "$logs/build.log" 2>/dev/null || true
fi

# --- tests: they count only when they ran on the GPU ------------------------------------------
# hg_gpu_tests exits 77 (CTest: Skipped, and "100% tests passed") when it finds no usable device, so the
# verdict comes from its own output: its exit status and Catch2's counts of test cases and assertions.
export HG_FASHION_MNIST_DIR="${HG_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"  # device_training_*
ctest_line="not run"
catch_line="not run"
gpu_verdict="not run (the build failed)"
runtime="unknown (hg_gpu_tests did not run)"
if [ "$build_status" = "ok" ]; then
  ctest --test-dir "$build" -L gpu --output-on-failure >"$logs/ctest-gpu.log" 2>&1 || true
  ctest_line="$(grep -E 'tests passed|tests failed' "$logs/ctest-gpu.log" | tail -n 1 || true)"
  [ -n "$ctest_line" ] || ctest_line="no summary (see ctest-gpu.log)"
  grep -q 'did not run' "$logs/ctest-gpu.log" && ctest_line="$ctest_line, but some were SKIPPED (see ctest-gpu.log)"
  gpu_rc=0
  # kernel coverage is required on the GPU as on the emulator: a registered kernel no test ran fails the run
  HG_REQUIRE_KERNEL_COVERAGE=1 HG_DEVPROP_OUT="$logs/devprop.json" "$build/tests/hg_gpu_tests" --durations yes \
    >"$logs/hg_gpu_tests.log" 2>&1 || gpu_rc=$?
  coverage_line="$(grep -m1 '^CUDA kernel coverage: ' "$logs/hg_gpu_tests.log" | sed 's/^CUDA kernel coverage: //' || true)"
  runtime="$(sed -n 's/^cuda versions: //p' "$logs/hg_gpu_tests.log" | head -n 1)"
  # Catch2 v2 ends with "All tests passed (A assertions in T test cases)" or with
  # "test cases: T | P passed | F failed" and "assertions: A | ..."
  catch_line="$(grep -E '^(All tests passed|test cases:|assertions:)' "$logs/hg_gpu_tests.log" | tr '\n' ' ' || true)"
  [ -n "$catch_line" ] || catch_line="no summary (see hg_gpu_tests.log)"
  cases="$(sed -nE 's/.* in ([0-9]+) test cases?\)$/\1/p; s/^test cases: *([0-9]+).*/\1/p' "$logs/hg_gpu_tests.log" | head -n 1)"
  asserts="$(sed -nE 's/^All tests passed \(([0-9]+) assertions?.*/\1/p; s/^assertions: *([0-9]+).*/\1/p' \
             "$logs/hg_gpu_tests.log" | head -n 1)"
  if [ "$gpu_rc" -eq 77 ]; then
    gpu_verdict="SKIPPED: $(grep -m1 '^no CUDA device' "$logs/hg_gpu_tests.log" || echo 'exit 77')"
  elif [ "$gpu_rc" -ne 0 ]; then
    gpu_verdict="FAILED (exit $gpu_rc, see hg_gpu_tests.log)"
  elif [ "${cases:-0}" -eq 0 ] || [ "${asserts:-0}" -eq 0 ]; then
    gpu_verdict="FAILED: no test case or assertion ran (${cases:-0} test cases, ${asserts:-0} assertions)"
  else
    gpu_verdict="ok: $cases test cases, $asserts assertions ran on the GPU"
  fi
fi
# the backend-ops harness (every CUDA kernel against the CPU over its shape variants); ctest ran it too,
# this run keeps its table in a log of its own
backend_line="not run"
if [ "${gpu_verdict%%:*}" = "ok" ]; then
  backend_rc=0
  timeout 900 "$build/tests/hg_backend_ops" >"$logs/hg_backend_ops.log" 2>&1 || backend_rc=$?
  backend_line="$(grep -m1 '^backend ops: ' "$logs/hg_backend_ops.log" | sed 's/^backend ops: //' || true)"
  backend_line="${backend_line:-no summary}; coverage $(grep -m1 '^CUDA kernel coverage: ' "$logs/hg_backend_ops.log" |
    sed 's/^CUDA kernel coverage: //' || true) (exit $backend_rc, see hg_backend_ops.log)"
  [ "$backend_rc" -eq 0 ] || backend_failed=1
fi
# the CPU suite on this machine too: the oracle the GPU is compared with
if [ "$build_status" = "ok" ] && [ -z "${QUICK:-}" ] && [ -z "${HG_PREBUILT:-}" ]; then
  ctest --test-dir "$build" -LE gpu -j "$(nproc)" >"$logs/ctest-cpu.log" 2>&1 || true
  cpu_line="$(grep -E 'tests passed|tests failed' "$logs/ctest-cpu.log" | tail -n 1 || true)"
fi

skipped=()
# --- compute-sanitizer --------------------------------------------------------------------------
san_lines=()
sanitizer="$(command -v compute-sanitizer 2>/dev/null ||
             find /usr/local -maxdepth 3 -path '*/compute-sanitizer/compute-sanitizer' 2>/dev/null | head -n 1 || true)"
if [ "${gpu_verdict%%:*}" != "ok" ]; then
  san_lines+=("not run (the GPU tests did not pass)")
elif [ -z "$sanitizer" ]; then
  san_lines+=("SKIPPED: compute-sanitizer not found (PATH, /usr/local/cuda*/compute-sanitizer/)")
  skipped+=("compute-sanitizer")
else
  # memcheck over everything; racecheck, synccheck and initcheck (slower) over the kernels with barriers
  shared="[loss],[pool],[optim],gpu: sum*,gpu: max*,gpu: softmax*,gpu: batch_norm*,gpu: layer_norm*,gpu: backward*"
  for tool in memcheck racecheck synccheck initcheck; do
    filter=()
    [ "$tool" = memcheck ] || filter=("$shared")
    rc=0
    timeout 900 "$sanitizer" --tool "$tool" --error-exitcode 9 "$build/tests/hg_gpu_tests" "${filter[@]}" \
      >"$logs/$tool.log" 2>&1 || rc=$?
    summary="$(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/$tool.log" | tail -n 1 | sed 's/^========= //' || true)"
    san_lines+=("$tool: ${summary:-no summary} (exit $rc${filter:+, kernels with barriers}; see $tool.log)")
    [ "$rc" -eq 0 ] || san_failed=1
  done
fi

# --- training on the device: every precision mode ------------------------------------------------
train_lines=()
data="$HG_FASHION_MNIST_DIR"
if [ "$build_status" != "ok" ] || [ "${gpu_verdict%%:*}" != "ok" ]; then
  train_lines+=("not run")
elif [ ! -e "$data/train-images-idx3-ubyte.gz" ] && [ ! -e "$data/train-images-idx3-ubyte" ]; then
  train_lines+=("SKIPPED: no Fashion-MNIST in $data (apt-get install dataset-fashion-mnist, or set HG_FASHION_MNIST_DIR)")
  skipped+=("training")
else
  for ex in fashion_mnist_mlp:10000 fashion_mnist_cnn:5000; do
    name="${ex%%:*}"
    if HG_FASHION_MNIST_DIR="$data" timeout 900 "$build/$name" --device cuda --compare --epochs 1 --limit "${ex##*:}" \
         >"$logs/$name.log" 2>&1; then
      while IFS= read -r line; do train_lines+=("$name: $line"); done \
        < <(sed -n '/^mode *test acc/,/^[a-z0-9-]*: autocast/p' "$logs/$name.log" | grep -v ': autocast')
    else
      train_lines+=("$name: FAILED (see $name.log)")
      train_failed=1
      continue
    fi
    # the same runs on this machine's CPU, the oracle: every precision mode's test accuracy on the GPU within
    # HG_ACCURACY_TOLERANCE (default 0.03, 3 points) of the CPU's (same data, seed and batches; the devices
    # round differently, so the runs drift apart a little, not by whole points)
    if HG_FASHION_MNIST_DIR="$data" timeout 900 "$build/$name" --device cpu --compare --epochs 1 --limit "${ex##*:}" \
         >"$logs/${name}_cpu.log" 2>&1; then
      verdict="$(awk -v tol="${HG_ACCURACY_TOLERANCE:-0.03}" '
        /^mode *test acc/ { table = 1; next }
        table && NF >= 2 && $2 ~ /^[0-9.]+$/ { if (FILENAME == ARGV[1]) gpu[$1] = $2; else cpu[$1] = $2; next }
        { table = 0 }
        END {
          n = 0; bad = ""
          for (m in gpu) {
            n++
            if (!(m in cpu)) { bad = bad " " m ": no CPU row"; continue }
            d = gpu[m] - cpu[m]; if (d < 0) d = -d
            if (d > tol) bad = bad sprintf(" %s: GPU %.4f vs CPU %.4f", m, gpu[m], cpu[m])
          }
          if (n == 0) print "FAILED: no accuracy rows"
          else if (bad != "") print "FAILED:" bad " (tolerance " tol ")"
          else print "ok: " n " modes within " tol " of the CPU"
        }' "$logs/$name.log" "$logs/${name}_cpu.log")"
    else
      verdict="FAILED: the CPU run failed (see ${name}_cpu.log)"
    fi
    train_lines+=("$name vs the CPU: $verdict")
    [ "${verdict%%:*}" = "ok" ] || accuracy_failed=1
  done
  # FP8 training on the device (the nine runs of --quick): accuracy against BF16, and the share of the FP8
  # GEMMs that ran on FP8 Tensor Cores (cuBLASLt, sm_89+; the MLP's 10-output layer takes the decode route)
  if HG_FASHION_MNIST_DIR="$data" timeout 900 "$build/fp8_training" --device cuda --quick >"$logs/fp8_training.log" 2>&1; then
    while IFS= read -r line; do train_lines+=("fp8_training: $line"); done \
      < <(sed -n '/^run  *test acc/,/^fp8-history-1 /p' "$logs/fp8_training.log")
  else
    train_lines+=("fp8_training: FAILED (see fp8_training.log)")
    train_failed=1
  fi
  # on FP8 Tensor Cores (sm_89 and later) some of the delayed recipe's GEMMs must have run natively: 0% means
  # cuBLASLt refused every call and the layer quietly decoded to BF16
  native_share="$(sed -nE 's/^fp8-delayed .* ([0-9]+)%$/\1/p' "$logs/fp8_training.log" 2>/dev/null | head -n 1 || true)"
  if [ "${cap/./}" -ge 89 ] 2>/dev/null && [ "${native_share:-0}" -eq 0 ]; then
    train_lines+=("fp8_training: FAILED: no FP8 GEMM ran natively on sm_${cap/./} (native ${native_share:-?}%): cuBLASLt refused them")
    native_failed=1
  fi
fi

# --- benchmarks --------------------------------------------------------------------------------
bench_failed=()  # any program that fails fails the check, benchmarks included
gemm_lines=()
if [ "$build_status" = "ok" ] && [ "${gpu_verdict%%:*}" = "ok" ] && [ -x "$build/amp_recipe" ]; then
  if timeout 600 "$build/amp_recipe" --full --device cuda >"$logs/amp_recipe.log" 2>&1; then
    recipe="$(grep -E 'Total execution time|speed-up|peak tensor memory' "$logs/amp_recipe.log" | tr -s ' ' | paste -sd ';' - || true)"
  else
    recipe="FAILED (see amp_recipe.log)"
    bench_failed+=("amp_recipe")
  fi
  # halfgrad's GEMM against the published dense peak of the GPUs this knows (TFLOP/s: F32, TF32, F16, BF16, FP8)
  case "$gpu_name" in
    *H100*PCIe*) peak="F32=51,TF32=378,F16=756,BF16=756,FP8=1513" ;;
    *H100* | *H200*) peak="F32=67,TF32=495,F16=989,BF16=989,FP8=1979" ;;
    *A100*) peak="F32=19.5,TF32=156,F16=312,BF16=312" ;;
    *L40S*) peak="F32=91.6,TF32=183,F16=362,BF16=362,FP8=733" ;;
    *) peak="" ;;
  esac
  if timeout 600 "$build/bench_gemm_cuda" ${peak:+--peak "$peak"} >"$logs/bench_gemm_cuda.log" 2>&1; then
    while IFS= read -r line; do gemm_lines+=("bench_gemm_cuda: $line"); done \
      < <(sed -n '/^N  *dtype/,$p' "$logs/bench_gemm_cuda.log")
  else
    gemm_lines+=("bench_gemm_cuda: FAILED (see bench_gemm_cuda.log)")
    bench_failed+=("bench_gemm_cuda")
  fi
  # sums over a non-last dim (the column kernel), the last dim and everything, against a copy's bandwidth
  if timeout 300 "$build/bench_reduce_cuda" --quick >"$logs/bench_reduce_cuda.log" 2>&1; then
    while IFS= read -r line; do gemm_lines+=("bench_reduce_cuda: $line"); done \
      < <(sed -n '/^sum  *dtype/,$p' "$logs/bench_reduce_cuda.log")
  else
    gemm_lines+=("bench_reduce_cuda: FAILED (see bench_reduce_cuda.log)")
    bench_failed+=("bench_reduce_cuda")
  fi
  # ms per training step on the device, eager and replaying a captured step, with the launches and host syncs
  # of one step (cuda/counters.h): the small-model workloads, where launches are the cost
  # (eager-separate: linear's bias, ReLU and bias gradient as separate launches, HG_LINEAR_EPILOGUES=0, against
  # which the cuBLASLt epilogues of eager are measured)
  for mode in eager eager-separate graph; do
    flags=(--device cuda)
    [ "$mode" = graph ] && flags+=(--graph)
    epilogues=1
    [ "$mode" = eager-separate ] && epilogues=0
    for w in tiny mlp mlp_fp16 cnn; do
      if HG_LINEAR_EPILOGUES=$epilogues timeout 300 "$build/bench_train" --workload "$w" "${flags[@]}" \
           >"$logs/bench_train_${w}_$mode.log" 2>&1; then
        gemm_lines+=("bench_train $w $mode: $(grep -o '"ms_per_step_median": [0-9.]*\|"launches_per_step": [0-9.]*\|"syncs_per_step": [0-9.]*' "$logs/bench_train_${w}_$mode.log" | tr '\n' ' ')")
      else
        gemm_lines+=("bench_train $w $mode: FAILED (see bench_train_${w}_$mode.log)")
        bench_failed+=("bench_train $w $mode")
      fi
    done
  done
  # halfgrad (eager and --graph) against PyTorch's eager step on the device, same workloads, when this python's
  # PyTorch sees the GPU (QUICK=1 skips it)
  if [ -z "${QUICK:-}" ]; then
    if python3 -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" >/dev/null 2>&1; then
      if timeout 900 bash "$root/benchmarks/compare_pytorch" --device cuda --build "$build" >"$logs/compare_pytorch.log" 2>&1; then
        while IFS= read -r line; do gemm_lines+=("compare_pytorch: $line"); done \
          < <(sed -n '/^workload /,$p' "$logs/compare_pytorch.log")
      else
        gemm_lines+=("compare_pytorch: FAILED (see compare_pytorch.log)")
        bench_failed+=("compare_pytorch")
      fi
    else
      gemm_lines+=("compare_pytorch: not run (this python has no PyTorch that sees the GPU)")
    fi
  fi
  # the FP8 linear layer's step against BF16 on the device: cuBLASLt FP8 GEMMs on sm_89+ (the last column
  # says the share that ran natively), BF16 GEMMs on decoded values elsewhere
  if [ -x "$build/bench_fp8" ]; then
    if timeout 300 "$build/bench_fp8" --quick --device cuda >"$logs/bench_fp8.log" 2>&1; then
      while IFS= read -r line; do gemm_lines+=("bench_fp8: $line"); done \
        < <(sed -n '/^m x in/,$p' "$logs/bench_fp8.log")
    else
      gemm_lines+=("bench_fp8: FAILED (see bench_fp8.log)")
      bench_failed+=("bench_fp8")
    fi
  fi
fi
bench_lines=()
for b in bench_gemm bench_elementwise; do
  exe="$build/$b"
  if [ "$build_status" != "ok" ] || [ ! -x "$exe" ] || [ -n "${QUICK:-}" ]; then
    bench_lines+=("$b: not run")
    continue
  fi
  if timeout 600 "$exe" >"$logs/$b.log" 2>&1; then
    while IFS= read -r line; do bench_lines+=("$b: $line"); done \
      < <(grep -v '^[[:space:]]*$' "$logs/$b.log" | tail -n 15)
  else
    bench_lines+=("$b: FAILED or timed out (see $b.log)")
    bench_failed+=("$b")
  fi
done

# --- summary -----------------------------------------------------------------------------------
{
  printf '%s\n' "================ halfgrad gpu-check ================"
  printf '%-14s %s\n' "gpu" "$gpu_name (sm_${cap/./}, driver $driver)"
  printf '%-14s %s\n' "cuda" "$runtime"
  printf '%-14s %s\n' "archs" "$archs"
  printf '%-14s %s\n' "build" "$build_status (${build_s} s${HG_PREBUILT:+, prebuilt})"
  printf '%-14s %s\n' "ctest -L gpu" "$ctest_line"
  printf '%-14s %s\n' "hg_gpu_tests" "$catch_line"
  printf '%-14s %s\n' "gpu verdict" "$gpu_verdict"
  printf '%-14s %s\n' "coverage" "${coverage_line:-not run} (CUDA kernels the GPU tests ran)"
  printf '%-14s %s\n' "backend ops" "$backend_line"
  printf '%-14s %s\n' "ctest (cpu)" "${cpu_line:-not run}"
  for l in "${san_lines[@]}"; do printf '%-14s %s\n' "sanitizer" "$l"; done
  [ ! -s "$logs/devprop.json" ] || printf '%-14s %s\n' "devprop" "$logs/devprop.json (cuDNN device properties)"
  printf '%s\n' "---------------- training on the GPU (1 epoch) ----------------"
  for l in "${train_lines[@]}"; do printf '%s\n' "$l"; done
  printf '%s\n' "---------------- benchmarks ----------------"
  printf '%s\n' "amp_recipe --full --device cuda: ${recipe:-not run}"
  for l in "${gemm_lines[@]}"; do printf '%s\n' "$l"; done
  for l in "${bench_lines[@]}"; do printf '%s\n' "$l"; done
  printf '%s\n' "===================================================="
} | tee "$logs/summary.txt"

reasons=()
[ "$build_status" = "ok" ] || reasons+=("build: $build_status")
[ "${gpu_verdict%%:*}" = "ok" ] || reasons+=("hg_gpu_tests: $gpu_verdict")
grep -q "100% tests passed" "$logs/ctest-gpu.log" 2>/dev/null || reasons+=("ctest -L gpu: $ctest_line")
! grep -q 'did not run' "$logs/ctest-gpu.log" 2>/dev/null || reasons+=("ctest -L gpu: some tests were skipped")
[ -z "${san_failed:-}" ] || reasons+=("compute-sanitizer reported errors")
[ -z "${train_failed:-}" ] || reasons+=("training on the GPU failed")
[ -z "${accuracy_failed:-}" ] || reasons+=("a precision mode's accuracy on the GPU is off the CPU's (see the training lines)")
[ -z "${backend_failed:-}" ] || reasons+=("hg_backend_ops: $backend_line")
[ -z "${native_failed:-}" ] || reasons+=("fp8_training: no FP8 GEMM ran on FP8 Tensor Cores")
[ "${#bench_failed[@]}" -eq 0 ] || reasons+=("programs failed: ${bench_failed[*]}")
[ "${#skipped[@]}" -eq 0 ] || reasons+=("skipped: ${skipped[*]}")
if [ "${#reasons[@]}" -gt 0 ]; then
  for r in "${reasons[@]}"; do echo "gpu-check: FAILED: $r"; done
  exit 1
fi
echo "gpu-check: ok"
exit 0
