#!/usr/bin/env python3
"""Render PNG plots from the CSV files halfgrad's inspectors and examples write.

  python3 scripts/plot.py timeline  scaler.csv -o scaler.png [--title T]
  python3 scripts/plot.py histogram hist.csv   -o hist.png   [--title T] [--by kind|layer] [--logy]
                                                [--labels L.csv] [--scale S] [--markers f16|fp8|ulp] [--note TEXT]
  python3 scripts/plot.py curves    curves.csv -o curves.png [--title T] [--logy] [--ylim LO,HI]
  python3 scripts/plot.py formats   formats.txt -o formats.png [--title T]
  python3 scripts/plot.py --selftest

Inputs (extra columns are ignored; a .json file may hold the same rows as a list of objects, or an
object with that list under "rows"):
  timeline   step,scale,growth_tracker,found_inf,skipped    amp::inspect::ScalerTimeline::write_csv
             scale on a log2 axis, skipped steps marked, growth tracker below
  histogram  layer,kind,bin_log2,count (or bin instead of bin_log2)   GradientHistogram::write_csv
             bin e counts |x| in [2^e, 2^(e+1)); non-numeric bins (zero, inf, nan, below_range,
             above_range) are listed in the panel, exact zeros also as a share of all values. One panel
             per kind (one line per layer) or, with --by layer, per layer.
             --markers f16 (default): vertical lines at F16's 2^-24, 2^-14, 65504 and BF16's 2^-133.
             --markers fp8: E4M3's 2^-9, 2^-6, 448 and E5M2's 2^-16, 57344 (unscaled FP8 casts).
             --markers ulp: the input holds log2(|update| / ulp16(weight)) (GradientHistogram's
             "update_ulp16" rows); a line at -1, left of which F16 swamps the update, and per line the
             share of updates left of it.
             --scale S (a power of two): a second column of panels with the same values multiplied by S
             (a loss scale), marking the largest value times S and its headroom to F16's 65504.
             --per-tensor (with --markers fp8): a second column with each tensor times its own power-of-two
             scale, as FP8 current scaling casts it (E4M3 for values, E5M2 for activation gradients).
             --labels L.csv (layer,label): legend names for the layer column. A layer's parameters
             ("1.weight", "1.bias": dashed) take the colour of the layer ("1") in every panel.
  curves     series,step,value    one line per series; a series named "loss/train" goes to the
             panel "loss", "acc/test" to the panel "acc" (no slash: one shared panel). A series'
             mode is its label up to the first ':' and has one colour in every panel (fp32 blue, the
             F16 runs warm colours, BF16 purple); a label that starts with '@' is drawn as markers
             only (events such as skipped steps: "@fp16-O1: skipped"). Panels over different step
             ranges get their own step axes; legends sit right of the panels.
  formats    the format table precision_formats prints (its output saved to a file): one number line per
             format, subnormals and normals on a log2 axis, with TF32 derived from F32.

Exit status: 0 done, 1 bad input (the message names the file, line and column), 2 usage error or
matplotlib missing. Needs only the standard library and matplotlib (Debian: python3-matplotlib).
"""
import argparse
import csv
import json
import math
import os
import re
import sys
import textwrap
import tempfile

