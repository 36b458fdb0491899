#!/usr/bin/env bash
# The Fashion-MNIST MLP trains on the CUDA device as on the CPU: the same flags on both devices, and the
# test accuracies after one short epoch must agree within 0.02 (the GPU adds in another order, so the
# bits differ; a wrong kernel, a scaler that never steps or a lost gradient does not stay within 0.02).
# On a build with the emulated device (HG_CUDA=EMULATE) this is the whole training loop, GradScaler's
# device path included, run by halfgrad's own kernels on the CPU. Exits 77 (skipped) on a machine without
# a CUDA device.
# With --graph the CUDA run replays a captured step (examples/train_common.h's GraphedStep).
# With --mpi MPIEXEC first, the CUDA run is data-parallel on 2 ranks (--ddp, one thread each: on one GPU its
# collectives staged through host memory, with a GPU per rank through NCCL, as on the emulated device with
# HG_EMU_GPU_PER_PROCESS=1, which CTest sets) and the CPU run is one process with the same global batch.
#   device_training.sh [--mpi MPIEXEC] EXE [example flags...]   e.g. device_training.sh build/fashion_mnist_mlp --amp fp16
set -euo pipefail
mpi=""
if [ "$1" = --mpi ]; then
  mpi="$2"
  shift 2
fi
exe="$1"
shift
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
train() {  # train TAG FLAGS...: one short epoch; the test accuracy goes to $dir/acc.TAG
  local tag="$1" run=("$exe") threads=2
  shift
  if [ -n "$mpi" ] && [ "$tag" = cuda ]; then
    run=("$mpi" -np 2 "$exe" --ddp)
    threads=1
  fi
  if ! "${run[@]}" "$@" --epochs 1 --limit 2000 --threads "$threads" >"$dir/log.$tag" 2>&1; then
    # a machine without a GPU (and a build without the emulated device): nothing to compare with
    grep -q "no CUDA device is available" "$dir/log.$tag" && { echo "device_training.sh: skipped: no CUDA device"; exit 77; }
    cat "$dir/log.$tag"
    exit 1
  fi
  sed -n 's/.*"test_accuracy": \([0-9.]*\).*/\1/p' "$dir/log.$tag" >"$dir/acc.$tag"
}
train cuda "$@" --device cuda
cpu_flags=()  # --graph is CUDA's: the CPU run trains eagerly (and keeps its last partial batch)
for f in "$@"; do [ "$f" = --graph ] || [ "$f" = --zero ] || cpu_flags+=("$f"); done
train cpu "${cpu_flags[@]}" --device cpu
cpu="$(cat "$dir/acc.cpu")"
cuda="$(cat "$dir/acc.cuda")"
if [ -z "$cpu" ] || [ -z "$cuda" ]; then
  echo "device_training.sh: no test_accuracy in the output"
  cat "$dir"/log.*
  exit 1
fi
echo "device_training.sh: test accuracy cpu $cpu, cuda $cuda ($*${mpi:+; the CUDA run on 2 ranks})"
if [ -n "$mpi" ]; then
  grep -h "CUDA tensors through" "$dir/log.cuda" || true
  # a GPU per rank on the emulated device: the run must have gone through NCCL (its stand-in), not host staging
  if [ "${HG_EMU_GPU_PER_PROCESS:-}" = 1 ] && ! grep -q "CUDA tensors through .*NCCL" "$dir/log.cuda"; then
    echo "device_training.sh: with a GPU per rank the CUDA tensors should go through NCCL"
    exit 1
  fi
fi
grep -h '"device"' "$dir/log.cuda" | head -n 1
if ! awk -v a="$cpu" -v b="$cuda" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.02 && a > 0.3) }'; then
  echo "device_training.sh: FAILED: the accuracies differ by more than 0.02 (or the CPU run did not learn)"
  exit 1
fi
