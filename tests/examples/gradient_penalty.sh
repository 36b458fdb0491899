#!/usr/bin/env bash
# Smoke test of examples/gradient_penalty.cpp: a --quick run (4096 training and 2000 test images, 300 steps per
# run, lambda 5) must print its table, and its numbers must show the lesson: training with the input-gradient
# penalty (a second derivative through conv2d, ReLU, max pooling and linear) makes the test images' loss gradients
# at most 0.7 times as large as without it and gains at least 3 points of accuracy under the FGSM perturbation;
# the F16 run (autocast with the GradScaler recipe) and the BF16 run end within 1 point and 5% of the F32 penalty
# run, with F16 and BF16 logits (their autocast regions ran) and, for F16, a loss scale above 1 (its scaler ran)
# that skipped at most 5 steps; the F32 runs have F32 logits, no scaler and no skipped step, and the one without the
# penalty reports none. Bad flags exit with status 2.
#   gradient_penalty.sh EXE [EXTRA FLAGS]   (needs Fashion-MNIST: $HG_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)
# `gradient_penalty.sh EXE --lambda 1e-6` (a penalty too weak to act) removes the effect and must make this script fail.
set -euo pipefail
exe="$1"
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "gradient_penalty.sh: FAILED: $*"; cat "$dir/log"; exit 1; }
# shellcheck source=tests/examples/common.sh
source "$(dirname "$0")/common.sh"

"$exe" --quick --threads 1 "$@" >"$dir/log" 2>&1 || fail "the --quick run exited with $?"
grep -q "^run  *test acc  *fgsm acc" "$dir/log" || fail "no table"
# columns: run, test acc, fgsm acc, |dl/dx|, penalty, logits, scale, skipped, time
col() { awk -v r="$1" -v c="$2" '$1 == r && $2 != "done" { print $c }' "$dir/log"; }
for pair in f32:F32 f32-penalty:F32 f16-penalty:F16 bf16-penalty:BF16; do
  r="${pair%%:*}"
  [ -n "$(col "$r" 2)" ] || fail "no row for $r"
  [ "$(col "$r" 6)" = "${pair##*:}" ] || fail "$r trained with $(col "$r" 6) logits, not ${pair##*:}"
done
for r in f32 f32-penalty bf16-penalty; do
  [ "$(col "$r" 7)" = 1 ] && [ "$(col "$r" 8)" = 0 ] || fail "$r has scale $(col "$r" 7) and $(col "$r" 8) skipped steps"
done
awk -v s="$(col f16-penalty 7)" -v k="$(col f16-penalty 8)" 'BEGIN { exit !(s > 1 && k <= 5) }' ||
  fail "f16-penalty ended with scale $(col f16-penalty 7) after $(col f16-penalty 8) skipped steps"
awk -v p="$(col f32 5)" 'BEGIN { exit !(p == 0) }' || fail "the run without the penalty reports one ($(col f32 5))"
awk -v a="$(col f32 4)" -v b="$(col f32-penalty 4)" 'BEGIN { exit !(b <= 0.7 * a) }' ||
  fail "|dl/dx| is $(col f32-penalty 4) with the penalty and $(col f32 4) without (want at most 0.7 times)"
awk -v a="$(col f32 3)" -v b="$(col f32-penalty 3)" 'BEGIN { exit !(b - a >= 0.03) }' ||
  fail "the penalty gained $(col f32 3) -> $(col f32-penalty 3) under FGSM (want 3 points)"
for r in f16-penalty bf16-penalty; do
  for c in 2 3; do
    awk -v a="$(col f32-penalty $c)" -v b="$(col "$r" $c)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
      fail "$r's column $c is $(col "$r" $c), not within 1 point of f32-penalty's $(col f32-penalty $c)"
  done
  awk -v a="$(col f32-penalty 4)" -v b="$(col "$r" 4)" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.05 * a) }' ||
    fail "$r's |dl/dx| $(col "$r" 4) is not within 5% of f32-penalty's $(col f32-penalty 4)"
done
check_bad_flags "$exe" gradient_penalty "--steps 0" "--lambda -1" "--epsilon 0" "--bogus 1" "--steps"
echo "gradient_penalty.sh: ok"
