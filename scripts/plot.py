#!/usr/bin/env python3
"""Render PNG plots from the CSV files halfgrad's inspectors and examples write.

  python3 scripts/plot.py timeline  scaler.csv -o scaler.png [--title T]
  python3 scripts/plot.py histogram hist.csv   -o hist.png   [--title T] [--by kind|layer] [--logy]
  python3 scripts/plot.py curves    curves.csv -o curves.png [--title T] [--logy]
  python3 scripts/plot.py --selftest

Inputs (extra columns are ignored; a .json file may hold the same rows as a list of objects, or an
object with that list under "rows"):
  timeline   step,scale,growth_tracker,found_inf,skipped    amp::inspect::ScalerTimeline::write_csv
             scale on a log2 axis, skipped steps marked, growth tracker below
  histogram  layer,kind,bin_log2,count (or bin instead of bin_log2)   GradientHistogram::write_csv
             bin e counts |x| in [2^e, 2^(e+1)); non-numeric bins (zero, inf, nan, below_range,
             above_range) are listed in the panel. One panel per kind (one line per layer) or, with
             --by layer, per layer. Vertical lines at F16's 2^-24, 2^-14, 65504 and BF16's 2^-133.
  curves     series,step,value    one line per series; a series named "loss/train" goes to the
             panel "loss", "acc/test" to the panel "acc" (no slash: one shared panel)

Exit status: 0 done, 1 bad input (the message names the file, line and column), 2 usage error or
matplotlib missing. Needs only the standard library and matplotlib (Debian: python3-matplotlib).
"""
import argparse
import csv
import json
import math
import os
import sys
import tempfile

# F16 and BF16 limits as log2 magnitudes (amp/inspect/formats.h derives them from the layouts).
MARKERS = [
    (-24.0, "F16 min subnormal 2^-24", "tab:red", "--"),
    (-14.0, "F16 min normal 2^-14", "tab:orange", "--"),
    (math.log2(65504.0), "F16 max 65504", "tab:red", "-"),
    (-133.0, "BF16 min subnormal 2^-133", "tab:purple", ":"),
]

COLUMNS = {
    "timeline": ["step", "scale", "growth_tracker", "found_inf", "skipped"],
    "histogram": ["layer", "kind", "bin_log2", "count"],
    "curves": ["series", "step", "value"],
}
ALIASES = {"bin_log2": ["bin"]}  # GradientHistogram::write_csv names the column "bin"


class InputError(Exception):
    """Bad input: the message says which file, line and column, and what was expected."""


