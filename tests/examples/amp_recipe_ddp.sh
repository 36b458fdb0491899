#!/usr/bin/env bash
# The AMP recipe data-parallel on 2 ranks with its optimizer sharded (--ddp --zero): it exits 0 and each precision
# (F32, BF16, F16) prints every rank's samples per second and the job's.
#   amp_recipe_ddp.sh MPIEXEC EXE
set -euo pipefail
mpiexec="$1" exe="$2"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$mpiexec" -np 2 "$exe" --ddp --zero --width 64 --batch 16 --batches 3 --epochs 1 --threads 1 >"$log" 2>&1 ||
  { cat "$log"; echo "amp_recipe_ddp.sh: FAILED: exit status $?"; exit 1; }
n="$(grep -cE '^samples/s per rank: [0-9]+ [0-9]+; job \(2 ranks\) [0-9]+$' "$log" || true)"
if [ "$n" != 3 ] || ! grep -q "data-parallel over 2 rank(s)" "$log"; then
  cat "$log"
  echo "amp_recipe_ddp.sh: FAILED: expected the per-rank and job throughput of 3 precisions on 2 ranks, found $n"
  exit 1
fi
echo "amp_recipe_ddp.sh: 3 precisions on 2 ranks, each with per-rank and job samples/s"
