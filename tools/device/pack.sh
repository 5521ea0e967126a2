#!/usr/bin/env bash
# Packs what a device pass (tools/device/check.sh) runs into .device/, the one
# ignored folder the device tool carries to a lent GPU machine: the build's
# ftrun, stock plugins, CUDA checks and GPU benchmarks, with the shared
# libraries they need that the device's image may lack. The CUDA libraries a
# GPU image has anyway (cuBLAS, cuBLASLt, NCCL; hundreds of MB) stay behind,
# named in .device/needs, and check.sh finds them there. The device tool
# carries 64 MiB at most, the working tree included.
#
#   cmake --preset release -DFT_BUILD_BENCH=ON -DFT_BUILD_CUDA_CHECKS=ON \
#         -DCMAKE_CUDA_ARCHITECTURES="80;90" && cmake --build --preset release
#   (a build machine without a GPU otherwise makes PTX only and no CUDA checks)
#   bash tools/device/pack.sh [BUILD_DIR]        (default build/release)
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build/release}" && pwd)"
out="$root/.device"

cd "$build"
[ -x bin/ftrun ] && [ -f lib/ft/plugins/libft_cuda.so ] ||
  { echo "pack: $build has no ftrun or no CUDA plugin: build it with nvcc first" >&2; exit 1; }
[ -x bin/cuda_device_check ] ||
  { echo "pack: $build has no CUDA checks: configure it with -DFT_BUILD_CUDA_CHECKS=ON (see the top of this script)" >&2; exit 1; }
if [ -f build.ninja ] && ! ninja -n | grep -q "no work to do"; then
  echo "pack: warning: $build is not up to date with the sources; build it before packing" >&2
fi
files=(bin/ftrun lib/ft/plugins/libft_cpu.so lib/ft/plugins/libft_cuda.so)
for f in bin/cuda_* bin/bench_cuda_*; do [ -x "$f" ] && files+=("$f"); done

rm -rf "$out"
mkdir -p "$out/lib"
dependencies="$(for f in "${files[@]}"; do ldd "$f"; done)"
if grep -q "not found" <<<"$dependencies"; then
  grep "not found" <<<"$dependencies" | sort -u >&2
  echo "pack: libraries missing here (above)" >&2
  exit 1
fi
# The libraries every Linux image has are not copied, and the CUDA ones a GPU
# image has are named for check.sh to find.
every_image='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.)'
gpu_image='^(libcublas|libnccl)'
awk '$3 ~ /^\// {print $1, $3}' <<<"$dependencies" | sort -u | while read -r soname path; do
  if [[ "$soname" =~ $gpu_image ]]; then echo "$soname" >>"$out/needs"
  elif ! [[ "$soname" =~ $every_image ]]; then cp -L "$path" "$out/lib/$soname"
  fi
done

tar -cJf "$out/payload.tar.xz" "${files[@]}"
tar -cJf "$out/libraries.tar.xz" -C "$out/lib" .
libraries=$(ls "$out/lib" | wc -l)
rm -rf "$out/lib"
git -C "$root" describe --always --dirty >"$out/commit"
# What travels: the working tree (tracked and untracked files git does not ignore) and .device.
tree_bytes=$(git -C "$root" ls-files -z -co --exclude-standard | (cd "$root" && du -cb --files0-from=- | tail -1 | cut -f1))
device_bytes=$(du -sb "$out" | cut -f1)
echo "pack: ${#files[@]} programs and $libraries libraries, $((device_bytes >> 20)) MiB compressed in .device" \
  "($(cat "$out/commit")), $(((tree_bytes + device_bytes) >> 20)) MiB with the working tree"
((tree_bytes + device_bytes < 64 << 20)) || { echo "pack: over the device tool's 64 MiB" >&2; exit 1; }