def load_rows(path, kind):
    """Rows of a CSV (or JSON) file as dicts keyed by the canonical column names of `kind`."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file (a {kind} input is a CSV with columns {','.join(COLUMNS[kind])})")
    with open(path, newline="", encoding="utf-8") as f:
        if path.endswith(".json"):
            rows, first_line = json_rows(path, f), 1
        else:
            rows, first_line = list(csv.DictReader(f)), 2
    if not rows:
        raise InputError(f"{path}: no data rows; a {kind} input needs columns {','.join(COLUMNS[kind])}")
    have = list(rows[0].keys())
    rename, missing = {}, []
    for col in COLUMNS[kind]:
        found = [c for c in [col] + ALIASES.get(col, []) if c in have]
        if found:
            rename[col] = found[0]
        else:
            missing.append(col)
    if missing:
        alias = "".join(f" ({c} may be named {' or '.join(ALIASES[c])})" for c in missing if c in ALIASES)
        raise InputError(f"{path}: a {kind} input needs columns {','.join(COLUMNS[kind])}; "
                         f"missing {','.join(missing)}{alias} (found: {','.join(map(str, have))})")
    return [({col: row.get(src) for col, src in rename.items()}, first_line + i) for i, row in enumerate(rows)]


def json_rows(path, f):
    try:
        data = json.load(f)
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not valid JSON ({e})") from None
    if isinstance(data, dict):
        data = data.get("rows")
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(f"{path}: JSON input must be a list of row objects or {{\"rows\": [...]}}")
    return data


def number(path, line, row, col):
    text = row[col]
    try:
        return float(text)
    except (TypeError, ValueError):
        raise InputError(f"{path} line {line}: column '{col}' is {text!r}, not a number") from None


def flag(path, line, row, col):
    text = str(row[col]).strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no", ""):
        return False
    raise InputError(f"{path} line {line}: column '{col}' is {row[col]!r}; expected 0/1 or true/false")


# --- data: each reader returns plain lists/dicts, checked, before matplotlib is touched -----------

def read_timeline(path):
    t = {"step": [], "scale": [], "growth_tracker": [], "found_inf": [], "skipped": []}
    for row, line in load_rows(path, "timeline"):
        for col in ("step", "scale", "growth_tracker"):
            t[col].append(number(path, line, row, col))
        t["found_inf"].append(flag(path, line, row, "found_inf"))
        t["skipped"].append(flag(path, line, row, "skipped"))
        if not t["scale"][-1] > 0:
            raise InputError(f"{path} line {line}: scale {t['scale'][-1]} is not positive (a log2 axis needs > 0)")
    return t


def read_histogram(path, by):
    """{panel: {series: {"bins": {e: count}, "special": {name: count}}}}"""
    panels = {}
    for row, line in load_rows(path, "histogram"):
        panel, series = (row["kind"], row["layer"]) if by == "kind" else (row["layer"], row["kind"])
        entry = panels.setdefault(panel, {}).setdefault(series, {"bins": {}, "special": {}})
        count = number(path, line, row, "count")
        try:
            e = float(row["bin_log2"])
        except (TypeError, ValueError):
            e = None
        if e is None or not math.isfinite(e):
            name = str(row["bin_log2"])
            entry["special"][name] = entry["special"].get(name, 0) + count
        else:
            entry["bins"][e] = entry["bins"].get(e, 0) + count
    return panels


def read_curves(path):
    """{panel: {series: ([steps], [values])}}"""
    panels = {}
    for row, line in load_rows(path, "curves"):
        series = str(row["series"])
        panel = series.split("/", 1)[0] if "/" in series else ""
        xs, ys = panels.setdefault(panel, {}).setdefault(series, ([], []))
        xs.append(number(path, line, row, "step"))
        ys.append(number(path, line, row, "value"))
    return panels


# --- plots ------------------------------------------------------------------------------------------

def import_pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed. Install it with\n"
              "  sudo apt-get install -y python3-matplotlib\n"
              "(or: python3 -m pip install matplotlib), then run this command again.", file=sys.stderr)
        sys.exit(2)
    return plt


def plot_timeline(plt, t, title):
    fig, (ax, ax2) = plt.subplots(2, 1, sharex=True, figsize=(9, 5.5), gridspec_kw={"height_ratios": [3, 1]})
    ax.step(t["step"], t["scale"], where="post", color="tab:blue", label="loss scale")
    ax.set_yscale("log", base=2)
    skipped = [(s, v) for s, v, k in zip(t["step"], t["scale"], t["skipped"]) if k]
    inf_kept = [(s, v) for s, v, i, k in zip(t["step"], t["scale"], t["found_inf"], t["skipped"]) if i and not k]
    if skipped:
        ax.scatter(*zip(*skipped), marker="v", color="tab:red", zorder=3, label=f"skipped step ({len(skipped)})")
    if inf_kept:
        ax.scatter(*zip(*inf_kept), marker="x", color="tab:orange", zorder=3,
                   label=f"inf/NaN found, not skipped ({len(inf_kept)})")
    ax.set_ylabel("scale (log2 axis)")
    ax.legend(loc="best")
    ax.grid(True, which="major", alpha=0.3)
    ax2.step(t["step"], t["growth_tracker"], where="post", color="tab:green")
    ax2.set_ylabel("growth tracker")
    ax2.set_xlabel("step")
    ax2.grid(True, alpha=0.3)
    ax.set_title(title or "Loss scaler timeline")
    return fig


def draw_markers(ax, lo, hi):
    for x, label, color, style in MARKERS:
        if lo <= x <= hi:
            ax.axvline(x, color=color, linestyle=style, linewidth=1, label=label)
        else:
            ax.plot([], [], color=color, linestyle=style, linewidth=1, label=f"{label} (outside the view)")


def histogram_view(panels):
    """The x range: the occupied bins and F16's limits, with a margin."""
    es = [e for p in panels.values() for s in p.values() for e, c in s["bins"].items() if c > 0]
    lo = min(es + [-24.0]) - 2
    hi = max(es + [16.0]) + 2
    return lo, hi


