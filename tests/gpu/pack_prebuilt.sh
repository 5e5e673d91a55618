#!/bin/bash
# Packs the GPU tests of a build for a machine that has a GPU and torch but no build toolchain
# (no abseil, no GoogleTest): the hook libraries, the test binaries (debug info stripped) and the
# abseil shared libraries they load. Then, on that machine, from the repository root:
#   tests/gpu/run_prebuilt.sh <out-dir>
# Usage: tests/gpu/pack_prebuilt.sh [build-dir] [out-dir]   (defaults: build-hooks build-gpu-pack)
set -euo pipefail
build=${1:-build-hooks}
out=${2:-build-gpu-pack}
rm -rf "$out" && mkdir -p "$out/hooks" "$out/bin" "$out/syslibs"
cp "$build"/hooks/*.so "$out/hooks/"
for t in fslog_counts cuda_backend_gpu_test torch_replace_gpu_test torch_observe_gpu_test; do
  cp "$build/tests/gpu/$t" "$out/bin/"
done
strip --strip-debug "$out"/hooks/*.so "$out"/bin/*
for f in "$out"/hooks/*.so "$out"/bin/*; do ldd "$f" 2>/dev/null; done | awk '/libabsl_/ {print $3}' |
  sort -u | xargs -r cp -L -t "$out/syslibs/"
du -sh "$out"
