#!/usr/bin/env python3
"""The numbers in docs/AMP.md's prose that come from its generated blocks: spans

    <!-- value: NAME -->0.672<!-- end value -->

whose text VALUES[NAME] computes from the page's own blocks (so checking them needs no program run).
scripts/doc_tables.py's `update` rewrites them after the blocks, its `check-values` (CTest doc_values) fails when
a span and its block disagree; its --self-test covers this module too. Also the block markers and their parser,
which both share.
"""
import re

BEGIN = re.compile(r"^<!-- generated: ([\w.]+) -->$")
END = "<!-- end generated -->"

# --- Numbers in the prose: <!-- value: NAME -->TEXT<!-- end value --> spans, recomputed from the page's own
# generated blocks (so `check-values` needs no program run, and `update` rewrites them after the blocks).

VALUE = re.compile(r"<!-- value: ([\w.]+) -->(.*?)<!-- end value -->")


def block_lines(page, name):
    """The lines inside the code fence of the page's generated block NAME."""
    lines, found = blocks_of(page)
    for n, begin, end in found:
        if n == name:
            body = lines[begin + 1:end]
            if "```" not in body:
                break
            first = body.index("```")
            return body[first + 1:first + 1 + body[first + 1:].index("```")]
    raise SystemExit(f"doc_tables: the page has no generated block {name!r} with a code fence")


def row(page, name, first):
    """The fields of the row of block NAME whose text starts with `first` (leading spaces ignored)."""
    for line in block_lines(page, name):
        if line.strip().startswith(first):
            return line.split()
    raise SystemExit(f"doc_tables: block {name!r} has no row starting {first!r}")


def md_rows(page, name):
    """{first cell: [cells]} of the rows of the Markdown table in block NAME (its header row left out)."""
    lines, found = blocks_of(page)
    for n, begin, end in found:
        if n == name:
            out, body = {}, lines[begin + 1:end]
            for i, l in enumerate(body):
                header = i + 1 < len(body) and body[i + 1].startswith("|---")
                if l.startswith("| ") and not header:
                    cells = [c.strip() for c in l.strip("|").split("|")]
                    out[cells[0]] = cells
            return out
    raise SystemExit(f"doc_tables: the page has no generated block {name!r}")


def sweep_gap(page, k):
    """Points the unscaled run's mean accuracy lies below F32's at grad shift k (section 2's sweep)."""
    r = md_rows(page, "amp_underflow.sweep")[k]
    return 100 * (float(r[1].split()[0]) - float(r[2].split()[0]))


def sweep_mean_sd(page, k):
    """'0.72 ± 0.05': the unscaled run's mean and standard deviation at grad shift k, two decimals."""
    f = md_rows(page, "amp_underflow.sweep")[k][2].split()
    return f"{float(f[0]):.2f} ± {float(f[2]):.2f}"


def value_range(values, digits):
    """'0.37-0.53': the smallest and largest of values, with the given decimals (one value when they agree)."""
    lo, hi = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
    return lo if lo == hi else f"{lo}-{hi}"


def casts_over_gemm(page, shape, digits):
    """bench_fp8's forward casts over its forward GEMM for the row starting with shape: '1.4x'."""
    r = row(page, "bench_fp8.table", shape)
    return f"{float(r[-5].rstrip('ms')) / float(r[-4].rstrip('ms')):.{digits}f}x"


def with_zeros(page):
    """Layer 1's activation-gradient share below 2^-24 had its exact zeros been counted as small values."""
    r = row(page, "amp_underflow.part1", "1 Linear")
    zeros, below = pct(r[-2]) / 100, pct(r[4]) / 100
    return zeros + (1 - zeros) * below


def pct(field):
    return float(field.rstrip("%"))


def points(field):
    return float(field.rstrip("p"))


def fp8_mean(page, label):
    return md_rows(page, "fp8_training.sweep")[label][2].split()[0]


def underflow_acts(page):
    return [l.split() for l in block_lines(page, "amp_underflow.part1") if "activation_grad" in l]


def natural_steps(page):
    steps = re.findall(r"^step (\d+) \(natural\)", "\n".join(block_lines(page, "amp_overflow.report")), re.M)
    return " and ".join([", ".join(steps[:-1]), steps[-1]] if len(steps) > 1 else steps) or "(none)"


