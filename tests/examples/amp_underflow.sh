#!/usr/bin/env bash
# Smoke test of examples/amp_underflow.cpp: a --quick run (512 training images, 24 steps per run) must print
# both tables and write its CSV/JSON, and its numbers must show the effect: some F32 activation gradients lie
# below 2^-24, loss scaling lifts them (fewer below 2^-24 at the settled scale than at scale 1), the unscaled
# F16 run flushes a nonzero share of activation gradients and the dynamically scaled run flushes fewer.
# Bad flags exit with status 2 and say what was wrong.
#   amp_underflow.sh EXE      (needs Fashion-MNIST: $HG_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)
set -euo pipefail
exe="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "amp_underflow.sh: FAILED: $*"; cat "$dir/log"; exit 1; }
# shellcheck source=tests/examples/common.sh
source "$(dirname "$0")/common.sh"

"$exe" --quick --threads 1 --out "$dir/out" >"$dir/log" 2>&1 || fail "the --quick run exited with $?"
for line in "== part 1" "== part 2" "activation_grad" "weight_grad" "reading: without scaling F16 flushes" \
            "python3 scripts/plot.py histogram $dir/out/hist.csv" "python3 scripts/plot.py curves $dir/out/curves.csv"; do
  grep -qF -- "$line" "$dir/log" || fail "no line with '$line' in the output"
done
for f in hist.csv hist.json layers.csv curves.csv summary.json; do
  [ -s "$dir/out/$f" ] || fail "$f was not written under --out"
done
head -1 "$dir/out/hist.csv" | grep -q '^layer,kind,bin' || fail "hist.csv has no layer,kind,bin header"
# legend names: the first Linear's output and weight, with their shapes
grep -qx '1,1 Linear 784->256 (out)' "$dir/out/layers.csv" || fail "layers.csv does not name layer 1"
grep -qx '1.weight,1.weight 256x784' "$dir/out/layers.csv" || fail "layers.csv does not name 1.weight"
head -1 "$dir/out/curves.csv" | grep -qx 'series,step,value' || fail "curves.csv has no series,step,value header"
for s in fp32 fp16-unscaled fp16-dynamic; do
  grep -q "^loss/$s," "$dir/out/curves.csv" || fail "curves.csv has no loss/$s series"
done

# Part 1 rows: "<name> <Type> activation_grad <nonzero> <scale 1>% <settled>% <init 2^16>% <min e>".
read -r below1 below_settled < <(awk '$3 == "activation_grad" { gsub("%", ""); a += $5; b += $6 } END { print a, b }' "$dir/log")
awk -v a="$below1" 'BEGIN { exit !(a > 0) }' || fail "no F32 activation gradient below 2^-24 at scale 1"
awk -v a="$below1" -v b="$below_settled" 'BEGIN { exit !(b < a) }' ||
  fail "the settled loss scale did not lift activation gradients above 2^-24 ($below_settled% vs $below1%)"

# Part 2 rows: "<run> <acc> <loss> <skipped> <final scale> <flushed>% <below>% <time>".
col() { awk -v r="$1" -v c="$2" '$1 == r && NF == 8 { gsub("%", "", $c); print $c }' "$dir/log"; }
unscaled="$(col fp16-unscaled 6)" dynamic="$(col fp16-dynamic 6)" scale="$(col fp16-dynamic 5)"
[ -n "$unscaled" ] && [ -n "$dynamic" ] || fail "the part 2 table lacks the fp16 rows"
[ "$(col fp16-unscaled 5)" = 1 ] || fail "the unscaled run's final scale is not 1"
awk -v s="$scale" 'BEGIN { exit !(s > 1) }' || fail "the dynamic run's final scale $scale is not > 1"
awk -v u="$unscaled" -v d="$dynamic" 'BEGIN { exit !(u > 0 && d < u) }' ||
  fail "expected unscaled F16 to flush some activation gradients and dynamic scaling fewer ($unscaled% vs $dynamic%)"

# Bad flags: status 2 and a message naming the flag.
# --grad-shift: the F32 run does not change (powers of two are exact), and the F16 runs' gradients move lower
"$exe" --quick --threads 1 --out "$dir/shift" --grad-shift 8 >"$dir/shift.log" 2>&1 || fail "--grad-shift 8 exited with $?"
acc() { awk -v r="$2" '$1 == r && NF == 8 { print $2 }' "$1"; }
base_acc="$(acc "$dir/log" fp32)"
[ -n "$base_acc" ] && [ "$base_acc" = "$(acc "$dir/shift.log" fp32)" ] || fail "--grad-shift 8 changed the fp32 run's accuracy"
check_bad_flags "$exe" amp_underflow "--steps x" "--threads 0" "--bogus 1" "--out" "--grad-shift 61" "--grad-shift x"
echo "amp_underflow.sh: ok (activation grads below 2^-24 at scale 1: $below1% summed over layers; flushed:" \
     "fp16-unscaled $unscaled%, fp16-dynamic $dynamic% at scale $scale)"
