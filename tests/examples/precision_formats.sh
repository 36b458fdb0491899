#!/usr/bin/env bash
# Smoke test of examples/precision_formats.cpp's FP32-accumulation lesson: 4096 addends of fl16(0.1) sum to
# exactly 409.5 in an F32 running sum but stop at 256 in an F16 one (the 2048 rule: 0.1 is below half the
# spacing of F16 numbers from 256 on); 10000 draws from U(0,1) stop at 2048 in F16; an F32 accumulator's
# dot-product error is at least 100x below an F16 accumulator's; every output docs/AMP.md quotes is what it prints
# now. --csv writes its rows (and refuses a directory).
# Bad flags exit with status 2.
#   precision_formats.sh EXE
set -euo pipefail
exe="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail() { echo "precision_formats.sh: FAILED: $*"; cat "$dir/log"; exit 1; }
# shellcheck source=tests/examples/common.sh
source "$(dirname "$0")/common.sh"

"$exe" --sum 4096 0.1 >"$dir/log" 2>&1 || fail "--sum 4096 0.1 exited with $?"
grep -q '^  exact sum 409.5$' "$dir/log" || fail "the exact sum of 4096 x fl16(0.1) is not 409.5"
grep -Eq '^  F16 +256 ' "$dir/log" || fail "the F16 running sum did not stop at 256"
grep -Eq '^  F32 +409.5 .*still growing' "$dir/log" || fail "the F32 running sum is not exactly 409.5"
"$exe" --sum 10000 uniform >"$dir/log" 2>&1 || fail "--sum 10000 uniform exited with $?"
grep -Eq '^  F16 +2048 .*after step' "$dir/log" || fail "the F16 sum of U(0,1) draws did not stop at 2048"
"$exe" --dot 784 >"$dir/log" 2>&1 || fail "--dot 784 exited with $?"
ratio="$(sed -nE 's/^error is ([0-9]+)x smaller.*/\1/p' "$dir/log")"
[ -n "$ratio" ] && [ "$ratio" -ge 100 ] || fail "the F32 accumulator is not 100x more accurate (ratio '${ratio}')"
# --csv writes one row per value and format (atomically, core/atomic_file.h); a path that is a directory is
# refused with an error naming it (status 2)
"$exe" 0.1 1e-8 --csv "$dir/v.csv" >"$dir/log" 2>&1 || fail "--csv exited with $?"
[ "$(head -1 "$dir/v.csv")" = "input,format,value,bits,hex,class,exponent,abs_error,rel_error,spacing" ] || fail "bad CSV header"
[ "$(grep -c '^0.1,' "$dir/v.csv")" = 5 ] || fail "not 5 rows (one per format) for 0.1"
mkdir "$dir/adir"
rc=0; "$exe" 0.5 --csv "$dir/adir" >"$dir/log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "is a directory" "$dir/log" || fail "--csv DIR: status $rc, no 'is a directory' error"
# every output docs/AMP.md quotes after a `$ ./build/precision_formats ARGS` line is what the program prints now:
# the quoted lines (an excerpt: consecutive lines of the output) found in order in a fresh run with those ARGS
doc="$(dirname "$0")/../../docs/AMP.md"
python3 - "$exe" "$doc" >"$dir/log" 2>&1 <<'PY' || fail "docs/AMP.md quotes precision_formats output it no longer prints"
import shlex, subprocess, sys
exe, doc = sys.argv[1], sys.argv[2]
lines, quotes, cur, fence = open(doc, encoding="utf-8").read().splitlines(), [], None, False
for line in lines:
    if line.startswith("```"):
        fence = not fence
        cur = None
    elif fence and line.startswith("$ ./build/precision_formats"):
        cur = (shlex.split(line[len("$ ./build/precision_formats"):]), [])
        quotes.append(cur)
    elif fence and cur is not None:
        cur[1].append(line.rstrip())
bad = 0
for args, quoted in quotes:
    out = [l.rstrip() for l in subprocess.run([exe] + args, capture_output=True, text=True).stdout.splitlines()]
    starts = [i for i in range(len(out)) if out[i:i + len(quoted)] == quoted]
    if not quoted or not starts:
        bad += 1
        print("quoted output of precision_formats", " ".join(args), "is not in its output:", *quoted, sep="\n  ")
print(len(quotes), "quoted outputs checked,", bad, "stale")
sys.exit(1 if bad or len(quotes) < 4 else 0)
PY
check_bad_flags "$exe" precision_formats "--sum 0 0.1" "--sum 10 x" "--sum 5" "--dot" "--dot -3" "--sum 4 1 --csv $dir/x.csv"
echo "precision_formats.sh: ok"