def sixth(ratio):
    """A ratio in words: 'a sixth', 'a third', 'half' ... (the nearest 1/n, n up to 10), else a percentage."""
    if ratio <= 0 or ratio > 1:
        return f"{100 * ratio:.0f}%"
    n = round(1 / ratio)
    words = {1: "all", 2: "half", 3: "a third", 4: "a quarter", 5: "a fifth", 6: "a sixth", 7: "a seventh",
             8: "an eighth", 9: "a ninth", 10: "a tenth"}
    return words.get(n, f"{100 * ratio:.0f}%")


def overflow_line(page, prefix):
    line = next((l for l in block_lines(page, "amp_overflow.report") if l.startswith(prefix)), None)
    if line is None:
        raise SystemExit(f"doc_tables: amp_overflow.report has no line starting {prefix!r}")
    return line


VALUES = {
    # section 2: part 1's table
    "underflow.zeros_layer1": lambda p: f"{pct(row(p, 'amp_underflow.part1', '1 Linear')[-2]):.1f}%",
    "underflow.zeros_layer3": lambda p: f"{pct(row(p, 'amp_underflow.part1', '3 Linear')[-2]):.1f}%",
    "underflow.scale1_range": lambda p: (f"{min(pct(r[4]) for r in underflow_acts(p)):.1f}-"
                                         f"{max(pct(r[4]) for r in underflow_acts(p)):.0f}%"),
    "underflow.logits_settled": lambda p: f"{pct(row(p, 'amp_underflow.part1', '5 Linear')[5]):.2f}%",
    "underflow.settled_others": lambda p: f"{max(pct(l.split()[-5]) for l in block_lines(p, 'amp_underflow.part1')[1:] if not l.startswith('5 Linear')):.2g}%",
    "underflow.layer1_scale1": lambda p: f"{pct(row(p, 'amp_underflow.part1', '1 Linear')[4]):.1f}%",
    "underflow.layer1_with_zeros": lambda p: f"{100 * with_zeros(p):.0f}%",
    "underflow.layer1_zeros_ratio": lambda p: f"{with_zeros(p) / (pct(row(p, 'amp_underflow.part1', '1 Linear')[4]) / 100):.0f}",
    "underflow.min_act_bin": lambda p: (lambda e: f"[2^{e}, 2^{e + 1})")(min(int(r[-3]) for r in underflow_acts(p))),
    "underflow.min_e_all": lambda p: f"2^{min(int(l.split()[-3]) for l in block_lines(p, 'amp_underflow.part1')[1:])}",
    # section 2: part 2's what-if probes, and the sweep's K = 0 row
    "underflow.fp32_below": lambda p: f"{pct(row(p, 'amp_underflow.part2', 'fp32')[6]):.2f}%",
    "underflow.fp32_flushed": lambda p: f"{pct(row(p, 'amp_underflow.part2', 'fp32')[5]):.2f}%",
    "underflow.unscaled_flushed": lambda p: f"{pct(row(p, 'amp_underflow.part2', 'fp16-unscaled')[5]):.2f}%",
    "underflow.dynamic_flushed": lambda p: row(p, "amp_underflow.part2", "fp16-dynamic")[5],
    "underflow.k0_unscaled": lambda p: " ".join(md_rows(p, "amp_underflow.sweep")["0"][2].split()[:3]),
    "underflow.k0_fp32": lambda p: " ".join(md_rows(p, "amp_underflow.sweep")["0"][1].split()[:3]),
    "underflow.k0_bound": lambda p: md_rows(p, "amp_underflow.sweep")["0"][5],
    # section 2: the grad-shift sweep (means over the seeds, in points below F32's)
    "underflow.k12_slip": lambda p: f"{sweep_gap(p, '12'):.1f}",
    "underflow.k16_gap": lambda p: f"{sweep_gap(p, '16'):.0f}",
    "underflow.k16_unscaled": lambda p: sweep_mean_sd(p, "16"),
    "underflow.k16_flushed": lambda p: md_rows(p, "amp_underflow.sweep")["16"][4],
    # section 3: amp_overflow's report
    "overflow.natural_steps": natural_steps,
    "overflow.difference": lambda p: re.search(r"difference (\S+) points",
                                               overflow_line(p, "test accuracy:")).group(1),
    "overflow.share_of_spread": lambda p: sixth(abs(float(re.search(r"difference (\S+) points", overflow_line(
        p, "test accuracy:")).group(1))) / float(re.search(r", (\S+) points", overflow_line(p, "seed-to-seed")).group(1))),
    # section 4: amp_master_weights' summary
    "master.fp32_acc": lambda p: row(p, "amp_master_weights.summary", "fp32")[1],
    "master.o2_acc": lambda p: row(p, "amp_master_weights.summary", "fp16-O2")[1],
    "master.o3_acc": lambda p: row(p, "amp_master_weights.summary", "fp16-O3")[1],
    "master.o3_kept": lambda p: row(p, "amp_master_weights.summary", "fp16-O3")[8],
    "master.o2_minus_o3": lambda p: f"{100 * (float(row(p, 'amp_master_weights.summary', 'fp16-O2')[1]) - float(row(p, 'amp_master_weights.summary', 'fp16-O3')[1])):.1f}",
    # section 6: fashion_mnist_mlp --compare
    "compare.fp32_ms": lambda p: row(p, "fashion_mnist_mlp.compare", "fp32")[3],
    "compare.bf16_ms": lambda p: row(p, "fashion_mnist_mlp.compare", "bf16-O1")[3],
    "compare.fp32_mb": lambda p: row(p, "fashion_mnist_mlp.compare", "fp32")[4],
    "compare.o1_mb": lambda p: row(p, "fashion_mnist_mlp.compare", "fp16-O1")[4],
    "compare.o3_mb": lambda p: row(p, "fashion_mnist_mlp.compare", "fp16-O3")[4],
    "compare.mixed_ms_range": lambda p: value_range([float(l.split()[3]) for l in block_lines(
        p, "fashion_mnist_mlp.compare")[1:] if not l.startswith("fp32")], 3),
    "compare.sweep_max_gap": lambda p: f"{max(abs(float(c[2].split()[0])) for r, c in md_rows(p, 'fashion_mnist_mlp.sweep').items() if c[2]):.2f}",
    "compare.sweep_sd_range": lambda p: value_range([100 * float(c[1].split()[2]) for c in md_rows(
        p, "fashion_mnist_mlp.sweep").values()], 2),
    # section 4: the swamping figure's counts
    "swamp.o2_layer1": lambda p: swamped(p, "fp16-O2", "1.weight"),
    "swamp.o2_layer3": lambda p: swamped(p, "fp16-O2", "3.weight"),
    "swamp.o2_layer5": lambda p: swamped(p, "fp16-O2", "5.weight"),
    "swamp.o2_bias5": lambda p: swamped(p, "fp16-O2", "5.bias"),
    "swamp.o3_layer3": lambda p: swamped(p, "fp16-O3", "3.weight"),
    "swamp.o3_layer5": lambda p: swamped(p, "fp16-O3", "5.weight"),
    "swamp.o3_lowest": lambda p: min((c[4] for c in md_table(p, "amp_master_weights.swamping") if c[0] == "fp16-O3"),
                                     key=lambda t: int(t[2:])),
    "swamp.o2_lowest": lambda p: min((c[4] for c in md_table(p, "amp_master_weights.swamping") if c[0] == "fp16-O2"),
                                     key=lambda t: int(t[2:])),
    # section 4: amp_master_weights --lr 0.1 and its seed sweep
    "master_lr01.o3_swamped": lambda p: row(p, "amp_master_weights_lr01.summary", "fp16-O3")[6],
    "master_lr01.o2_mean": lambda p: md_rows(p, "amp_master_weights_lr01.sweep")["fp16-O2"][2].split()[0],
    "master_lr01.o3_mean": lambda p: md_rows(p, "amp_master_weights_lr01.sweep")["fp16-O3"][2].split()[0],
    "master_lr01.fp32_sd": lambda p: f"{100 * float(md_rows(p, 'amp_master_weights_lr01.sweep')['fp32'][1].split()[2]):.2f}",
    # section 7: pure_bf16
    "bf16.nearest_lost": lambda p: f"{pct(row(p, 'pure_bf16.summary', 'bf16-nearest')[5]):.0f}%",
    "bf16.nearest_points": lambda p: f"{abs(points(row(p, 'pure_bf16.summary', 'bf16-nearest')[2])):.1f}",
    "bf16.tricks_gap": lambda p: f"{max(abs(100 * (float(row(p, 'pure_bf16.summary', r)[1]) - float(row(p, 'pure_bf16.summary', 'bf16-masters')[1]))) for r in ('bf16-stochastic', 'bf16-kahan')):.2f}",
    # section 8: fp8_training's seed sweep and seed 0, bench_fp8
    "fp8.delayed_mean": lambda p: fp8_mean(p, "fp8-delayed"),
    "fp8.current_mean": lambda p: fp8_mean(p, "fp8-current"),
    "fp8.mxfp8_mean": lambda p: fp8_mean(p, "mxfp8"),
    "fp8.seed0_delayed": lambda p: f"{points(row(p, 'fp8_training.summary', 'fp8-delayed')[2]):+.2f}",
    "fp8.unscaled_vs": lambda p: " ".join(md_rows(p, "fp8_training.sweep")["fp8-unscaled"][2].split()[:3]),
    "fp8.e4m3_vs": lambda p: " ".join(md_rows(p, "fp8_training.sweep")["fp8-e4m3-grads"][2].split()[:3]),
    "fp8.e4m3_flush": lambda p: md_rows(p, "fp8_training.sweep")["fp8-e4m3-grads"][3],
    "fp8.current_flush": lambda p: md_rows(p, "fp8_training.sweep")["fp8-current"][3],
    "fp8.e4m3_flush_ratio": lambda p: f"{pct(md_rows(p, 'fp8_training.sweep')['fp8-e4m3-grads'][3]) / pct(md_rows(p, 'fp8_training.sweep')['fp8-current'][3]):.0f}",
    "fp8.history1_sat_dy": lambda p: row(p, "fp8_training.summary", "fp8-history-1")[7],
    "fp8.recipes_sd_range": lambda p: value_range([float(md_rows(p, "fp8_training.sweep")[r][2].split()[2])
                                                   for r in ("fp8-delayed", "fp8-current", "mxfp8")], 2),
    "fp8.fp32_vs_bf16_sd": lambda p: md_rows(p, "fp8_training.sweep")["fp32"][2].split()[2],
    "fp8.casts_over_gemm_small": lambda p: casts_over_gemm(p, "64x784", 1),
    "fp8.casts_over_gemm_large": lambda p: casts_over_gemm(p, "1024x2048", 2),
    "fp8.delayed_over_bf16_small": lambda p: f"{float(row(p, 'bench_fp8.table', '64x784')[6]):.1f}x",
    "fp8.delayed_over_bf16_large": lambda p: f"{float(row(p, 'bench_fp8.table', '1024x2048')[6]):.1f}x",
}


