#!/usr/bin/env bash
# Smoke test of examples/fp8_training.cpp: a --quick run (4096 training images, 300 steps per run) must print its
# table, and its numbers must show the lesson: FP8 with delayed scaling, current scaling and MXFP8 ends within 2
# accuracy points of BF16 autocast (the issue's 1 point is for the full run; 300 steps are noisier), and a margin
# of -8 (scales 256x too large) saturates most weights and ends near chance (at least 30 points below BF16). Each
# FP8 row has its saturation and flush columns; only delayed scaling keeps state (histories). --csv writes the
# statistics. On the CPU no FP8 GEMM runs natively (the "native" column is 0%). Bad flags exit with status 2.
#   fp8_training.sh EXE   (needs Fashion-MNIST: $HG_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)
set -euo pipefail
exe="$1"
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "fp8_training.sh: FAILED: $*"; cat "$dir/log"; exit 1; }
# shellcheck source=tests/examples/common.sh
source "$(dirname "$0")/common.sh"

"$exe" --quick --threads 1 --csv "$dir/csv" "$@" >"$dir/log" 2>&1 || fail "the --quick run exited with $?"
grep -q "^run  *test acc" "$dir/log" || fail "no table"
# columns: run, test acc, vs bf16, last loss, ms/step, sat x, sat w, sat dy, flush x, flush w, flush dy, fp8 state, native
col() { awk -v r="$1" -v c="$2" '$1 == r && $2 != "done:" { v = $c; sub(/%$/, "", v); sub(/B$/, "", v); print v }' "$dir/log"; }
for r in fp32 bf16 fp8-delayed fp8-current mxfp8 fp8-unscaled fp8-margin-8 fp8-e4m3-grads fp8-history-1; do
  [ -n "$(col "$r" 2)" ] || fail "no row for $r"
done
for r in fp8-delayed fp8-current mxfp8; do
  awk -v b="$(col bf16 2)" -v a="$(col "$r" 2)" 'BEGIN { d = b - a; exit !(d <= 0.02) }' ||
    fail "$r ($(col "$r" 2)) is more than 2 points below bf16 ($(col bf16 2))"
done
awk -v b="$(col bf16 2)" -v a="$(col fp8-margin-8 2)" 'BEGIN { exit !(b - a >= 0.30) }' ||
  fail "fp8-margin-8 ($(col fp8-margin-8 2)) did not break (bf16 $(col bf16 2))"
awk -v s="$(col fp8-margin-8 7)" 'BEGIN { exit !(s > 50) }' || fail "fp8-margin-8 saturated only $(col fp8-margin-8 7)% of the weights"
[ "$(col fp8-delayed 12)" -gt 0 ] || fail "fp8-delayed keeps no state"
[ "$(col fp8-current 12)" = 0 ] || fail "fp8-current keeps state"
[ "$(col fp8-delayed 13)" = 0 ] || fail "fp8-delayed ran $(col fp8-delayed 13)% of its GEMMs natively on a CPU (no FP8 GEMM)"
head -1 "$dir/csv/fp8_stats.csv" | grep -q "^run,step,layer,role,amax,scale,saturated,flushed$" || fail "bad CSV header"
[ "$(grep -c "^fp8-delayed," "$dir/csv/fp8_stats.csv")" -gt 0 ] || fail "no CSV rows for fp8-delayed"
check_bad_flags "$exe" fp8_training "--steps 0" "--bogus 1" "--steps" "--device tpu"
echo "fp8_training.sh: ok"
