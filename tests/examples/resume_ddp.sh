#!/usr/bin/env bash
# A --ddp run resumes bit for bit on the same number of ranks, and on another number of ranks (and in one process)
# with the same weights up to the order of the gradients' sums: 2 epochs straight on 2 ranks against 1 epoch on 2
# ranks + --resume for the second on 2 ranks (byte-identical checkpoints), on 3 ranks and in one process (the
# weights' largest difference to the straight run under a twentieth of what the second epoch changed).
# With --zero among the flags (ZeroRedundantOptimizer: rank 0 saves the state consolidated from every rank's shard),
# the straight run's checkpoint is also byte-identical to one without --zero, and the one-process run drops --zero.
#   resume_ddp.sh MPIEXEC EXE [example flags...]
# Uses the first 3000 training images of /usr/share/datasets/fashion-mnist; the global batch is 48 (1, 2 and 3 ranks).
set -euo pipefail
mpiexec="$1" exe="$2"
shift 2
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
zero=0
for f in "$@"; do [ "$f" = --zero ] && zero=1; done
run() {  # run RANKS ARGS...: RANKS 0 is one process without --ddp (nor --zero)
  local ranks="$1"
  shift
  if [ "$ranks" = 0 ]; then
    local plain=()
    for f in "$@"; do [ "$f" = --zero ] || plain+=("$f"); done
    "$exe" "${plain[@]}" --limit 3000 --batch 48 --threads 1 >"$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
  else "$mpiexec" -np "$ranks" "$exe" "$@" --ddp --limit 3000 --batch 48 >"$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }
  fi
}
run 2 "$@" --epochs 2 --save "$dir/straight.safetensors"
run 2 "$@" --epochs 1 --save "$dir/first.safetensors"
run 2 "$@" --epochs 2 --resume "$dir/first.safetensors" --save "$dir/resumed2.safetensors"
grep -q "resumed from" "$dir/log" || { echo "resume_ddp.sh: the run did not say it resumed"; cat "$dir/log"; exit 1; }
if ! cmp "$dir/straight.safetensors" "$dir/resumed2.safetensors"; then
  echo "resume_ddp.sh: FAILED: resumed on 2 ranks, the checkpoint differs from the straight run's ($*)"
  exit 1
fi
if [ "$zero" = 1 ]; then
  plain=()
  for f in "$@"; do [ "$f" = --zero ] || plain+=("$f"); done
  run 2 "${plain[@]}" --epochs 2 --save "$dir/plain.safetensors"
  if ! cmp "$dir/straight.safetensors" "$dir/plain.safetensors"; then
    echo "resume_ddp.sh: FAILED: the --zero run's checkpoint differs from the same run's without --zero ($*)"
    exit 1
  fi
fi
run 3 "$@" --epochs 2 --resume "$dir/first.safetensors" --save "$dir/resumed3.safetensors"
run 0 "$@" --epochs 2 --resume "$dir/first.safetensors" --save "$dir/resumed1.safetensors"
# the model's weights of two checkpoints: the largest difference relative to the largest weight
python3 - "$dir/straight.safetensors" "$dir/resumed3.safetensors" "$dir/resumed1.safetensors" "$dir/first.safetensors" <<'PY'
import json, struct, sys
def weights(path):  # the model's F32 and F16 tensors as lists of floats (the standard library only)
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n])
    out = {}
    for k, v in head.items():
        if k == "__metadata__" or not k.startswith("model.") or v["dtype"] not in ("F32", "F16"):
            continue
        a, b = v["data_offsets"]
        code, size = ("f", 4) if v["dtype"] == "F32" else ("e", 2)
        out[k] = struct.unpack(f"<{(b - a) // size}{code}", raw[8 + n + a:8 + n + b])
    return out
ref = weights(sys.argv[1])
assert ref, "no F32 or F16 model tensors in the checkpoint"
scale = max(abs(x) for t in ref.values() for x in t)
def rel(path):
    w = weights(path)
    assert w.keys() == ref.keys(), f"{path}: other tensors"
    return max(abs(x - y) for k in ref for x, y in zip(w[k], ref[k])) / scale
r3, r1, first = rel(sys.argv[2]), rel(sys.argv[3]), rel(sys.argv[4])
print(f"resume_ddp.sh: resumed on 3 ranks {r3:.2e}, in one process {r1:.2e}, epoch 1 alone {first:.2e} "
      "(largest weight difference to the straight run, relative)")
ok = max(r3, r1) < first / 20  # the sums in another order part the runs far less than an epoch moves them
sys.exit(0 if ok else 1)
PY
echo "resume_ddp.sh: resumed bit for bit on 2 ranks, within reduction order on 3 ranks and in one process ($*)"
