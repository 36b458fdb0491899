#!/usr/bin/env bash
# The misuse catalogue (issue 12): every bad command line and bad target found by a hostile user, with
# the exit status and the message each must give. No case may crash, hang or train.
#   bash tests/examples/misuse.sh BUILD_DIR
set -uo pipefail
build="$1"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
failures=0
cases=0

# expect STATUS MESSAGE PROGRAM ARGS...: the program (run with a 60 s limit) exits with STATUS and its
# output holds MESSAGE.
expect() {
  local want="$1" msg="$2" prog="$3"
  shift 3
  cases=$((cases + 1))
  timeout 60 "$build/$prog" "$@" >"$dir/out" 2>&1
  local rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$msg" "$dir/out"; then
    failures=$((failures + 1))
    echo "FAIL: $prog $* -> exit $rc (want $want), wanted the message: $msg"
    sed 's/^/    /' "$dir/out" | head -n 5
  else
    echo "ok:   $prog $* -> exit $rc: $(grep -F -m1 -- "$msg" "$dir/out" | cut -c1-150)"
  fi
}

mlp=fashion_mnist_mlp
# numbers: the whole string, in range for the type, no sign on unsigned values, finite, positive
expect 2 "bad value '100000' for --threads: it must be at most" $mlp --threads 100000
expect 2 "bad value '20000' for --threads: it must be at most" $mlp --threads 20000
expect 2 "bad value '-1' for --threads: it must be at least 1" $mlp --threads -1
expect 2 "bad value '4294967297' for --epochs: out of range for a 32-bit integer" $mlp --epochs 4294967297
expect 2 "bad value '2147483648' for --epochs: out of range for a 32-bit integer" $mlp --epochs 2147483648
# --ddp's flags: a hook without --ddp, an unknown hook, a captured step, an inspector of one process
expect 2 "--ddp-hook picks how --ddp averages; add --ddp" $mlp --ddp-hook fp16
expect 2 "ddp-hook must be fp16 or bf16, got f8" $mlp --ddp --ddp-hook f8
expect 2 "--graph captures one process's step, and --ddp's all-reduces wait" $mlp --ddp --graph --device cuda
expect 2 "--zero shards the optimizer over the ranks of --ddp; add --ddp" $mlp --zero
expect 2 "--inspect looks at one process's step" $mlp --ddp --inspect /tmp/x
expect 2 "bad value '0' for --epochs: it must be at least 1" $mlp --epochs 0
expect 2 "bad value '-1' for --seed: expected a whole number without a sign" $mlp --seed -1
expect 2 "bad value '18446744073709551616' for --seed: out of range" $mlp --seed 18446744073709551616
expect 2 "bad value 'inf' for --lr: it must be finite" $mlp --lr inf
expect 2 "bad value 'nan' for --lr: it must be finite" $mlp --lr nan
expect 2 "bad value '-0.1' for --lr: it must be > 0" $mlp --lr -0.1
expect 2 "bad value '-5' for --limit: it must be at least 1" $mlp --limit -5
expect 2 "bad value '-1' for --max-steps: it must be at least 1" $mlp --max-steps -1
expect 2 "bad value ' 3' for --epochs: expected a 32-bit integer" $mlp --epochs " 3"
expect 2 "bad value '3x' for --batch: expected a 64-bit integer, the whole value (it has 'x' after the number)" \
  $mlp --batch 3x
expect 2 "bad value '10abc' for --hidden: expected a 32-bit integer, the whole value" mlp_demo --hidden 10abc
expect 2 "bad value '2000000000' for --hidden: it must be at most 1048576" mlp_demo --hidden 2000000000
expect 2 "bad value '100000' for --threads: it must be at most" amp_recipe --threads 100000
expect 2 "bad value 'gpu' for --device: expected cpu or cuda" amp_recipe --device gpu
expect 2 "--zero shards the optimizer over the ranks of --ddp; add --ddp" amp_recipe --zero
expect 2 "bad value '0' for --steps: it must be at least 1" bench_train --steps 0
expect 2 "bad value '1.5' for --steps" amp_underflow --steps 1.5 --out "$dir/u"
# --save is checked before training: a directory, a device, a FIFO, a folder that does not exist
mkfifo "$dir/fifo"
expect 2 "--save: '$dir' is a directory; pass a file name inside it" $mlp --save "$dir"
expect 2 "--save: '/dev/null' is a character device; halfgrad only replaces regular files" $mlp --save /dev/null
expect 2 "is a FIFO" $mlp --save "$dir/fifo"
expect 2 "--save: cannot create '$dir/no/such/c.safetensors.hg-tmp." $mlp --save "$dir/no/such/c.safetensors"
# readers: a FIFO or a directory as the data is refused at once (it used to block for ever)
mkdir -p "$dir/fifo_data"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  mkfifo "$dir/fifo_data/$f"
done
expect 1 "is a FIFO; halfgrad reads only regular files" $mlp --data "$dir/fifo_data"
# --inspect under a regular file: refused before training
: >"$dir/plainfile"
expect 2 "--inspect: cannot make the folder '$dir/plainfile/sub': Not a directory; pass a folder path" $mlp \
  --inspect "$dir/plainfile/sub"
expect 2 "--inspect: cannot make the folder '$dir/plainfile': Not a directory" $mlp --inspect "$dir/plainfile"

echo "misuse catalogue: $((cases - failures)) of $cases cases give the expected status and message"
[ "$failures" = 0 ]
