#!/usr/bin/env bash
# CTest cpu_without_cuda: a CPU program needs no CUDA library, in a build whose CUDA backend
# (libhalfgrad_cuda.so) libhalfgrad loads only when a CUDA device is first asked for.
#  1. the example program and libhalfgrad link no CUDA library (ldd);
#  2. a CPU training run loads none, with the backend present (LD_DEBUG=files lists every file loaded);
#  3. with the CUDA libraries hidden (each bind-mounted over by an empty file in a private mount namespace;
#     without the rights for that, the backend itself is hidden with HG_CUDA_LIBRARY=/nonexistent), the CPU
#     run still trains and `--device cuda` fails with an error naming the library it could not load.
#   bash tests/scripts/cpu_without_cuda.sh EXAMPLE BACKEND      e.g. build/fashion_mnist_mlp build/libhalfgrad_cuda.so
# Uses 1000 training images of /usr/share/datasets/fashion-mnist (scripts/setup.sh installs them).
set -euo pipefail
exe="$(realpath "$1")"
backend="$(realpath "$2")"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cuda_libs='lib(cuda|cudart|cublas|cublasLt|cudnn)[._]'
fail() { echo "cpu_without_cuda: FAILED: $*"; exit 1; }

train() {  # train [env...]: a short CPU run that must train (exit 0, a test accuracy, the JSON summary)
  env "$@" "$exe" --epochs 1 --limit 1000 --max-steps 20 --threads 2 >"$dir/log" 2>&1 || { cat "$dir/log"; fail "the CPU run failed ($*)"; }
  grep -q '"test_accuracy"' "$dir/log" || { cat "$dir/log"; fail "the CPU run printed no summary ($*)"; }
  grep -m1 '^test accuracy' "$dir/log"
}
cuda_error() {  # cuda_error PATTERN [env...]: --device cuda must fail with an error matching PATTERN
  local pattern="$1"
  shift
  if env "$@" "$exe" --epochs 1 --limit 100 --max-steps 1 --device cuda >"$dir/log" 2>&1; then
    fail "--device cuda ran without a CUDA backend ($*)"
  fi
  grep -qE "$pattern" "$dir/log" || { cat "$dir/log"; fail "--device cuda did not say '$pattern' ($*)"; }
  grep -m1 'error' "$dir/log"
}

# The inside of step 3 (below), in its own mount namespace: hide the files given, then train.
if [ "${3:-}" = "--hide" ]; then
  : >"$dir/empty"
  for f in "${@:4}"; do mount --bind "$dir/empty" "$f"; done
  train
  cuda_error "CUDA backend .* could not be loaded \\([^)]*lib(cudart|cublas|cublasLt|cudnn)"
  exit 0
fi

linked="$(ldd "$exe" | grep -E "$cuda_libs" || true)"
[ -z "$linked" ] || fail "$exe links CUDA libraries:"$'\n'"$linked"
echo "cpu_without_cuda: ldd $(basename "$exe"): no CUDA library"

train LD_DEBUG=files LD_DEBUG_OUTPUT="$dir/ld"
loaded="$(cat "$dir"/ld.* | grep -oE "file=[^ ]*$cuda_libs[^ ]*" | sort -u || true)"
[ -z "$loaded" ] || fail "the CPU run loaded CUDA libraries:"$'\n'"$loaded"
echo "cpu_without_cuda: the CPU run loaded no CUDA library (LD_DEBUG=files)"

train HG_CUDA_LIBRARY=/nonexistent/libhalfgrad_cuda.so.0
cuda_error "CUDA backend /nonexistent/libhalfgrad_cuda.so.0 could not be loaded" HG_CUDA_LIBRARY=/nonexistent/libhalfgrad_cuda.so.0

# The files the backend's CUDA libraries resolve to (symlinks followed), each hidden by an empty file.
mapfile -t hide < <(ldd "$backend" | awk '$3 ~ /^\// {print $3}' | grep -E "$cuda_libs" | xargs -r realpath | sort -u)
[ "${#hide[@]}" -gt 0 ] || fail "ldd $backend lists no CUDA library: is it the CUDA backend?"
if ! unshare -m --propagation private true 2>/dev/null; then
  echo "cpu_without_cuda: ok; no private mount namespace here (unshare -m needs root), so the CUDA libraries"
  echo "  themselves were not hidden: only the backend (HG_CUDA_LIBRARY)"
  exit 0
fi
unshare -m --propagation private bash "${BASH_SOURCE[0]}" "$exe" "$backend" --hide "${hide[@]}"
echo "cpu_without_cuda: ok; with ${hide[*]} hidden too"
