#!/usr/bin/env bash
# Data-parallel training against one process, in every precision mode: fashion_mnist_mlp --compare (3 epochs, global
# batch 64) in one process with one thread and under `mpirun -np RANKS --ddp`, for seeds 1-5, then one table of test
# accuracies: per mode the five seeds of each run, their means and the difference of the means.
#   bash scripts/ddp_accuracy.sh [--ranks N] [--build DIR] [--seeds "1 2 3 4 5"]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=2 build=build seeds="1 2 3 4 5"
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    *) echo "usage: $0 [--ranks N] [--build DIR] [--seeds \"1 2 3 4 5\"]" >&2; exit 2 ;;
  esac
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for seed in $seeds; do
  echo "seed $seed..." >&2
  "$build/fashion_mnist_mlp" --epochs 3 --compare --threads 1 --seed "$seed" | grep '^{' | sed 's/^/single /' >> "$out"
  mpirun -np "$ranks" "$build/fashion_mnist_mlp" --epochs 3 --compare --ddp --seed "$seed" | grep '^{' |
    sed 's/^/ddp /' >> "$out"
done
python3 - "$out" "$ranks" <<'PY'
import collections, json, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    r = json.loads(js)
    runs[(r["mode"], who)].append(r["test_accuracy"])
print(f"{'mode':9} {'one process (seeds)':>36} {sys.argv[2] + ' ranks --ddp (seeds)':>36} {'means':>15} {'diff':>7}")
for mode in ("fp32", "fp16-O1", "fp16-O2", "fp16-O3", "bf16-O1"):
    a, b = runs[(mode, "single")], runs[(mode, "ddp")]
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    print(f"{mode:9} {' '.join(f'{v:.4f}' for v in a):>36} {' '.join(f'{v:.4f}' for v in b):>36} "
          f"{ma:.4f} {mb:.4f} {100 * (mb - ma):+6.2f}p")
print("test accuracy after 3 epochs of the MLP, global batch 64; diff: the --ddp mean minus the one-process mean")
PY
