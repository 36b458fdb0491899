#!/usr/bin/env bash
# The main job: builds halfgrad (installing what is missing, Fashion-MNIST included) and trains on
# Fashion-MNIST in every precision mode -- FP32, FP16 O1 (autocast + loss scaling), FP16 O2 (F16 weights,
# FP32 masters), FP16 O3 (pure F16) and BF16 autocast -- from the same initial weights, then prints one
# table: test accuracy, ms/step, peak tensor memory, skipped steps, final loss scale.
#   bash scripts/demo.sh              # MLP 784-256-128-10, SGD momentum, 3 epochs per mode (about a minute)
#   bash scripts/demo.sh --cnn        # 2-conv CNN, Adam, 2 epochs per mode (several minutes)
# Other flags go to the example program (--epochs N --batch N --lr X --seed N --threads N --device
# cpu|cuda --data DIR --limit N). With --amp/--opt-level/--save/--resume it trains that one mode only.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --demo  # the demo builds no CUDA code: no CUDA tools installed for it
example=fashion_mnist_mlp
args=()
compare=(--compare)
for a in "$@"; do
  case "$a" in
    --cnn) example=fashion_mnist_cnn ;;
    --amp|--opt-level|--save|--resume) compare=(); args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build -j"${HG_JOBS:-2}" --target "$example"
./build/"$example" "${compare[@]}" "${args[@]}"
