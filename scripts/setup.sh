#!/usr/bin/env bash
# Installs what halfgrad needs to build and test, from Debian's archive only. Idempotent:
# a package already present is not touched, and apt is not called at all when nothing is missing.
#   bash scripts/setup.sh            # what the tests need (scripts/test.sh)
#   bash scripts/setup.sh --demo     # what the demo needs: no CUDA tools, no MPI (the demo builds neither)
set -euo pipefail
cuda_tools=1
case "${1:-}" in
  "") ;;
  --demo) cuda_tools=0 ;;
  *) echo "setup: unknown argument '$1' (use --demo or nothing)" >&2; exit 2 ;;
esac
# python3-matplotlib renders the AMP figures (scripts/plot.py, scripts/make_figures.sh); the C++ programs
# never need it, and CTest's plot_selftest runs only where it is present.
pkgs=(g++ cmake ccache catch2 libeigen3-dev libdnnl-dev zlib1g-dev pkg-config dataset-fashion-mnist python3-matplotlib)
# With the CUDA toolkit: python3-venv for the venv that holds cuobjdump (below).
[ "$cuda_tools" = 1 ] && [ -x /usr/local/cuda/bin/nvcc ] && pkgs+=(python3-venv)
# Open MPI for hg::dist's MPI backend and its multi-rank tests (mpirun); the demo needs neither.
[ "$cuda_tools" = 1 ] && pkgs+=(libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then
  echo "setup: CUDA found in /usr/local/cuda (add /usr/local/cuda/bin to PATH to use nvcc directly)"
fi
# cuobjdump, with which CTest's cuda_archs checks which GPUs the built CUDA backend runs on, is not part of
# every toolkit install; NVIDIA publishes it on PyPI. It goes into a venv inside the checkout
# (.cuda-tools/, git-ignored) and is linked as .cuda-tools/bin/cuobjdump. Pinned to one release (PyPI
# has none older than 13.2; it reads the 13.0 toolkit's binaries). A failed download only warns: CTest
# cuda_archs then fails and says why.
tools="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.cuda-tools"
install_cuobjdump() {
  echo "setup: installing cuobjdump from PyPI (nvidia-cuda-cuobjdump) into $tools"
  /usr/bin/python3 -m venv "$tools" || return 1
  "$tools/bin/pip" install -q --disable-pip-version-check "nvidia-cuda-cuobjdump==13.2.86" || return 1
  local bin
  bin="$(find "$tools/lib" -path '*/nvidia/*/bin/cuobjdump' | head -n 1)"
  [ -n "$bin" ] && ln -sf "$bin" "$tools/bin/cuobjdump"
}
if [ "$cuda_tools" = 1 ] && [ -x /usr/local/cuda/bin/nvcc ] && [ ! -x /usr/local/cuda/bin/cuobjdump ] && [ ! -x "$tools/bin/cuobjdump" ]; then
  install_cuobjdump || echo "setup: warning: cuobjdump could not be installed; CTest cuda_archs will fail"
fi
echo "setup: ok"
