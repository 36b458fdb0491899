#!/usr/bin/env bash
# Smoke test of examples/amp_master_weights.cpp: a --quick run (512 training images, 150 steps per run, plain SGD
# lr 1e-3) must print its tables and write its CSV/JSON, and its numbers must show the effect of FP32 master
# weights: pure F16 (fp16-O3) loses most of its weight updates to swamping (> 50%, and the F16 weights it counts
# as unchanged agree with GradientHistogram's exact count within 1 point), and fp16-O2 (FP32 masters) ends at
# least 3 accuracy points above fp16-O3 while staying within 2 points of fp32. Bad flags exit with status 2.
#   amp_master_weights.sh EXE [EXTRA FLAGS]   (needs Fashion-MNIST: $HG_FASHION_MNIST_DIR or
#                                              /usr/share/datasets/fashion-mnist)
# EXTRA FLAGS go to the --quick run: `amp_master_weights.sh EXE --lr 0.1` removes the effect (updates large next
# to the weights) and must make this script fail -- that is how the checks were shown to be able to fail.
set -euo pipefail
exe="$1"
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "amp_master_weights.sh: FAILED: $*"; cat "$dir/log"; exit 1; }
# shellcheck source=tests/examples/common.sh
source "$(dirname "$0")/common.sh"

"$exe" --quick --threads 1 --out "$dir/out" "$@" >"$dir/log" 2>&1 || fail "the --quick run exited with $?"
for line in "setting: MLP" "why:" "== training loss per interval" "== summary" "reading: pure F16 (O3) lost" \
            "python3 scripts/plot.py curves $dir/out/curves.csv" "python3 scripts/plot.py curves $dir/out/swamping.csv"; do
  grep -qF -- "$line" "$dir/log" || fail "no line with '$line' in the output"
done
for f in curves.csv swamping.csv summary.json; do
  [ -s "$dir/out/$f" ] || fail "$f was not written under --out"
done
head -1 "$dir/out/curves.csv" | grep -qx 'series,step,value' || fail "curves.csv has no series,step,value header"
head -1 "$dir/out/swamping.csv" | grep -q '^series,step,value,' || fail "swamping.csv has no series,step,value header"
for s in fp32 fp16-O2 fp16-O3; do
  grep -q "^loss/$s," "$dir/out/curves.csv" || fail "curves.csv has no loss/$s series"
  grep -q "^acc/$s," "$dir/out/curves.csv" || fail "curves.csv has no acc/$s series"
  grep -q "^exact/$s," "$dir/out/swamping.csv" || fail "swamping.csv has no exact/$s series"
done
grep -q "^unchanged/fp16-O3," "$dir/out/swamping.csv" || fail "swamping.csv has no unchanged/fp16-O3 series"
# update_ulp16.csv: per run and parameter the updates by log2(|u| / ulp16(w)); for fp16-O3 the share below
# -1 (bins <= -2) must be at least the exactly swamped share the table prints (ties and steps down from a
# power of two add to the exact count, so compare loosely: within 5 points)
head -1 "$dir/out/update_ulp16.csv" | grep -qx 'layer,kind,bin,count' || fail "update_ulp16.csv header"
below3="$(awk -F, 'NR > 1 && $2 ~ /^fp16-O3/ { n += $4; if ($3 <= -2) b += $4 } END { if (n) printf "%.2f", 100 * b / n }' \
  "$dir/out/update_ulp16.csv")"
[[ -n "$below3" ]] || fail "update_ulp16.csv has no fp16-O3 rows"

# Summary rows: "<run> <acc> <loss> <skipped> <scale> <updates> <swamped>% <rule>% <kept>% or - <time>s".
col() { awk -v r="$1" -v c="$2" '$1 == r && NF == 10 { gsub("%", "", $c); print $c }' "$dir/log"; }
acc32="$(col fp32 2)" acc2="$(col fp16-O2 2)" acc3="$(col fp16-O3 2)"
sw3="$(col fp16-O3 7)" kept3="$(col fp16-O3 9)" sw2="$(col fp16-O2 7)"
awk -v a="$below3" -v b="$sw3" 'BEGIN { d = a - b; exit !(d < 5 && d > -5) }' ||
  fail "update_ulp16.csv puts $below3% of fp16-O3's updates below half a spacing, the table says $sw3% swamped"
[ -n "$acc32" ] && [ -n "$acc2" ] && [ -n "$acc3" ] && [ -n "$sw3" ] && [ -n "$kept3" ] ||
  fail "the summary table lacks a row for fp32, fp16-O2 or fp16-O3"
awk -v s="$sw3" 'BEGIN { exit !(s > 50) }' || fail "fp16-O3 lost only $sw3% of its updates to swamping (expected > 50%)"
awk -v s="$sw3" -v k="$kept3" 'BEGIN { d = s - k; exit !(d < 1 && d > -1) }' ||
  fail "fp16-O3's unchanged F16 weights ($kept3%) disagree with the exact swamping count ($sw3%)"
awk -v a="$acc2" -v b="$acc3" 'BEGIN { exit !(a - b >= 0.03) }' ||
  fail "fp16-O2 (masters) is not 3 points above fp16-O3 (pure F16): $acc2 vs $acc3"
awk -v a="$acc32" -v b="$acc2" 'BEGIN { d = a - b; exit !(d < 0.02 && d > -0.02) }' ||
  fail "fp16-O2 does not follow fp32 within 2 points: $acc2 vs $acc32"

# Bad flags: status 2 and a message naming the flag.
check_bad_flags "$exe" amp_master_weights "--lr x" "--lr -1" "--threads 0" "--bogus 1" "--out"
echo "amp_master_weights.sh: ok (fp16-O3 swamped $sw3% of its updates, F16 weights unchanged $kept3%;" \
     "fp16-O2 as F16 would lose $sw2%; test acc fp32 $acc32, fp16-O2 $acc2, fp16-O3 $acc3)"