# F16 and BF16 limits as log2 magnitudes (amp/inspect/formats.h derives them from the layouts).
F16_MAX_LOG2 = math.log2(65504.0)
E4M3_MAX_LOG2, E5M2_MAX_LOG2 = math.log2(448.0), math.log2(57344.0)  # FP8's largest finite values (core/fp8.h)
MARKERS = {
    "f16": [
        (-24.0, "F16 min subnormal 2^-24", "tab:red", "--"),
        (-14.0, "F16 min normal 2^-14", "tab:orange", "--"),
        (F16_MAX_LOG2, "F16 max 65504", "tab:red", "-"),
        (-133.0, "BF16 min subnormal 2^-133", "tab:purple", ":"),
    ],
    # FP8 (core/fp8.h): E4M3's range 2^-9 .. 448 (forward tensors), E5M2's 2^-16 .. 57344 (gradients), unscaled
    "fp8": [
        (-9.0, "E4M3 min subnormal 2^-9", "tab:green", "--"),
        (-6.0, "E4M3 min normal 2^-6", "tab:olive", "--"),
        (E4M3_MAX_LOG2, "E4M3 max 448", "tab:green", "-"),
        (-16.0, "E5M2 min subnormal 2^-16", "tab:brown", ":"),
        (E5M2_MAX_LOG2, "E5M2 max 57344", "tab:brown", "-"),
    ],
    # bin e of log2(|u| / ulp16(w)) holds ratios in [2^e, 2^(e+1)): every bin left of -1 is below half a
    # spacing, where fl16(w + u) rounds back to w (the exact test also catches ties and steps down from a
    # power of two, where the spacing below w is half the spacing above)
    "ulp": [
        (-1.0, "|u| = ulp(w)/2: left of it F16 swamps the update", "tab:red", "--"),
        (0.0, "|u| = ulp(w)", "tab:gray", ":"),
    ],
}
SWAMP_LOG2 = -1.0
XLABELS = {"f16": "log2 |x| (bin e holds [2^e, 2^(e+1)))", "fp8": "log2 |x| (bin e holds [2^e, 2^(e+1)))",
           "ulp": "log2(|update| / ulp of the weight in F16) (bin e holds [2^e, 2^(e+1)))"}

# One colour per mode in every panel and figure: the runs the examples name, then the rest in order.
MODE_COLOURS = {"fp32": "tab:blue", "clean": "tab:blue", "fp16-O1": "tab:orange", "injected": "tab:red",
                "fp16-O2": "tab:green", "fp16-dynamic": "tab:green", "fp16-O3": "tab:red",
                "fp16-unscaled": "tab:red", "bf16-O1": "tab:purple", "bf16": "tab:purple"}
SPARE_COLOURS = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
                 "tab:olive", "tab:cyan", "tab:gray"]


class Colours:
    """A colour per key, the same wherever the key appears: known modes first, then spare colours."""

    def __init__(self, known=None):
        self.known = dict(known or {})
        self.given = {}

    def __call__(self, key):
        if key not in self.given:
            used = set(self.given.values())
            spare = [c for c in SPARE_COLOURS if c not in used] or SPARE_COLOURS
            self.given[key] = self.known.get(key, spare[0])
        return self.given[key]


def mode_of(label):
    """The mode a curve belongs to: its label without a leading '@', up to the first ':'."""
    return label.lstrip("@").split(":", 1)[0].strip()

