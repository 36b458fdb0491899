#!/usr/bin/env bash
# Smoke test of examples/precision_formats.cpp's FP32-accumulation lesson: 4096 addends of fl16(0.1) sum to
# exactly 409.5 in an F32 running sum but stop at 256 in an F16 one (the 2048 rule: 0.1 is below half the
# spacing of F16 numbers from 256 on); 10000 draws from U(0,1) stop at 2048 in F16; an F32 accumulator's
# dot-product error is at least 100x below an F16 accumulator's; every output docs/AMP.md quotes is what it prints
# now, and so are the values of its typed decode and FP8 tables. --csv writes its rows (and refuses a directory).
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
# docs/AMP.md's two typed tables: section 1's decode table (each F16 and BF16 value it gives, to its printed digits)
# and section 8's FP8 formats (bits, smallest subnormal and normal, largest, relative step) are what the program says
python3 - "$exe" "$doc" "$dir" >"$dir/log" 2>&1 <<'PY' || fail "docs/AMP.md's decode or FP8 table no longer matches precision_formats"
import csv, decimal, re, subprocess, sys
exe, doc, tmp = sys.argv[1], sys.argv[2], sys.argv[3]
lines = open(doc, encoding="utf-8").read().splitlines()
def table(header):
    start = next(i for i, l in enumerate(lines) if l.startswith(header))
    rows = []
    for l in lines[start + 2:]:
        if not l.startswith("|"):
            break
        rows.append([c.strip() for c in l.strip().strip("|").split("|")])
    return rows
bad, checked = 0, 0
for value, f16, bf16, _ in table("| value | F16 | BF16 |"):
    subprocess.run([exe, value, "--csv", f"{tmp}/d.csv"], check=True, capture_output=True)
    got = {r["format"]: r["value"] for r in csv.DictReader(open(f"{tmp}/d.csv"))}
    for fmt, cell in (("F16", f16), ("BF16", bf16)):
        quoted = re.match(r"[^\s,(]+", cell).group(0)
        have = got[fmt]
        # within half a unit of the quoted value's last digit (2.98e-08 stands for [2.975e-08, 2.985e-08])
        half = 0.5 * 10.0 ** decimal.Decimal(quoted).as_tuple().exponent if quoted not in ("inf", "nan") else 0
        if "inf" in (quoted, have) or quoted == "0":  # an overflow or a flush is quoted exactly
            same = float(quoted) == float(have)
        else:
            same = abs(float(quoted) - float(have)) <= half * (1 + 1e-9)
        checked += 1
        if not same:
            bad += 1
            print(f"decode table: {value} in {fmt} is quoted as {quoted}, the program stores {have}")
out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
for name, bits, sub, normal, largest, step, _ in table("| format | bits (sign, exponent, mantissa) |"):
    key = ("F8" + name.split()[0]) if name.startswith("E") else name.split(",")[0]  # "F16, for comparison" too
    m = re.search(rf"^{key}\s+\d+\s+(\d+)\|(\d+)\|(\d+)\s.*?\s(\S+)\s+\S+ \((2\^-?\d+)\)\s+\S+ \((2\^-?\d+)\)\s+\S+ \((2\^-?\d+)\)", out, re.M)
    want = (", ".join(m.groups()[:3]), m.group(6), m.group(5), f"{float(m.group(4)):g}", m.group(7)) if m else None
    checked += 1
    if want != (bits, sub, normal, largest, step):
        bad += 1
        print(f"FP8 table: {name} reads {(bits, sub, normal, largest, step)}, the program prints {want}")
print(checked, "typed table entries checked,", bad, "stale")
sys.exit(1 if bad or checked < 16 else 0)
PY
check_bad_flags "$exe" precision_formats "--sum 0 0.1" "--sum 10 x" "--sum 5" "--dot" "--dot -3" "--sum 4 1 --csv $dir/x.csv"
echo "precision_formats.sh: ok"
