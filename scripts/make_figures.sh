#!/usr/bin/env bash
# Regenerate the figures of docs/AMP.md, and its generated blocks (scripts/doc_tables.py), from the AMP examples'
# own output, and name the machine, threads and commit that printed them.
#
#   bash scripts/make_figures.sh [BUILD_DIR]      (default ./build)
#   HG_FIGURES="fp8_training" bash scripts/make_figures.sh build   # only these examples' figures
#   HG_FIGURES="inspect amp_overflow" bash ...                      # section 9's inspector outputs only
#
# Builds nothing: BUILD_DIR must already hold precision_formats, amp_underflow, amp_overflow, amp_master_weights,
# pure_bf16, fp8_training, bench_fp8, fashion_mnist_mlp, fashion_mnist_cnn and amp_recipe (cmake -DHG_BUILD_EXAMPLES=ON
# ...; cmake --build BUILD_DIR --target precision_formats amp_underflow amp_overflow amp_master_weights pure_bf16
# fp8_training bench_fp8 fashion_mnist_mlp fashion_mnist_cnn amp_recipe). Runs each once with its defaults into a
# temporary directory, renders the PNGs with scripts/plot.py into docs/figures/, and runs the seed sweeps behind the
# pages' "within noise" claims: amp_underflow for every --grad-shift K of section 2 with 5 seeds (25 runs), and
# seeds 1-4 next to the default run of amp_master_weights --lr 0.1, fashion_mnist_mlp --compare, pure_bf16 and
# fp8_training, then fp8_training --model cnn once; `inspect` runs the MLP's and the CNN's
# first step of every precision mode through the inspectors (section 9), `amp_recipe` the recipe model's ledgers
# (section 9, --batches 2 --epochs 1: the ledger depends on the shapes only); `complete_program` compiles section 10's
# complete program from the page against BUILD_DIR's libhalfgrad ($CXX, default g++) and runs it. Every program run
# is timed (docs/AMP.md's make_figures.times block gives the times of the page's run). Then scripts/doc_tables.py
# rewrites the generated blocks of docs/AMP.md and README.md from the reports. Needs python3 with matplotlib
# (Debian: python3-matplotlib); when the `python3` on PATH lacks it (a pyenv, a venv), /usr/bin/python3 is used.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
[[ "$build" = /* ]] || build="$PWD/$build"
figures="$root/docs/figures"
plot="$root/scripts/plot.py"

only="${HG_FIGURES:-precision_formats amp_underflow amp_overflow amp_master_weights pure_bf16 fp8_training bench_fp8 fashion_mnist_mlp inspect amp_recipe complete_program}"
want() { [[ " $only " == *" $1 "* ]]; }
for part in $only; do
  progs="$part"
  [[ "$part" == inspect ]] && progs="fashion_mnist_mlp fashion_mnist_cnn"
  [[ "$part" == complete_program ]] && progs=""  # compiled from docs/AMP.md against $build's libhalfgrad
  for prog in $progs; do
    if [[ ! -x "$build/$prog" ]]; then
      echo "make_figures: $build/$prog not found; build it first:" >&2
      echo "  cmake -S $root -B $build -DHG_BUILD_EXAMPLES=ON && cmake --build $build --target precision_formats amp_underflow amp_overflow amp_master_weights pure_bf16 fp8_training bench_fp8 fashion_mnist_mlp fashion_mnist_cnn amp_recipe" >&2
      exit 2
    fi
  done
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

# Who printed the numbers: the CPU (model and the widest ISA halfgrad uses), its cores, the examples' one thread
# (their default), and the commit (marked when the tree has uncommitted changes outside docs/).
cpu_model="$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2-) "
isa="baseline x86-64"
for pair in "amx_tile:AVX-512 with BF16 and AMX" "avx512_bf16:AVX-512 with BF16" "avx512f:AVX-512" "avx2:AVX2"; do
  if [[ "$cpu_flags" == *" ${pair%%:*} "* ]]; then isa="${pair#*:}"; break; fi
done
commit="$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
# docs/ and README.md are what this script writes, so changes there do not count
git -C "$root" diff --quiet HEAD -- . ':(exclude)docs' ':(exclude)README.md' 2>/dev/null || commit="$commit (with uncommitted changes)"
machine="$cpu_model ($isa), $(nproc) cores, no GPU used"
"$python" -c 'import json, sys; json.dump({"machine": sys.argv[1], "threads": 1, "commit": sys.argv[2]}, open(sys.argv[3], "w"))' \
  "$machine" "$commit" "$tmp/provenance.json"
echo "make_figures: on $machine, commit $commit"

# every program's wall time, for the page's table of run times (doc_tables.py's make_figures.times block)
since() { awk -v now="$(date +%s.%N)" -v t0="$1" 'BEGIN { printf "%.1f", now - t0 }'; }  # seconds since $1
t_start=$(date +%s.%N)
times="$tmp/make_figures.log"
: >"$times"
logged() {  # logged LOG COMMAND...: runs the command with its output in LOG; on failure prints LOG and stops
  local log="$1" t0
  shift
  echo "make_figures: ${*#"$build/"} ..."
  t0=$(date +%s.%N)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    echo "make_figures: ${*#"$build/"} failed" >&2
    exit 1
  fi
  printf 'time\t%s\t%s\t%s\n' "$(basename "$1")" "$(since "$t0")" "${*#"$build/"}" >>"$times"
}

run() {  # run NAME: the example with its defaults, data under $tmp/NAME; its report goes to stdout
  local name="$1"
  logged "$tmp/$name.log" "$build/$name" --out "$tmp/$name"
  # The numbers docs/AMP.md quotes; the "plot them with" hints point into $tmp, which goes away.
  sed '/^wrote /,$d' "$tmp/$name.log"
}

render() {  # render KIND INPUT OUTPUT_NAME TITLE [extra plot.py flags]
  local kind="$1" input="$2" output="$3" title="$4"
  shift 4
  "$python" "$plot" "$kind" "$input" -o "$figures/$output" --title "$title" "$@"
  echo "make_figures: wrote docs/figures/$output"
}

if want precision_formats; then  # section 1's number line of the formats
logged "$tmp/precision_formats.log" "$build/precision_formats"
render formats "$tmp/precision_formats.log" formats_number_line.png \
  "F32, TF32, F16, BF16 and the FP8 formats on one log2 axis: range, subnormals, spacing"
fi

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
# section 2's sweep: every grad shift K with 5 seeds (seed 0 at K = 0 is the run above)
mkdir -p "$tmp/sweep/amp_underflow/k0_s0"
cp "$tmp/amp_underflow/summary.json" "$tmp/sweep/amp_underflow/k0_s0/"
for k in 0 8 12 16 20; do
  for s in 0 1 2 3 4; do
    [[ $k == 0 && $s == 0 ]] && continue
    out="$tmp/sweep/amp_underflow/k${k}_s${s}"
    logged "$out.log" "$build/amp_underflow" --grad-shift "$k" --seed "$s" --out "$out"
  done
done
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
# section 4's contrast: 100x larger steps, where pure F16 loses little
logged "$tmp/amp_master_weights_lr01.log" "$build/amp_master_weights" --lr 0.1 --out "$tmp/amp_master_weights_lr01"
mkdir -p "$tmp/sweep/amp_master_weights_lr01"  # its seed sweep (seed 0 is the run above)
for s in 1 2 3 4; do
  logged "$tmp/sweep/amp_master_weights_lr01/s$s.log" "$build/amp_master_weights" --lr 0.1 --seed "$s" \
    --out "$tmp/sweep/amp_master_weights_lr01/s$s"
done
fi

if want fp8_training; then
logged "$tmp/fp8_training.log" "$build/fp8_training" --csv "$tmp/fp8_training"
sed '/^wrote /,$d' "$tmp/fp8_training.log"
render curves "$tmp/fp8_training/curves.csv" fp8_scaling_curves.png \
  "FP8 scaling: amax x scale over the format max (above 1 saturates); delayed scaling lags the amax" --logy
render histogram "$tmp/fp8_training/hist.csv" fp8_histogram.png \
  "F32 values of the Fashion-MNIST MLP (last 20 steps) against the unscaled E4M3 and E5M2 ranges" --logy --markers fp8 \
  --labels "$tmp/fp8_training/layers.csv" --per-tensor \
  --note "left: what an FP8 cast with scale 1 would keep; right: each tensor at its own power-of-two scale"
# section 8's seed sweep (seed 0 is the run above) and the CNN
mkdir -p "$tmp/sweep/fp8_training"
for s in 1 2 3 4; do
  logged "$tmp/sweep/fp8_training/s$s.log" "$build/fp8_training" --seed "$s"
done
logged "$tmp/fp8_training_cnn.log" "$build/fp8_training" --model cnn --threads 2
sed -n '/^run /,/^sat/p' "$tmp/fp8_training_cnn.log"
fi

if want pure_bf16; then  # section 7's BF16 weights without masters
logged "$tmp/pure_bf16.log" "$build/pure_bf16"
sed -n '/^run /,/^kept/p' "$tmp/pure_bf16.log"
mkdir -p "$tmp/sweep/pure_bf16"  # its seed sweep (seed 0 is the run above)
for s in 1 2 3 4; do logged "$tmp/sweep/pure_bf16/s$s.log" "$build/pure_bf16" --seed "$s"; done
fi

if want bench_fp8; then  # section 8's cost of emulated FP8
logged "$tmp/bench_fp8.log" "$build/bench_fp8"
sed -n '/^m x in/,$p' "$tmp/bench_fp8.log"
fi

if want fashion_mnist_mlp; then  # section 6's table of every precision mode, and the README's
logged "$tmp/fashion_mnist_mlp.log" "$build/fashion_mnist_mlp" --compare --threads 2
sed -n '/^mode /,$p' "$tmp/fashion_mnist_mlp.log"
mkdir -p "$tmp/sweep/fashion_mnist_mlp"  # every mode with seeds 1-4 (seed 0 is the run above)
for s in 1 2 3 4; do
  logged "$tmp/sweep/fashion_mnist_mlp/s$s.log" "$build/fashion_mnist_mlp" --compare --threads 2 --seed "$s"
done
fi

if want inspect; then  # section 9: the first step of every precision mode through the inspectors, MLP and CNN
for net in mlp cnn; do
  logged "$tmp/fashion_mnist_${net}_inspect.log" "$build/fashion_mnist_$net" --compare --max-steps 1 \
    --inspect "$tmp/inspect/$net" --threads 2
done
sed -n "/^Memory ledger after the first step's forward/,\$p" "$tmp/fashion_mnist_cnn_inspect.log"
fi

if want amp_recipe; then  # section 9: the ledgers of PyTorch's recipe model (shapes only: a short timed run is enough)
  logged "$tmp/amp_recipe.log" "$build/amp_recipe" --batches 2 --epochs 1 --threads 2
  sed -n "/^Memory ledger of one more/,/^after backward/p" "$tmp/amp_recipe.log"
fi

if want complete_program; then  # section 10's complete program: the page's block, compiled and run as a user would
  "$python" "$root/tests/scripts/check_doc_code.py" --extract "$root/docs/AMP.md" "A complete program" >"$tmp/complete.cpp"
  echo "make_figures: compiling section 10's complete program ..."
  "${CXX:-g++}" -std=c++20 -O2 -I"$root" "$tmp/complete.cpp" -o "$tmp/complete" -L"$build" -lhalfgrad \
    -Wl,-rpath,"$build"
  (cd "$tmp" && OMP_NUM_THREADS=2 logged "$tmp/amp_complete_program.log" "$tmp/complete")
  cat "$tmp/amp_complete_program.log"
fi

# the blocks of the programs run above (the others keep their text)
printf 'total\t%s\n' "$(since "$t_start")" >>"$times"
"$python" "$root/scripts/doc_tables.py" update "$root/docs/AMP.md" "$tmp"
"$python" "$root/scripts/doc_tables.py" update "$root/README.md" "$tmp"  # the demo's table
echo "make_figures: done"
