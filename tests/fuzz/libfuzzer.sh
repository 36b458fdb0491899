#!/usr/bin/env bash
# One libFuzzer run of a reader: bash libfuzzer.sh EXE TARGET SECONDS REGRESSIONS_DIR
# The regression files seed a scratch corpus (libFuzzer adds what it finds there); a crash leaves the
# input as crash-* in the scratch folder, whose path is printed: copy it into REGRESSIONS_DIR.
set -uo pipefail
exe="$1" target="$2" seconds="$3" regressions="$4"
work="$(mktemp -d)"
cp "$regressions"/* "$work"/ 2>/dev/null || true
export HG_FUZZ_TARGET="$target" HG_FUZZ_WORK="$work/io"
mkdir -p "$HG_FUZZ_WORK"
"$exe" -max_total_time="$seconds" -seed=1 -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix="$work/" -print_final_stats=1 "$work" 2>"$work/log"
rc=$?
grep -E "^(stat::number_of_executed_units|stat::new_units_added|#[0-9]+ *DONE)" "$work/log" | sed "s/^/libfuzzer $target: /"
if [ "$rc" != 0 ]; then
  tail -n 40 "$work/log"
  echo "libfuzzer $target: FAILED (exit $rc); the inputs are in $work"
  exit 1
fi
rm -rf "$work"
