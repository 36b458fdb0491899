#!/usr/bin/env bash
# The main job: builds halfgrad (installing what is missing, Fashion-MNIST included) and trains on
# Fashion-MNIST: the MLP by default, the CNN with --cnn. Other flags go to the example program
# (--epochs N --batch N --lr X --seed N --threads N --device cpu|cuda --data DIR).
#   bash scripts/demo.sh              # MLP 784-256-128-10, SGD momentum, 3 epochs
#   bash scripts/demo.sh --cnn        # 2-conv CNN, Adam, 2 epochs
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
example=fashion_mnist_mlp
args=()
for a in "$@"; do
  if [ "$a" = "--cnn" ]; then example=fashion_mnist_cnn; else args+=("$a"); fi
done
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build -j"${HG_JOBS:-2}" --target "$example"
./build/"$example" "${args[@]}"