def plot_histogram(plt, panels, title, logy):
    names = sorted(panels)
    lo, hi = histogram_view(panels)
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.8 * len(names) + 0.8), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        notes = []
        for series in sorted(panels[name]):
            entry = panels[name][series]
            if entry["bins"]:
                edges = list(range(int(math.floor(lo)), int(math.ceil(hi)) + 1))
                counts = [entry["bins"].get(float(e), 0) for e in edges[:-1]]
                ax.stairs(counts, edges, label=series, linewidth=1.5)
            special = ", ".join(f"{k} {v:g}" for k, v in entry["special"].items() if v)
            if special:
                notes.append(f"{series}: {special}")
        draw_markers(ax, lo, hi)
        ax.set_xlim(lo, hi)
        if logy:
            ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("count")
        if notes:
            ax.text(0.01, 0.97, "\n".join(notes), transform=ax.transAxes, va="top", fontsize=7,
                    bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
        ax.legend(loc="upper right", fontsize=7)
    axes[-1, 0].set_xlabel("log2 |x| (bin e holds [2^e, 2^(e+1)))")
    fig.suptitle(title or "Magnitude histogram")
    fig.tight_layout()
    return fig


# Runs often coincide (fp32 and fp16-O2 agree to the last digit): each series of a panel gets its own dash
# pattern and marker, and later ones are drawn thinner, so a curve hidden under another still shows.
LINE_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]


