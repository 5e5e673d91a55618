#!/bin/bash
# Packs the GPU tests and tools of a build for a machine that has a GPU and torch but no build
# toolchain (no abseil, no GoogleTest): the hook libraries, the test binaries, the `fragscope`
# command line, the GPU benchmarks (bench/gpu_allocator_comparison, bench/gpu_history_overhead)
# and the host-CPU benchmarks (bench/allocator_benchmark, bench/observe_tracker_benchmark, into
# <out-dir>/bench/) when they were built, all with debug info stripped, the abseil and Google
# Benchmark shared libraries they load, and BUILD_INFO (commit, date, build type). Then, on that machine, from the
# repository root:
#   tests/gpu/run_prebuilt.sh <out-dir>          # the GPU tests
#   scripts/gpu_validate.sh OUT_DIR <out-dir>    # the whole GPU validation
#   LD_LIBRARY_PATH=<out-dir>/syslibs bench/ratio_rounds.sh <out-dir>   # the allocator's targets there
# Build first: cmake --build BUILD --target fragscope fragscope_alloc fragscope_preload
#   fragscope_torch fslog_counts cuda_backend_gpu_test torch_replace_gpu_test
#   torch_observe_gpu_test torch_observe_fraction_gpu_test [gpu_allocator_comparison
#   gpu_history_overhead allocator_benchmark observe_tracker_benchmark]
# Usage: tests/gpu/pack_prebuilt.sh [build-dir] [out-dir]   (defaults: build-hooks build-gpu-pack)
set -euo pipefail
build=${1:-build-hooks}
out=${2:-build-gpu-pack}
for f in fragscope tests/gpu/fslog_counts tests/gpu/cuda_backend_gpu_test \
         tests/gpu/torch_replace_gpu_test tests/gpu/torch_observe_gpu_test \
         tests/gpu/torch_observe_fraction_gpu_test; do
  [ -x "$build/$f" ] || { echo "pack_prebuilt: $build/$f is missing: build it first" >&2; exit 1; }
done
rm -rf "$out" && mkdir -p "$out/hooks" "$out/bin" "$out/bench" "$out/syslibs"
cp "$build"/hooks/*.so "$out/hooks/"
cp "$build/fragscope" "$out/bin/"
for t in fslog_counts cuda_backend_gpu_test torch_replace_gpu_test torch_observe_gpu_test \
         torch_observe_fraction_gpu_test; do
  cp "$build/tests/gpu/$t" "$out/bin/"
done
# The optional benchmarks, each into the pack's directory that the scripts look in.
for b in bin/gpu_allocator_comparison bin/gpu_history_overhead bench/allocator_benchmark \
         bench/observe_tracker_benchmark; do
  if [ -x "$build/bench/${b#*/}" ]; then
    cp "$build/bench/${b#*/}" "$out/$b"
  else
    echo "pack_prebuilt: no $build/bench/${b#*/} (not built): left out"
  fi
done
shopt -s nullglob  # bench/ may stay empty
strip --strip-debug "$out"/hooks/*.so "$out"/bin/* "$out"/bench/*
for f in "$out"/hooks/*.so "$out"/bin/* "$out"/bench/*; do ldd "$f" 2>/dev/null; done |
  awk '/libabsl_|libbenchmark/ {print $3}' | sort -u | xargs -r cp -L -t "$out/syslibs/"
{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git status --porcelain \
    --untracked-files=no 2>/dev/null | grep -q . && echo ' (with uncommitted changes)')"
  echo "packed $(date -u '+%Y-%m-%d %H:%M:%S UTC') from $build"
  echo "build type $(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null)"
  echo "binaries $(cd "$out/bin" && echo *)"
} > "$out/BUILD_INFO"
cat "$out/BUILD_INFO"
du -sh "$out"
