#!/usr/bin/env bash
# A Fashion-MNIST example resumes bit for bit: 2 epochs straight, and 1 epoch + --resume for the second,
# must write byte-identical checkpoints (model, optimizer with masters and moments, scaler, RNG, step).
#   resume.sh EXE [example flags...]      e.g. resume.sh build/fashion_mnist_mlp --amp fp16 --opt-level O2
# Uses the first 3000 training images of /usr/share/datasets/fashion-mnist (scripts/setup.sh installs it).
set -euo pipefail
exe="$1"
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
limit="${HG_RESUME_LIMIT:-3000}"  # training images (CTest gives the sanitizer build fewer)
run() { "$exe" "$@" --limit "$limit" --threads 2 >"$dir/log" 2>&1 || { cat "$dir/log"; exit 1; }; }
run "$@" --epochs 2 --save "$dir/straight.safetensors"
run "$@" --epochs 1 --save "$dir/first.safetensors"
run "$@" --epochs 2 --resume "$dir/first.safetensors" --save "$dir/resumed.safetensors"
grep -q "resumed from" "$dir/log" || { echo "resume.sh: the run did not say it resumed"; cat "$dir/log"; exit 1; }
if cmp -s "$dir/straight.safetensors" "$dir/first.safetensors"; then
  echo "resume.sh: epoch 1 and epoch 2 checkpoints are identical: the test would prove nothing"
  exit 1
fi
if ! cmp "$dir/straight.safetensors" "$dir/resumed.safetensors"; then
  echo "resume.sh: FAILED: the resumed run's checkpoint differs from the straight run's ($*)"
  exit 1
fi
echo "resume.sh: identical checkpoints after 2 epochs straight and 1 + resumed 1 ($*)"
