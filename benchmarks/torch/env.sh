# What the PyTorch reference runs need on this CPU, sourced by benchmarks/compare_pytorch and benchmarks/compare_ddp:
# `blas`, the folder of OpenBLAS's OpenMP build (libopenblas0-openmp), to put first on LD_LIBRARY_PATH so that one
# OpenMP pool runs everything (the default pthread OpenBLAS fights the OpenMP pool over the cores), and
# OPENBLAS_CORETYPE.
blas=/usr/lib/x86_64-linux-gnu/openblas-openmp
# OpenBLAS 0.3.21 (Debian 12) does not recognise recent Xeons and falls back to its generic
# "Prescott" kernels, 4-5x slower (OPENBLAS_VERBOSE=2 prints the core it picked). Name the best
# kernel set this CPU runs, unless the caller already chose one.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  if grep -q avx512_bf16 /proc/cpuinfo; then export OPENBLAS_CORETYPE=COOPERLAKE
  elif grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SKYLAKEX
  elif grep -q avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=HASWELL
  fi
fi