def fill_values(text):
    """TEXT of every value span recomputed from the page's blocks; an unknown name is an error."""
    def one(m):
        if m.group(1) not in VALUES:
            raise SystemExit(f"doc_tables: unknown value {m.group(1)!r}; known: {', '.join(sorted(VALUES))}")
        return f"<!-- value: {m.group(1)} -->{VALUES[m.group(1)](text)}<!-- end value -->"
    return VALUE.sub(one, text)


def check_values(text):
    """Problems: a value span whose text differs from what the page's blocks give."""
    problems = []
    for m in VALUE.finditer(text):
        if m.group(1) not in VALUES:
            problems.append(f"unknown value {m.group(1)!r}")
            continue
        want = VALUES[m.group(1)](text)
        if m.group(2) != want:
            line = text.count("\n", 0, m.start()) + 1
            problems.append(f"line {line}: value {m.group(1)} reads {m.group(2)!r} but its block gives {want!r}")
    return problems


def blocks_of(text):
    """[(name, first line index, end line index)] of the generated blocks; an unclosed block is an error."""
    lines = text.split("\n")
    found, open_at = [], None
    for i, line in enumerate(lines):
        m = BEGIN.match(line)
        if m:
            if open_at is not None:
                raise SystemExit(f"doc_tables: block {open_at[0]} (line {open_at[1] + 1}) is not closed")
            open_at = (m.group(1), i)
        elif line == END:
            if open_at is None:
                raise SystemExit(f"doc_tables: line {i + 1} closes no block")
            found.append((open_at[0], open_at[1], i))
            open_at = None
    if open_at is not None:
        raise SystemExit(f"doc_tables: block {open_at[0]} (line {open_at[1] + 1}) is not closed")
    return lines, found


def swamped(page, run, param):
    """The share of run's updates to param that F16 weights lose, from the swamping block: '88.7%'."""
    for cells in md_table(page, "amp_master_weights.swamping"):
        if cells[0] == run and cells[1] == param:
            return cells[3]
    raise SystemExit(f"doc_tables: amp_master_weights.swamping has no row {run} {param}")


def md_table(page, name):
    """The cells of every row of the Markdown table in block NAME (its header row left out)."""
    lines, found = blocks_of(page)
    for n, begin, end in found:
        if n == name:
            body = lines[begin + 1:end]
            return [[c.strip() for c in l.strip("|").split("|")] for i, l in enumerate(body)
                    if l.startswith("| ") and not (i + 1 < len(body) and body[i + 1].startswith("|---"))]
    raise SystemExit(f"doc_tables: the page has no generated block {name!r}")
