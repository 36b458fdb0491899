"""Compares habits' output (stdin or a file) with expected.txt: every name, shape and value, values within a
relative 1e-6 (F32 results printed to 9 digits; sums in another order differ in the last bits) or 1e-6 absolute.
Exit status 1 with each difference named when they disagree."""
import math
import sys


def parse(lines):
    out = {}
    for line in lines:
        line = line.rstrip("\n")
        if not line:
            continue
        name, rest = line.split(": ", 1)
        shape, values = rest.split(" values=")
        out[name] = (shape, [float(v) for v in values.split()] if values else [])
    return out


def main():
    expected = parse(open(sys.argv[1]))
    got = parse(open(sys.argv[2]) if len(sys.argv) > 2 else sys.stdin)
    problems = []
    for name, (shape, values) in expected.items():
        if name not in got:
            problems.append(f"{name}: missing from the output")
            continue
        gshape, gvalues = got[name]
        if gshape != shape or len(gvalues) != len(values):
            problems.append(f"{name}: {gshape} with {len(gvalues)} values, torch gives {shape} with {len(values)}")
            continue
        for i, (g, e) in enumerate(zip(gvalues, values)):
            if not (abs(g - e) <= 1e-6 + 1e-6 * abs(e) or (math.isnan(g) and math.isnan(e))):
                problems.append(f"{name}: value {i} is {g!r}, torch gives {e!r}")
                break
    for name in got:
        if name not in expected:
            problems.append(f"{name}: not in expected.txt (rerun torch_habits.py)")
    for p in problems:
        print(p)
    print(f"habits: {len(expected) - len([p for p in problems if ': not in' not in p])} of {len(expected)} match torch")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
