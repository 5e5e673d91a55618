#!/usr/bin/env bash
# Packs the GPU allocator comparison for a GPU machine that has CUDA and torch but no Abseil,
# GoogleTest or Google Benchmark and no network: the binary (debug info stripped) into
# OUT_DIR/bin/ and the Abseil shared libraries it loads into OUT_DIR/syslibs/ (about 1.7 MB in
# all), the layout of tests/gpu/pack_prebuilt.sh, which packs the binary too when its build dir
# has it. This script needs only the binary built (e.g. in build-bench), adds to OUT_DIR and
# empties nothing, so it can follow pack_prebuilt.sh (which empties OUT_DIR) into the same one.
#
#   bench/pack_gpu.sh [BUILD_DIR] [OUT_DIR]     (defaults: build-bench build-gpu-pack)
#
# Then, on the GPU machine, from the repository root (see bench/README.md):
#   bench/run_suite.sh --gpu-only --no-build build-gpu-pack
set -euo pipefail
build=${1:-build-bench}
out=${2:-build-gpu-pack}
binary="$build/bench/gpu_allocator_comparison"
if [ ! -x "$binary" ]; then
  echo "pack_gpu.sh: $binary not built (configure with CUDA and LibTorch, then" \
    "cmake --build $build --target gpu_allocator_comparison)" >&2
  exit 1
fi
mkdir -p "$out/bin" "$out/syslibs"
cp "$binary" "$out/bin/"
strip --strip-debug "$out/bin/gpu_allocator_comparison"
ldd "$binary" | awk '/libabsl_/ {print $3}' | sort -u | xargs -r cp -L -t "$out/syslibs/"
du -sh "$out/bin/gpu_allocator_comparison" "$out/syslibs"
