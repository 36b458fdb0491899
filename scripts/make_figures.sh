#!/usr/bin/env bash
# Regenerate the figures of docs/AMP.md from the AMP examples' own output.
#
#   bash scripts/make_figures.sh [BUILD_DIR]      (default ./build)
#   HG_FIGURES="fp8_training" bash scripts/make_figures.sh build   # only these examples' figures
#
# Builds nothing: BUILD_DIR must already hold amp_underflow, amp_overflow, amp_master_weights and fp8_training
# (cmake -DHG_BUILD_EXAMPLES=ON ...; cmake --build BUILD_DIR --target amp_underflow amp_overflow
# amp_master_weights fp8_training). Runs each example once with its defaults (about 15 s, 8 s, 30 s and 90 s on
# the 2-core CI machine) into a temporary directory, then renders the PNGs with scripts/plot.py into
# docs/figures/. Needs python3 with matplotlib (Debian: python3-matplotlib); when the `python3` on
# PATH lacks it (a pyenv, a venv), /usr/bin/python3 is used instead.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
[[ "$build" = /* ]] || build="$PWD/$build"
figures="$root/docs/figures"
plot="$root/scripts/plot.py"

only="${HG_FIGURES:-amp_underflow amp_overflow amp_master_weights fp8_training}"
want() { [[ " $only " == *" $1 "* ]]; }
for prog in $only; do
  if [[ ! -x "$build/$prog" ]]; then
    echo "make_figures: $build/$prog not found; build it first:" >&2
    echo "  cmake -S $root -B $build -DHG_BUILD_EXAMPLES=ON && cmake --build $build --target amp_underflow amp_overflow amp_master_weights fp8_training" >&2
    exit 2
  fi
done

# A python3 that can import matplotlib: the one on PATH, else the system one.
python=""
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c "import matplotlib" >/dev/null 2>&1; then
    python="$candidate"
    break
  fi
done
if [[ -z "$python" ]]; then
  echo "make_figures: no python3 with matplotlib found (Debian: apt-get install python3-matplotlib)" >&2
  exit 2
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$figures"

run() {  # run NAME: the example with its defaults, data under $tmp/NAME; its report goes to stdout
  local name="$1"
  echo "make_figures: running $name ..."
  if ! "$build/$name" --out "$tmp/$name" >"$tmp/$name.log" 2>&1; then
    cat "$tmp/$name.log" >&2
    echo "make_figures: $name failed" >&2
    exit 1
  fi
  # The numbers docs/AMP.md quotes; the "plot them with" hints point into $tmp, which goes away.
  sed '/^wrote /,$d' "$tmp/$name.log"
}

render() {  # render KIND INPUT OUTPUT_NAME TITLE [extra plot.py flags]
  local kind="$1" input="$2" output="$3" title="$4"
  shift 4
  "$python" "$plot" "$kind" "$input" -o "$figures/$output" --title "$title" "$@"
  echo "make_figures: wrote docs/figures/$output"
}

if want amp_underflow; then
run amp_underflow
# the scale the dynamic GradScaler settled at in the program's fp16-dynamic run
settled="$("$python" -c 'import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
print([r for r in runs if r["run"] == "fp16-dynamic"][0]["final_scale"])' "$tmp/amp_underflow/summary.json")"
render histogram "$tmp/amp_underflow/hist.csv" underflow_histogram.png \
  "F32 gradients of the Fashion-MNIST MLP vs the F16 limits, at loss scale 1 and at the scaler's" --logy \
  --labels "$tmp/amp_underflow/layers.csv" --scale "$settled" \
  --note "exact zeros (left): a ReLU's inactive units, which no format loses; the paper's SSD had 67% in its activation gradients"
render curves "$tmp/amp_underflow/curves.csv" underflow_curves.png \
  "test accuracy and training loss: fp32 vs fp16 without scaling vs fp16 with dynamic scaling"
fi

if want amp_overflow; then
run amp_overflow
render timeline "$tmp/amp_overflow/timeline.csv" overflow_timeline.png \
  "FP16 O1 loss scale, overflows injected at steps 300, 301, 600"
render curves "$tmp/amp_overflow/curves.csv" overflow_curves.png \
  "clean vs injected run: running loss and log2 loss scale, skipped steps marked"
fi

if want amp_master_weights; then
run amp_master_weights
render curves "$tmp/amp_master_weights/curves.csv" master_weights_curves.png \
  "fp32 vs fp16-O2 (FP32 masters) vs fp16-O3 (pure F16), plain SGD lr 1e-3"
render histogram "$tmp/amp_master_weights/update_ulp16.csv" master_weights_swamping.png \
  "weight updates against the F16 spacing at their weight (lr 1e-3; left of -1, F16 drops the update)" \
  --markers ulp --logy
fi

if want fp8_training; then
echo "make_figures: running fp8_training ..."
if ! "$build/fp8_training" --csv "$tmp/fp8_training" >"$tmp/fp8_training.log" 2>&1; then
  cat "$tmp/fp8_training.log" >&2
  echo "make_figures: fp8_training failed" >&2
  exit 1
fi
sed '/^wrote /,$d' "$tmp/fp8_training.log"
render curves "$tmp/fp8_training/curves.csv" fp8_scaling_curves.png \
  "FP8 scaling: amax x scale over the format max (above 1 saturates); delayed scaling lags the amax" --logy
render histogram "$tmp/fp8_training/hist.csv" fp8_histogram.png \
  "F32 values of the Fashion-MNIST MLP (last 20 steps) against the unscaled E4M3 and E5M2 ranges" --logy --markers fp8 \
  --note "what an FP8 cast with scale 1 would keep: per-tensor scales move each histogram into the format's range"
fi

echo "make_figures: done"
