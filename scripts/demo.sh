#!/usr/bin/env bash
# The main job: builds halfgrad (installing what is missing) and trains a small MLP in F32 and with
# F16 parameters + F32 master weights, printing both loss curves side by side.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export CCACHE_DIR="${CCACHE_DIR:-$HOME/.cache/ccache}" CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache >/dev/null
cmake --build build -j"${HG_JOBS:-2}" --target mlp_demo
./build/mlp_demo "$@"