COLUMNS = {
    "timeline": ["step", "scale", "growth_tracker", "found_inf", "skipped"],
    "histogram": ["layer", "kind", "bin_log2", "count"],
    "curves": ["series", "step", "value"],
    "formats": [],  # not a CSV: the format table precision_formats prints (its output saved to a file)
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


def legend_beside(ax, **kw):
    """The legend right of the axes, at their top: it never covers data (the figures are wide enough for it)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kw)


def plot_timeline(plt, t, title):
    fig, (ax, ax2) = plt.subplots(2, 1, sharex=True, figsize=(11, 5.5), gridspec_kw={"height_ratios": [3, 1]})
    ax.step(t["step"], t["scale"], where="post", color="tab:blue", label="loss scale")
    ax.set_yscale("log", base=2)
    skipped = [(s, v) for s, v, k in zip(t["step"], t["scale"], t["skipped"]) if k]
    inf_kept = [(s, v) for s, v, i, k in zip(t["step"], t["scale"], t["found_inf"], t["skipped"]) if i and not k]
    if skipped:
        ax.scatter(*zip(*skipped), marker="v", color="tab:red", zorder=3, label=f"skipped step ({len(skipped)})")
    if inf_kept:
        ax.scatter(*zip(*inf_kept), marker="x", color="tab:orange", zorder=3,
                   label=f"inf/NaN found, not skipped ({len(inf_kept)})")
    ax.set_ylabel("loss scale (log2 axis)")
    legend_beside(ax)
    ax.grid(True, which="major", alpha=0.3)
    ax2.step(t["step"], t["growth_tracker"], where="post", color="tab:green")
    ax2.set_ylabel("growth tracker:\nclean steps since\nthe scale changed")
    ax2.set_xlabel("step")
    ax2.grid(True, alpha=0.3)
    ax.set_title(title or "Loss scaler timeline")
    fig.tight_layout()  # the legend beside the axes stays inside the figure
    return fig


def draw_markers(ax, lo, hi, markers, legend=True):
    for x, label, color, style in MARKERS[markers]:
        if lo <= x <= hi:
            ax.axvline(x, color=color, linestyle=style, linewidth=1, label=label if legend else None)
        elif legend:
            ax.plot([], [], color=color, linestyle=style, linewidth=1, label=f"{label} (outside the view)")


def histogram_view(panels, shift, markers):
    """The x range: the occupied bins (and their shifted copies) and the markers' region, with a margin."""
    es = [e for p in panels.values() for s in p.values() for e, c in s["bins"].items() if c > 0]
    es += [e + shift for e in es]
    lo, hi = {"f16": (-24.0, 16.0), "fp8": (-16.0, 16.0)}.get(markers, (-1.0, 0.0))
    return min(es + [lo]) - 2, max(es + [hi]) + 2


def read_labels(path):
    """{layer: label} from a CSV with columns layer,label."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file (--labels wants a CSV with columns layer,label)")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if rows and ("layer" not in rows[0] or "label" not in rows[0]):
        raise InputError(f"{path} line 1: expected the columns layer,label, found {','.join(rows[0])}")
    return {str(r["layer"]): str(r["label"]) for r in rows}


def scale_shift(scale):
    """log2 of a loss scale, which must be a power of two (the bins move by whole binades)."""
    if scale is None:
        return None
    k = math.log2(scale) if scale > 0 else float("nan")
    if not math.isfinite(k) or k != round(k):
        raise InputError(f"--scale {scale:g}: the histogram moves by whole binades, so the scale must be a power "
                         "of two (a loss scaler's scales are)")
    return int(round(k))


def series_notes(entry, series, markers):
    """The panel text for one line: special bins, exact zeros as a share, the share left of a marker."""
    total = sum(entry["bins"].values()) + sum(entry["special"].values())
    parts = []
    for k, v in entry["special"].items():
        if not v:
            continue
        share = f" ({100 * v / total:.1f}% of {total:g})" if k == "zero" and total else ""
        parts.append(f"{'exact zeros' if k == 'zero' else k} {v:g}{share}")
    if markers == "ulp":
        nonzero = sum(entry["bins"].values())
        swamped = sum(c for e, c in entry["bins"].items() if e + 1 <= SWAMP_LOG2)
        if nonzero:
            parts.append(f"left of -1: {100 * swamped / nonzero:.1f}% of {nonzero:g} updates")
    return f"{series}: " + ", ".join(parts) if parts else ""


def draw_headroom(ax, panel, shift, colour_of, labels):
    """The largest value times the scale, per line, and how far it stays below F16's largest value."""
    tops = [(max(e for e, c in entry["bins"].items() if c > 0) + 1 + shift, series)
            for series, entry in panel.items() if any(c > 0 for c in entry["bins"].values())]
    if not tops:
        return
    top, series = max(tops)
    ax.axvline(top, color=colour_of(layer_of(series)), linestyle="-.", linewidth=1,
               label=f"largest x S < 2^{top:g} ({labels.get(series, series)})")
    room = F16_MAX_LOG2 - top
    ax.annotate("", xy=(F16_MAX_LOG2, 0.5), xytext=(top, 0.5), xycoords=("data", "axes fraction"),
                arrowprops={"arrowstyle": "<->", "color": "tab:red" if room < 1 else "black"})
    ax.text((top + F16_MAX_LOG2) / 2, 0.53, f"headroom > 2^{math.floor(room * 100) / 100:g}" if room > 0
            else "OVERFLOWS", transform=ax.get_xaxis_transform(), ha="center", fontsize=7)


def layer_of(series):
    """A parameter's layer ("1.weight" -> "1"): a layer's activation and parameters share a colour."""
    head, _, last = series.rpartition(".")
    return head if head and last in ("weight", "bias") else series


def fp8_tensor_shift(kind, entry):
    """The power-of-two scale an FP8 cast with current scaling (pow2) gives one tensor, as log2: its largest
    value, in [2^e, 2^(e+1)), lands below 2^floor(log2 fmax); E5M2 for gradients, E4M3 for the rest (HYBRID)."""
    top = max((e for e, c in entry["bins"].items() if c > 0), default=None)
    if top is None:
        return 0
    fmax_log2 = math.floor(E5M2_MAX_LOG2 if kind.endswith("_grad") else E4M3_MAX_LOG2)
    return int(fmax_log2 - top - 1)


def plot_histogram(plt, panels, title, logy, scale=None, markers="f16", labels=None, note=None, per_tensor=False):
    labels = labels or {}
    names = sorted(panels)
    shift = scale_shift(scale)
    if per_tensor and shift is not None:
        raise InputError("--scale and --per-tensor both add the second column: pass one")
    columns = [0] if shift is None and not per_tensor else [0, shift if shift is not None else "tensor"]
    lo, hi = histogram_view(panels, shift or 0, markers)
    colour_of = Colours()
    fig, axes = plt.subplots(len(names), len(columns), figsize=(10.5 * len(columns), 3.2 * len(names) + 1.0),
                             squeeze=False)
    for row, name in enumerate(names):
        for col, k in enumerate(columns):
            ax = axes[row, col]
            notes = []
            for series in sorted(panels[name]):
                entry = panels[name][series]
                if entry["bins"] and not (k == "tensor" and name == "weight_grad"):
                    edges = list(range(int(math.floor(lo)), int(math.ceil(hi)) + 1))
                    kk = fp8_tensor_shift(name, entry) if k == "tensor" else k
                    counts = [entry["bins"].get(float(e - kk), 0) for e in edges[:-1]]
                    ax.stairs(counts, edges, label=labels.get(series, series) if col == 0 else None,
                              linewidth=1.5, color=colour_of(layer_of(series)),
                              linestyle="--" if series.endswith(".bias") else "-")
                text = series_notes(entry, labels.get(series, series), markers)
                if text:
                    notes.append(text)
            draw_markers(ax, lo, hi, markers, legend=col == 0)
            ax.set_xlim(lo, hi)
            if logy:
                ax.set_yscale("log")
            if col == 1 and k != "tensor":
                draw_headroom(ax, panels[name], shift, colour_of, labels)
            words = KIND_WORDS.get(name, name)
            if col == 0:
                ax.set_title(words, fontsize=10)
            elif k == "tensor" and name == "weight_grad":
                ax.set_title(f"{words}: not cast to FP8 (the weight-gradient GEMM writes them in high precision)",
                             fontsize=10)
                ax.set_yticks([])
            elif k == "tensor":
                fmt = "E5M2" if name.endswith("_grad") else "E4M3"
                ax.set_title(f"{words} x each tensor's own power-of-two {fmt} scale", fontsize=10)
            else:
                ax.set_title(f"{words} x {scale:g} (2^{shift}): the loss scale", fontsize=10)
            ax.set_ylabel("count")
            if notes and col == 0:
                ax.text(0.01, 0.97, "\n".join(notes), transform=ax.transAxes, va="top", fontsize=7,
                        bbox={"facecolor": "white", "alpha": 0.8, "linewidth": 0})
            if ax.get_legend_handles_labels()[0]:
                legend_beside(ax, fontsize=7)
    for ax in axes[-1, :]:
        ax.set_xlabel(XLABELS[markers])
    fig.suptitle((title or "Magnitude histogram") + (f"\n{note}" if note else ""))
    fig.tight_layout()
    return fig


# Runs often coincide (fp32 and fp16-O2 agree to the last digit): each series of a panel gets its own dash
# pattern and marker, and later ones are drawn thinner, so a curve hidden under another still shows.
LINE_STYLES = [("-", "o"), ("--", "s"), (":", "^"), ("-.", "D")]


def curve_label(panel, series):
    return series.split("/", 1)[1] if panel and series.startswith(panel + "/") else series


# GradientHistogram's kinds (a histogram panel each), in words for the panel titles.
KIND_WORDS = {"activation": "activations (each layer's output)", "activation_grad":
              "activation gradients (the gradient reaching each layer's output)", "weight": "weights",
              "weight_grad": "weight gradients", "update": "weight updates"}

# The examples' short panel names, in words for the y axis; other panel names are written as words already.
PANEL_WORDS = {"acc": "test accuracy", "loss": "training loss", "log2_scale": "log2 of the loss scale"}


def plot_curves(plt, panels, title, logy, ylim=None):
    names = sorted(panels)
    # panels over different step ranges (a window sampled every step next to a whole run sampled every 50) each get
    # their own step axis; legends go right of the axes, never over a curve: the figure is wider by their column
    spans = {(min(x for xs, _ in panels[n].values() for x in xs), max(x for xs, _ in panels[n].values() for x in xs))
             for n in names}
    shared = len(spans) == 1
    fig, axes = plt.subplots(len(names), 1, sharex=shared, figsize=(11.5, 3 * len(names) + 0.8), squeeze=False)
    colour_of = Colours(MODE_COLOURS)
    for ax, name in zip(axes[:, 0], names):
        lines = [s for s in sorted(panels[name]) if not curve_label(name, s).startswith("@")]
        events = [s for s in sorted(panels[name]) if curve_label(name, s).startswith("@")]
        for k, series in enumerate(lines):
            xs, ys = panels[name][series]
            order = sorted(range(len(xs)), key=xs.__getitem__)
            style, marker = LINE_STYLES[k % len(LINE_STYLES)]
            label = curve_label(name, series)
            ax.plot([xs[i] for i in order], [ys[i] for i in order], label=label, linestyle=style, marker=marker,
                    markevery=max(1, len(xs) // 12), markersize=4, linewidth=max(0.8, 2.0 - 0.4 * k),
                    color=colour_of(mode_of(label)))
        for k, series in enumerate(events):
            xs, ys = panels[name][series]
            label = curve_label(name, series)
            ax.scatter(xs, ys, marker="vx^o"[k % 4], s=28, zorder=3, color=colour_of(mode_of(label)),
                       label=f"{label[1:]} ({len(xs)})")
        if logy:
            ax.set_yscale("log")
        if ylim:
            ax.set_ylim(*ylim)
        if name in PANEL_WORDS or len(name) <= 30:
            ax.set_ylabel(PANEL_WORDS.get(name, name) or "value")
        else:  # a long panel name (FP8's "Linear 256->128 input x: scaled amax ..."): the title, its words the label
            ax.set_title(name, fontsize=9)
            ax.set_ylabel(textwrap.fill(name.split(": ", 1)[1] if ": " in name else "value", 28), fontsize=8)
        ax.grid(True, alpha=0.3)
        legend_beside(ax, fontsize=8)
        if not shared:
            ax.set_xlabel("step")
    axes[-1, 0].set_xlabel("step")
    fig.suptitle(title or "Curves")
    fig.tight_layout()
    return fig


FORMAT_ROW = re.compile(r"^(\w+)\s+(\d+)\s+1\|(\d+)\|(\d+)\s+\d+\s+\S+\s+(\S+)\s+\S+ \(2\^(-?\d+)\)\s+\S+ \(2\^(-?\d+)\)")


def read_formats(path):
    """[(name, exponent bits, mantissa bits, log2 smallest subnormal, log2 smallest normal, log2 max finite)] from
    precision_formats' table; TF32 (F32's exponent, 10 mantissa bits: what Tensor Cores round F32 inputs to) is
    derived from the F32 row, normal numbers only."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file (save precision_formats' output to a file)")
    rows = []
    for line in open(path, encoding="utf-8"):
        m = FORMAT_ROW.match(line)
        if m:
            name, _, e, mant, fmax, normal, sub = m.groups()
            rows.append((name, int(e), int(mant), int(sub), int(normal), math.log2(float(fmax))))
    if not rows:
        raise InputError(f"{path}: no format table (the lines of precision_formats' 'bits sign|exp|mant' table)")
    f32 = next((r for r in rows if r[0] == "F32"), None)
    if f32:
        top = f32[5] - math.log2(2 - 2.0 ** -23) + math.log2(2 - 2.0 ** -10)
        rows.insert(1, ("TF32", 8, 10, f32[4], f32[4], top))  # its subnormals are not drawn: not a storage format
    return rows


def plot_formats(plt, rows, title):
    """A number line per format: where its subnormals and normals lie on a log2 axis, and the relative spacing of
    neighbouring values (2^-mantissa bits); the lower panel zooms on the range the 8- and 16-bit formats share."""
    fig, axes = plt.subplots(2, 1, figsize=(11.5, 1.0 + 0.75 * len(rows) * 2))
    for ax, (lo, hi) in zip(axes, [(-155, 135), (-30, 20)]):
        for i, (name, e, mant, sub, normal, top) in enumerate(rows):
            y = len(rows) - 1 - i
            ax.barh(y, normal - sub, left=sub, height=0.5, color="tab:orange", alpha=0.45,
                    label="subnormals (fewer significant bits)" if i == 0 else None)
            ax.barh(y, top - normal, left=normal, height=0.5, color="tab:blue", alpha=0.7,
                    label="normal numbers" if i == 0 else None)
            text = f"2^{sub} to {2.0 ** top:.4g}, spacing 2^-{mant} of the value"
            ax.text(min(max(top, lo) + 1, hi - 1), y, text if lo < -100 else "", va="center", fontsize=7,
                    ha="left" if top < hi - 40 else "right")
        ax.set_yticks(range(len(rows)))
        ax.set_yticklabels([f"{r[0]} (1|{r[1]}|{r[2]})" for r in reversed(rows)])
        ax.set_xlim(lo, hi)
        ax.axvline(0, color="black", linewidth=0.6)
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_xlabel("log2 of the magnitude" + (" (zoom: where the 8- and 16-bit formats live)" if hi < 100 else ""))
    legend_beside(axes[0], fontsize=8)
    fig.suptitle(title or "The formats on one number line (sign|exponent|mantissa bits)")
    fig.tight_layout()
    return fig


def render(kind, path, out, title=None, by="kind", logy=False, ylim=None, scale=None, markers="f16", labels=None,
           note=None, per_tensor=False):
    """Reads `path`, checks it, renders `kind` into the PNG `out`. Raises InputError on bad input."""
    if kind == "timeline":
        data = read_timeline(path)
    elif kind == "histogram":
        data = read_histogram(path, by)
        scale_shift(scale)  # a bad scale is bad input, found before matplotlib loads
        labels = read_labels(labels) if labels else {}
    elif kind == "formats":
        data = read_formats(path)
    else:
        data = read_curves(path)
    plt = import_pyplot()
    if kind == "timeline":
        fig = plot_timeline(plt, data, title)
    elif kind == "formats":
        fig = plot_formats(plt, data, title)
    elif kind == "histogram":
        fig = plot_histogram(plt, data, title, logy, scale=scale, markers=markers, labels=labels, note=note,
                             per_tensor=per_tensor)
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
    curves += [["loss/@fp32: skipped", step, 1.0] for step in (100, 300)]
    write_csv(os.path.join(d, "curves.csv"), COLUMNS["curves"], curves)
    write_csv(os.path.join(d, "labels.csv"), ["layer", "label"], [["fc1", "fc1 Linear 784->256"], ["fc2", "fc2 out"]])
    ratios = [[p, run, e, int(500 * math.exp(-((e + shift) / 3) ** 2))] for run, shift in (("O3", 2), ("O2", -1))
              for p in ("fc1.weight", "fc2.weight") for e in range(-12, 8)]
    write_csv(os.path.join(d, "ratios.csv"), ["layer", "kind", "bin", "count"], ratios)
    with open(os.path.join(d, "formats.txt"), "w", encoding="utf-8") as f:  # two rows of precision_formats' table
        f.write("F32     32  1|8|23         127  -126..127  3.4028e+38  1.1755e-38 (2^-126)    1.4013e-45 (2^-149)     "
                "1.1921e-07 (2^-23)     7.22 (6..9)\n"
                "F16     16  1|5|10          15  -14..15    6.5504e+04  6.1035e-05 (2^-14)     5.9605e-08 (2^-24)      "
                "9.7656e-04 (2^-10)     3.31 (3..5)\n")


def selftest():
    import_pyplot()  # exit 2 with the install hint before doing anything
    with tempfile.TemporaryDirectory(prefix="hg_plot_selftest_") as d:
        selftest_inputs(d)
        made = []
        cases = (("timeline", "timeline.csv", {}), ("histogram", "hist.csv", {}),
                 ("histogram", "hist.csv", {"scale": 1024.0, "labels": os.path.join(d, "labels.csv"), "note": "n"}),
                 ("histogram", "ratios.csv", {"markers": "ulp", "logy": True}),
                 ("histogram", "hist.csv", {"markers": "fp8", "per_tensor": True}),
                 ("curves", "curves.csv", {"ylim": (0.0, 1.0)}), ("formats", "formats.txt", {}))
        for i, (kind, name, extra) in enumerate(cases):
            out = os.path.join(d, f"{kind}{i}.png")
            render(kind, os.path.join(d, name), out, title=f"selftest {kind}", **extra)
            size = os.path.getsize(out) if os.path.isfile(out) else 0
            with open(out, "rb") as f:
                png = f.read(8) == b"\x89PNG\r\n\x1a\n"
            if size == 0 or not png:
                print(f"plot.py selftest: FAILED: {out} is missing, empty or not a PNG", file=sys.stderr)
                return 1
            made.append(f"{kind}{i}.png {size} bytes")
        bad = os.path.join(d, "bad.csv")
        write_csv(bad, ["step", "scale"], [[0, 1.0]])
        rejected = (("timeline", bad, {}, "missing growth_tracker,found_inf,skipped", "a timeline without growth_tracker"),
                    ("histogram", os.path.join(d, "hist.csv"), {"scale": 1000.0}, "power of two",
                     "--scale 1000 (not a power of two)"),
                    ("formats", bad, {}, "no format table", "a file without precision_formats' table"))
        for kind, path, extra, expected, what in rejected:
            try:
                render(kind, path, os.path.join(d, "bad.png"), **extra)
                print(f"plot.py selftest: FAILED: {what} was accepted", file=sys.stderr)
                return 1
            except InputError as e:
                if expected not in str(e):
                    print(f"plot.py selftest: FAILED: unclear error for {what}: {e}", file=sys.stderr)
                    return 1
    print("plot.py selftest: ok (" + ", ".join(made) + "; missing columns and a scale of 1000 rejected)")
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
    p.add_argument("input", help="CSV (or JSON) file; for formats, precision_formats' output")
    p.add_argument("-o", "--output", required=True, help="PNG file to write")
    p.add_argument("--title", help="figure title")
    p.add_argument("--by", choices=["kind", "layer"], default="kind", help="histogram: one panel per kind or layer")
    p.add_argument("--logy", action="store_true", help="histogram/curves: log y axis")
    p.add_argument("--ylim", type=parse_ylim, help="curves: y range LO,HI for every panel (e.g. 0,1 for fractions)")
    p.add_argument("--scale", type=float, help="histogram: a second column multiplied by this power of two")
    p.add_argument("--markers", choices=sorted(MARKERS), default="f16",
                   help="histogram: F16/BF16 limits (f16), FP8's (fp8) or the swamping threshold of update/ulp ratios (ulp)")
    p.add_argument("--labels", help="histogram: CSV layer,label with the legend names of the layers")
    p.add_argument("--note", help="histogram: a line under the title")
    p.add_argument("--per-tensor", action="store_true",
                   help="histogram: a second column with each tensor at its own power-of-two FP8 scale (current scaling)")
    a = p.parse_args(argv)
    try:
        render(a.kind, a.input, a.output, title=a.title, by=a.by, logy=a.logy, ylim=a.ylim, scale=a.scale,
               markers=a.markers, labels=a.labels, note=a.note, per_tensor=a.per_tensor)
    except InputError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        return 1
    print(f"plot.py: wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
