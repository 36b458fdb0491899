#!/usr/bin/env bash
# Packs a CUDA build made here for a lent GPU machine that lacks the build's dependencies and reaches no
# network (the device tool's machines): the build folder without its object files, the shared libraries
# that machine may lack (oneDNN and what ldd names beside it), and Fashion-MNIST, into .gpustage/
# (git-ignored), with .gpustage/run.sh, which unpacks them at the build's own absolute path there and runs
# `HG_PREBUILT=1 QUICK=1 scripts/gpu-check.sh`.
#
#   cmake -S . -B build-gpu -G Ninja -DHG_CUDA=ON -DHG_CUDA_ARCHS=90 -DCMAKE_BUILD_TYPE=Release \
#         -DHG_BUILD_TESTS=ON -DHG_BUILD_EXAMPLES=ON && ninja -C build-gpu
#   scripts/gpu-stage.sh [build-gpu]
#   # then on the GPU machine (the device tool: carry [".gpustage"]):  bash .gpustage/run.sh
#
# The device tool carries at most 64 MiB: the archive is xz-compressed and its size printed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build-gpu}" && pwd)"
stage="$root/.gpustage"
[ -x "$build/tests/hg_gpu_tests" ] || { echo "gpu-stage: $build/tests/hg_gpu_tests is missing: build with -DHG_CUDA=ON first"; exit 1; }
rm -rf "$stage" && mkdir -p "$stage/lib" "$stage/fmnist"
hostname > "$build/.built-on"
lscpu | sed -n 's/^Model name: *//p' >> "$build/.built-on"

# libraries outside the C/C++ runtime and the CUDA driver stack, which a bare GPU machine may not have
for f in "$build/tests/hg_gpu_tests" "$build"/libhalfgrad*.so* "$build"/fashion_mnist_mlp; do
  [ -e "$f" ] || continue
  ldd "$f" | awk '/=> \//{print $3}'
done | sort -u | grep -E 'libdnnl|libz\.so|libgomp|libtbb' | while read -r lib; do cp -L "$lib" "$stage/lib/"; done

data="${HG_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"
cp "$data"/*-ubyte.gz "$stage/fmnist/" 2>/dev/null || echo "gpu-stage: warning: no Fashion-MNIST in $data (the training rows will be skipped)"

tar -C / -cJf "$stage/build.tar.xz" --exclude='*.o' --exclude='*.o.d' --exclude='.ninja_*' \
  --exclude='CMakeFiles/*.dir' --exclude='CMakeFiles/[0-9]*' "${build#/}"
tar -C "$stage" -cJf "$stage/lib.tar.xz" lib && rm -rf "$stage/lib"   # oneDNN is 40 MB, 8 MB compressed
cat > "$stage/run.sh" <<EOF
#!/usr/bin/env bash
# made by scripts/gpu-stage.sh on $(date -u +%F): unpacks $build here and runs the GPU check
set -uo pipefail
here="\$(cd "\$(dirname "\${BASH_SOURCE[0]}")/.." && pwd)"
src="$root"
if [ "\$here" != "\$src" ]; then   # the build's absolute paths point into \$src: make it this checkout
  mkdir -p "\$(dirname "\$src")" && { [ -e "\$src" ] || ln -s "\$here" "\$src"; }
fi
tar -C / -xJf "\$here/.gpustage/build.tar.xz"
tar -C "\$here/.gpustage" -xJf "\$here/.gpustage/lib.tar.xz"
export LD_LIBRARY_PATH="\$here/.gpustage/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export HG_FASHION_MNIST_DIR="\$here/.gpustage/fmnist"
HG_PREBUILT=1 QUICK=1 BUILD_DIR="$build" bash "\$src/scripts/gpu-check.sh"
EOF
chmod +x "$stage/run.sh"
du -sh "$stage"/* | sed 's/^/gpu-stage: /'
echo "gpu-stage: run with the device tool: command 'bash .gpustage/run.sh', carry [\".gpustage\"]"
