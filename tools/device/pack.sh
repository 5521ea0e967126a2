#!/usr/bin/env bash
# Packs what a device pass (tools/device/check.sh) runs into .device/, the one
# ignored folder the device tool carries to a lent GPU machine: the build's
# ftrun, stock plugins, CUDA checks and GPU benchmarks, with the shared
# libraries they need that the device's image may lack. The CUDA libraries a
# GPU image has anyway (cuBLAS, cuBLASLt, NCCL; hundreds of MB) stay behind
# and check.sh finds them there. The device tool carries 64 MiB at most.
#
#   cmake --preset release -DFT_BUILD_BENCH=ON && cmake --build --preset release
#   bash tools/device/pack.sh [BUILD_DIR]        (default build/release)
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "${1:-$root/build/release}" && pwd)"
out="$root/.device"

cd "$build"
[ -x bin/ftrun ] && [ -f lib/ft/plugins/libft_cuda.so ] ||
  { echo "pack: $build has no ftrun or no CUDA plugin: build it with nvcc first" >&2; exit 1; }
files=(bin/ftrun lib/ft/plugins/libft_cpu.so lib/ft/plugins/libft_cuda.so)
for f in bin/cuda_* bin/bench_cuda_*; do [ -x "$f" ] && files+=("$f"); done

rm -rf "$out"
mkdir -p "$out/lib"
# The libraries every Linux image has, and the CUDA ones a GPU image has, are not copied.
keep_behind='^(linux-vdso|ld-linux|libc\.|libm\.|libdl\.|libpthread\.|librt\.|libstdc\+\+|libgcc_s|libcuda\.|libcublas|libnccl)'
for f in "${files[@]}"; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}'
done | sort -u | while read -r lib; do
  base="$(basename "$lib")"
  [[ "$base" =~ $keep_behind ]] || cp -L "$lib" "$out/lib/$base"
done

tar -cJf "$out/payload.tar.xz" "${files[@]}"
tar -cJf "$out/libraries.tar.xz" -C "$out/lib" .
libraries=$(ls "$out/lib" | wc -l)
rm -rf "$out/lib"
git -C "$root" rev-parse HEAD >"$out/commit"
size=$(du -sm "$out" | cut -f1)
echo "pack: ${#files[@]} programs and $libraries libraries, $size MiB compressed in .device, from $build"
((size < 64)) || { echo "pack: .device is over the device tool's 64 MiB" >&2; exit 1; }
