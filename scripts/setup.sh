#!/usr/bin/env bash
# Installs what halfgrad needs to build and test, from Debian's archive only. Idempotent:
# a package already present is not touched, and apt is not called at all when nothing is missing.
set -euo pipefail
# python3-matplotlib renders the AMP figures (scripts/plot.py, scripts/make_figures.sh); the C++ programs
# never need it, and CTest's plot_selftest runs only where it is present.
pkgs=(g++ cmake ccache catch2 libeigen3-dev libdnnl-dev zlib1g-dev pkg-config dataset-fashion-mnist python3-matplotlib)
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
echo "setup: ok"
