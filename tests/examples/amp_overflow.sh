#!/usr/bin/env bash
# Smoke test of examples/amp_overflow.cpp: a --quick run (1024 training images of
# /usr/share/datasets/fashion-mnist, overflows injected at steps 5, 6 and 10, growth interval 3) must
# skip every injected step with bit-identical parameters, halve the scale there, grow it again, write its
# CSV/JSON files and print the plot commands, and name where each skipped step's inf came from (its re-run
# inside NonFiniteOrigin); a bad flag must exit 2 with a message.
#   amp_overflow.sh EXE
set -euo pipefail
exe="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "amp_overflow.sh: FAILED: $*"; cat "$dir/log"; exit 1; }
# shellcheck source=tests/examples/common.sh
source "$(dirname "$0")/common.sh"

"$exe" --quick --threads 2 --out "$dir/out" >"$dir/log" 2>&1 || fail "the --quick run exited with status $?"
log="$dir/log"

# Each injected step: found_inf, skipped, no parameter bit changed, the scale halved (X (2^k) -> X/2 (2^k-1)).
for s in 5 6 10; do
  line="$(grep "^injected step $s:" "$log")" || fail "no line for injected step $s"
  [[ "$line" == *"found_inf 1, skipped, parameters bit-identical (0 of "* ]] ||
    fail "step $s not skipped cleanly: $line"
  k="$(sed -E 's/.*scale [0-9]+ \(2\^([0-9-]+)\) -> .*/\1/' <<<"$line")"
  [[ "$line" == *"-> "*"(2^$((k - 1)))" ]] || fail "the scale did not halve at step $s: $line"
done
[[ "$(grep -c '^injected step' "$log")" == 3 ]] || fail "expected exactly 3 injected steps"
# The control step changed parameters (so the bit-identical comparison can fail).
grep -Eq '^control step [0-9]+ \(clean\): stepped, parameters changed \([1-9][0-9]* of' "$log" ||
  fail "the clean control step did not change the parameters"
# Each injected step's re-run names the first non-finite value: the logits' gradient scaled by 2^60, computed in
# F32 and written in F16 by cross_entropy's backward (it reads the autocast linear layer's F16 logits itself).
for s in 5 6 10; do
  line="$(grep "^step $s: " "$log")" || fail "no non-finite origin line for injected step $s"
  [[ "$line" == "step $s: first non-finite in backward of 'cross_entropy', outside any module"* ]] ||
    fail "step $s: unexpected origin: $line"
  [[ "$line" == *"gradient of input 0 (F16 [64, 10]): F16 overflow (|x| > 65504; "* ]] ||
    fail "step $s: not an F16 overflow of the logits' gradient: $line"
done
# Every skipped step of the injected run has an origin line (natural ones are marked), each found.
[[ "$(grep -Ec '^step [0-9]+( \(natural\))?: first non-finite in ' "$log")" -ge 3 ]] || fail "too few origin lines"
grep -q '^step [0-9]*.*: no non-finite value' "$log" && fail "a skipped step's re-run found no non-finite value"
grep -q '^growth resumed: after the last injection (step 10)' "$log" || fail "no growth after the last injection"
# Skipped steps in the injected run = 3 injected + the natural overflows it reports.
sk="$(sed -nE 's/^skipped steps: injected run ([0-9]+) \(3 injected \+ ([0-9]+) natural.*/\1 \2/p' "$log")"
[[ -n "$sk" ]] || fail "no skipped-steps line"
read -r skipped natural <<<"$sk"
[[ "$skipped" == $((3 + natural)) ]] || fail "skipped $skipped != 3 injected + $natural natural"
grep -Eq '^test accuracy: clean 0\.[0-9]+, injected 0\.[0-9]+' "$log" || fail "no accuracy line"
grep -q 'CHECK FAILED' "$log" && fail "the program reported a failed check"

# The files, with one timeline row per step and the injected steps flagged skipped in the CSV too.
for f in timeline.csv timeline_clean.csv curves.csv summary.json; do
  [[ -s "$dir/out/$f" ]] || fail "missing $dir/out/$f"
done
[[ "$(head -1 "$dir/out/timeline.csv")" == step,scale,next_scale,growth_tracker,hysteresis_left,found_inf,skipped ]] ||
  fail "timeline.csv header"
[[ "$(($(wc -l <"$dir/out/timeline.csv") - 1))" == 16 ]] || fail "timeline.csv should have 16 rows"
csv_skipped="$(awk -F, 'NR > 1 && $7 == 1 { printf "%s ", $1 }' "$dir/out/timeline.csv")"
for s in 5 6 10; do
  [[ " $csv_skipped" == *" $s "* ]] || fail "timeline.csv does not mark step $s skipped ($csv_skipped)"
done
grep -q '^loss/clean,' "$dir/out/curves.csv" && grep -q '^loss/injected,' "$dir/out/curves.csv" ||
  fail "curves.csv lacks a loss series"
# the skipped steps as events of the scale panel: the injected ones at their steps, the natural ones apart
for s in 5 6 10; do
  grep -q "^log2_scale/@injected: skipped (injected overflow),$s," "$dir/out/curves.csv" ||
    fail "curves.csv does not mark step $s as an injected skip"
done
[[ "$(grep -c '^log2_scale/@injected: skipped (natural overflow),' "$dir/out/curves.csv")" == "$natural" ]] ||
  fail "curves.csv does not mark the $natural natural overflows of the injected run"
grep -q '"checks_failed": 0' "$dir/out/summary.json" || fail "summary.json: checks_failed is not 0"
grep -q "python3 scripts/plot.py timeline $dir/out/timeline.csv" "$log" || fail "no timeline plot command"
grep -q "python3 scripts/plot.py curves $dir/out/curves.csv" "$log" || fail "no curves plot command"

# Bad flags exit 2 with a message naming the problem.
check_bad_flags "$exe" amp_overflow "--inject 3,x" "--inject 3,3" "--epochs 0" "--bogus 1"
grep -q "bad value '3,x' for --inject" <("$exe" --inject 3,x 2>&1) || fail "--inject 3,x does not name the bad value"
echo "amp_overflow.sh: 3 injected overflows skipped bit-identically, scale halved and grew back, each named at its origin (autocast cast of the loss gradient to F16), files written"