def plot_curves(plt, panels, title, logy, ylim=None):
    names = sorted(panels)
    fig, axes = plt.subplots(len(names), 1, sharex=True, figsize=(9, 3 * len(names) + 0.8), squeeze=False)
    for ax, name in zip(axes[:, 0], names):
        for k, series in enumerate(sorted(panels[name])):
            xs, ys = panels[name][series]
            order = sorted(range(len(xs)), key=xs.__getitem__)
            style, marker = LINE_STYLES[k % len(LINE_STYLES)]
            label = series.split("/", 1)[1] if name and series.startswith(name + "/") else series
            ax.plot([xs[i] for i in order], [ys[i] for i in order], label=label, linestyle=style, marker=marker,
                    markevery=max(1, len(xs) // 12), markersize=4, linewidth=max(0.8, 2.0 - 0.4 * k))
        if logy:
            ax.set_yscale("log")
        if ylim:
            ax.set_ylim(*ylim)
        ax.set_ylabel(name or "value")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title or "Curves")
    fig.tight_layout()
    return fig


def render(kind, path, out, title=None, by="kind", logy=False, ylim=None):
    """Reads `path`, checks it, renders `kind` into the PNG `out`. Raises InputError on bad input."""
    if kind == "timeline":
        data = read_timeline(path)
    elif kind == "histogram":
        data = read_histogram(path, by)
    else:
        data = read_curves(path)
    plt = import_pyplot()
    if kind == "timeline":
        fig = plot_timeline(plt, data, title)
    elif kind == "histogram":
        fig = plot_histogram(plt, data, title, logy)
    else:
        fig = plot_curves(plt, data, title, logy, ylim)
    if os.path.dirname(out):
        os.makedirs(os.path.dirname(out), exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


# --- self-check -----------------------------------------------------------------------------------

def write_csv(path, header, rows):
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def selftest_inputs(d):
    """Generated inputs of each kind, shaped like halfgrad's writers' (histogram with the 'bin' name)."""
    scale, tracker, rows = 65536.0, 0, []
    for step in range(60):  # GradScaler-like: halve on an overflow, double after 10 clean steps
        overflow, used = step in (7, 8, 40), scale
        tracker = 0 if overflow else tracker + 1
        if overflow:
            scale /= 2
        elif tracker == 10:
            scale, tracker = scale * 2, 0
        rows.append([step, used, tracker, int(overflow), int(overflow)])
    write_csv(os.path.join(d, "timeline.csv"), COLUMNS["timeline"], rows)
    hist = []
    for layer, center in (("fc1", -20), ("fc2", -28)):
        for kind, shift in (("activation_grad", 0), ("weight_grad", 4)):
            hist.append([layer, kind, "zero", 0, 0, 40])
            for e in range(center + shift - 12, center + shift + 13):
                count = int(1000 * math.exp(-((e - center - shift) / 4) ** 2))
                hist.append([layer, kind, e, 2.0 ** e, 2.0 ** (e + 1), count])
    write_csv(os.path.join(d, "hist.csv"), ["layer", "kind", "bin", "lower", "upper", "count"], hist)
    curves = [[s, step, v] for step in range(0, 500, 10) for s, v in
              (("loss/fp32", 2.3 * math.exp(-step / 150)), ("loss/fp16 no scaling", 2.3 * math.exp(-step / 400)),
               ("acc/fp32", 1 - 0.9 * math.exp(-step / 150)))]
    write_csv(os.path.join(d, "curves.csv"), COLUMNS["curves"], curves)


def selftest():
    import_pyplot()  # exit 2 with the install hint before doing anything
    with tempfile.TemporaryDirectory(prefix="hg_plot_selftest_") as d:
        selftest_inputs(d)
        made = []
        for kind, name, ylim in (("timeline", "timeline.csv", None), ("histogram", "hist.csv", None),
                                 ("curves", "curves.csv", (0.0, 1.0))):
            out = os.path.join(d, kind + ".png")
            render(kind, os.path.join(d, name), out, title=f"selftest {kind}", ylim=ylim)
            size = os.path.getsize(out) if os.path.isfile(out) else 0
            with open(out, "rb") as f:
                png = f.read(8) == b"\x89PNG\r\n\x1a\n"
            if size == 0 or not png:
                print(f"plot.py selftest: FAILED: {out} is missing, empty or not a PNG", file=sys.stderr)
                return 1
            made.append(f"{kind}.png {size} bytes")
        bad = os.path.join(d, "bad.csv")
        write_csv(bad, ["step", "scale"], [[0, 1.0]])
        try:
            render("timeline", bad, os.path.join(d, "bad.png"))
            print("plot.py selftest: FAILED: a timeline without growth_tracker was accepted", file=sys.stderr)
            return 1
        except InputError as e:
            if "missing growth_tracker,found_inf,skipped" not in str(e):
                print(f"plot.py selftest: FAILED: unclear error for missing columns: {e}", file=sys.stderr)
                return 1
    print("plot.py selftest: ok (" + ", ".join(made) + "; missing columns rejected)")
    return 0


def parse_ylim(text):
    try:
        lo, hi = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not LO,HI (two numbers, e.g. 0,1)") from None
    if not lo < hi:
        raise argparse.ArgumentTypeError(f"'{text}': LO must be below HI")
    return lo, hi


def main(argv):
    if "--selftest" in argv:
        return selftest()
    p = argparse.ArgumentParser(description="Render PNGs from halfgrad's inspector/example CSV files.",
                                epilog="python3 scripts/plot.py --selftest renders generated data of each kind.")
    p.add_argument("kind", choices=sorted(COLUMNS), help="what the input holds")
    p.add_argument("input", help="CSV (or JSON) file")
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--title", help="figure title")
    p.add_argument("--by", choices=["kind", "layer"], default="kind", help="histogram: one panel per kind or layer")
    p.add_argument("--logy", action="store_true", help="histogram/curves: log y axis")
    p.add_argument("--ylim", type=parse_ylim, help="curves: y range LO,HI for every panel (e.g. 0,1 for fractions)")
    a = p.parse_args(argv)
    try:
        render(a.kind, a.input, a.output, title=a.title, by=a.by, logy=a.logy, ylim=a.ylim)
    except InputError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    print(f"plot.py: wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
