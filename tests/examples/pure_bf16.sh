#!/usr/bin/env bash
# Smoke test of examples/pure_bf16.cpp: a --quick run (2048 training images, 200 steps per run, plain SGD lr 0.01)
# must print its table, and its numbers must show the lesson: BF16 weights without masters and with
# round-to-nearest lose a large share of the intended movement (> 20%) and end at least 3 accuracy points below
# the run with FP32 masters; stochastic rounding and Kahan summation keep nearly all of it (> 95%) and end within
# 1 point of the masters run; memory per parameter is 4 (fp32), 6 (masters), 2 (nearest, stochastic), 4 (Kahan).
# Bad flags exit with status 2.
#   pure_bf16.sh EXE [EXTRA FLAGS]   (needs Fashion-MNIST: $HG_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)
# `pure_bf16.sh EXE --lr 1` (updates far above BF16's spacing) removes the effect and must make this script fail.
set -euo pipefail
exe="$1"
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "pure_bf16.sh: FAILED: $*"; cat "$dir/log"; exit 1; }
# shellcheck source=tests/examples/common.sh
source "$(dirname "$0")/common.sh"

"$exe" --quick --threads 1 "$@" >"$dir/log" 2>&1 || fail "the --quick run exited with $?"
grep -q "^run  *test acc" "$dir/log" || fail "no table"
# columns: run, test acc, vs fp32, last loss, kept, lost, bytes/param, time
col() { awk -v r="$1" -v c="$2" '$1 == r && $2 != "done" { v = $c; sub(/%$/, "", v); print v }' "$dir/log"; }
for r in fp32 bf16-masters bf16-nearest bf16-stochastic bf16-kahan; do
  [ -n "$(col "$r" 2)" ] || fail "no row for $r"
done
awk -v a="$(col bf16-nearest 6)" 'BEGIN { exit !(a > 20) }' || fail "bf16-nearest lost only $(col bf16-nearest 6)% (want > 20%)"
awk -v m="$(col bf16-masters 2)" -v n="$(col bf16-nearest 2)" 'BEGIN { exit !(m - n >= 0.03) }' ||
  fail "bf16-nearest is not 3 points below bf16-masters"
for r in bf16-stochastic bf16-kahan; do
  awk -v k="$(col "$r" 5)" 'BEGIN { exit !(k > 95) }' || fail "$r kept only $(col "$r" 5)%"
  awk -v m="$(col bf16-masters 2)" -v a="$(col "$r" 2)" 'BEGIN { d = m - a; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
    fail "$r is not within 1 point of bf16-masters"
done
for pair in fp32:4.0 bf16-masters:6.0 bf16-nearest:2.0 bf16-stochastic:2.0 bf16-kahan:4.0; do
  [ "$(col "${pair%%:*}" 7)" = "${pair##*:}" ] || fail "${pair%%:*} takes $(col "${pair%%:*}" 7) bytes per parameter, not ${pair##*:}"
done
check_bad_flags "$exe" pure_bf16 "--steps 0" "--lr -1" "--bogus 1" "--steps"
echo "pure_bf16.sh: ok"
